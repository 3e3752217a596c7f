// Device paths: which members share a GPU, and NCCL started on a group or the staged path.
#include "training/device_path.hpp"

#include <algorithm>
#include <cstring>
#include <future>

#include "backends/comm/channelled_communicator.hpp"
#include "backends/comm/staged_communicator.hpp"
#include "backends/transport/wait.hpp"
#include "common/hash.hpp"
#include "training/transfer_tags.hpp"

namespace troupe {

std::string members_text(const GroupMembers& g) {
  std::string s = "(stage actors";
  for (int r : g.ranks) s.append(" ").append(std::to_string(r));
  return s.append(")");
}

namespace {

// The exchanges while building: bounded, every operation aborted past the bound.
Status exchange(HostCommunicator& c, std::chrono::milliseconds limit, const std::string& what,
                const std::function<void(Completion)>& start) {
  return wait_for(start, limit, c.transport(), what + " (" + c.name() + " group)");
}

}  // namespace

// A GPU's identity as two floats of 24 bits each (exact in f32), summed over
// the world from a table that is zero except at each rank's own place.
Expected<std::vector<std::uint64_t>> exchange_gpu_identities(HostCommunicator& world, const ComputeDevice& device,
                                                             std::chrono::milliseconds limit) {
  const std::string id = device.hardware_id();
  const std::uint64_t h = id.empty() ? 0 : (fnv1a(id) & 0xffffffffffffull) | 1;  // 0: no identity
  std::vector<float> table(static_cast<std::size_t>(2 * world.size()), 0.0f);
  table[static_cast<std::size_t>(2 * world.index())] = static_cast<float>(h >> 24);
  table[static_cast<std::size_t>(2 * world.index() + 1)] = static_cast<float>(h & 0xffffff);
  TROUPE_TRY(exchange(world, limit, "the GPU identities' exchange",
                      [&](Completion c) { world.all_reduce(table.data(), table.size(), std::move(c)); }));
  std::vector<std::uint64_t> ids(static_cast<std::size_t>(world.size()));
  for (std::size_t r = 0; r < ids.size(); ++r)
    ids[r] = (static_cast<std::uint64_t>(table[2 * r]) << 24) | static_cast<std::uint64_t>(table[2 * r + 1]);
  return ids;
}

namespace {

// Two members of `g` on one GPU (or without an identity), as "X and Y"; "" if none.
std::string shared_gpu(const GroupMembers& g, const std::vector<std::uint64_t>& ids) {
  for (std::size_t a = 0; a < g.ranks.size(); ++a)
    for (std::size_t b = a + 1; b < g.ranks.size(); ++b) {
      const std::uint64_t ia = ids[static_cast<std::size_t>(g.ranks[a])], ib = ids[static_cast<std::size_t>(g.ranks[b])];
      if (ia == 0 || ia == ib)
        return "stage actors " + std::to_string(g.ranks[a]) + " and " + std::to_string(g.ranks[b]);
    }
  return "";
}

struct NcclAttempt {
  std::unique_ptr<Communicator> comm;
  std::string why_not;
};

// Member 0's `count` NCCL unique ids, broadcast over the host ring (a flag
// float, then each id's length and bytes); none where member 0 could not
// make them, `why_not` saying why there.
Expected<std::vector<std::string>> broadcast_nccl_ids(HostCommunicator& host, ComputeDevice& device, std::size_t count,
                                                     std::chrono::milliseconds limit, std::string& why_not) {
  constexpr std::size_t kIdFloats = 64;  // room for NCCL's 128-byte id and its length
  std::vector<float> message(1 + count * kIdFloats, 0.0f);
  if (host.index() == 0) {
    message[0] = 1;
    for (std::size_t i = 0; i < count; ++i) {
      auto id = device.nccl_unique_id();
      if (!id || id->size() > (kIdFloats - 1) * sizeof(float)) {
        why_not = id ? "NCCL's unique id is larger than expected" : id.error().message;
        message[0] = 0;
        break;
      }
      float* at = message.data() + 1 + i * kIdFloats;
      at[0] = static_cast<float>(id->size());
      std::memcpy(at + 1, id->data(), id->size());
    }
  }
  TROUPE_TRY(exchange(host, limit, "the NCCL ids' broadcast",
                      [&](Completion c) { host.broadcast(message.data(), message.size(), 0, std::move(c)); }));
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < count && message[0] == 1; ++i) {
    const float* at = message.data() + 1 + i * kIdFloats;
    ids.emplace_back(reinterpret_cast<const char*>(at + 1), static_cast<std::size_t>(at[0]));
  }
  return ids;
}

// Whether every member started what it opened (PG-1: all fall back
// together); where not, `why_not` becomes the group's reason.
Expected<bool> all_started(HostCommunicator& host, bool mine, bool ids_arrived, std::chrono::milliseconds limit,
                           std::string& why_not) {
  float ok = mine ? 1 : 0;
  TROUPE_TRY(exchange(host, limit, "the NCCL start's agreement",
                      [&](Completion c) { host.all_reduce(&ok, 1, std::move(c)); }));
  if (static_cast<int>(ok) == host.size()) return true;
  if (ids_arrived && why_not.rfind("NCCL did not start", 0) == 0) why_not = "NCCL did not start on every member";
  return false;
}

// NCCL over the group: member 0's id, each member's communicator, all or none
// (the others' destroyed: aborted). Null with the reason if not.
Expected<NcclAttempt> try_nccl(HostCommunicator& host, ComputeDevice& device, std::chrono::milliseconds limit) {
  std::string why_not = "NCCL did not start on stage actor " + std::to_string(host.rank_at(0));
  auto ids = broadcast_nccl_ids(host, device, 1, limit, why_not);
  if (!ids) return ids.error();
  NcclAttempt out;
  if (!ids->empty()) {
    auto comm = device.nccl_communicator(GroupMembers{host.name(), host.ranks(), host.index()}, ids->front(), limit);
    if (comm) out.comm = std::move(*comm);
    else why_not = comm.error().message;
  }
  auto all = all_started(host, out.comm != nullptr, !ids->empty(), limit, why_not);
  if (!all) return all.error();
  if (!*all) out = NcclAttempt{nullptr, why_not};
  return out;
}

// The pipeline's channels (CH-1) in one order every member knows: for each
// pair of neighbouring virtual stages k, k+1, the activations' (k's stage
// sends) then the gradients' (k+1's stage sends).
struct ChannelSpec {
  int sender, receiver;  // group indices (stages)
  Tag bits;              // transfer_channel_tags()'s bits of its tags
};
std::vector<ChannelSpec> pipeline_channels(int stages, int chunks) {
  std::vector<ChannelSpec> out;
  for (int k = 0; k + 1 < stages * chunks; ++k) {
    const int a = k % stages, b = (k + 1) % stages;
    out.push_back({a, b, transfer_tag(0, false, (k + 1) / stages, 0)});
    out.push_back({b, a, transfer_tag(0, true, k / stages, 0)});
  }
  return out;
}

// One float over a new channel, its sender to its receiver, waited for; past
// `limit` the channel is aborted (CM-3: nothing writes into the float after).
Status connect_channel(Communicator& channel, bool sending, ComputeDevice& device, std::chrono::milliseconds limit) {
  auto probe = Tensor::zeros(device.device(), {1});
  if (!probe) return probe.error();
  auto result = std::make_shared<std::promise<Status>>();
  std::future<Status> arrived = result->get_future();
  Completion done = [result](Status st) { result->set_value(std::move(st)); };
  const int other = 1 - channel.index();
  if (sending) channel.send(*probe, other, 0, device.stream(), std::move(done));
  else channel.recv(*probe, other, 0, device.stream(), std::move(done));
  if (arrived.wait_for(limit) == std::future_status::ready) return arrived.get();
  channel.abort();
  arrived.wait();
  return make_error("the first transfer over a new NCCL channel (", channel.name(), ") did not complete within ",
                    std::to_string(limit.count()), " ms (health.wait_timeout_ms)");
}

// NCCL channels for the pipeline's transfers: member 0 makes every channel's
// unique id and broadcasts them over the host ring; each member opens its
// channels in the shared order (no two members wait on each other's
// different channel) and moves one float over each, sender to receiver:
// NCCL connects a pair at its first transfer and needs both ends there for
// it, and the stage runner posts receives long before their sends, which
// must then find the pair connected; then whether every member opened all
// of its own (PG-1: all fall back together). Null with the reason if not.
Expected<NcclAttempt> try_nccl_channels(HostCommunicator& host, ComputeDevice& device, int chunks,
                                        std::chrono::milliseconds limit) {
  const std::vector<ChannelSpec> specs = pipeline_channels(host.size(), chunks);
  std::string why_not = "NCCL did not start on stage actor " + std::to_string(host.rank_at(0));
  auto ids = broadcast_nccl_ids(host, device, specs.size(), limit, why_not);
  if (!ids) return ids.error();
  ChannelledCommunicator::Channels channels;
  bool mine = !ids->empty();
  for (std::size_t i = 0; i < specs.size() && mine; ++i) {
    const ChannelSpec& c = specs[i];
    if (c.sender != host.index() && c.receiver != host.index()) continue;
    const bool sending = c.sender == host.index();
    const int peer = sending ? c.receiver : c.sender;
    const int lo = std::min(c.sender, c.receiver), hi = std::max(c.sender, c.receiver);
    GroupMembers pair{host.name() + " channel", {host.rank_at(lo), host.rank_at(hi)}, host.index() == lo ? 0 : 1};
    auto comm = device.nccl_communicator(pair, (*ids)[i], limit);
    Status connected = comm ? connect_channel(**comm, sending, device, limit) : Status(comm.error());
    if (!connected) {
      why_not = connected.error().message;
      mine = false;
      break;
    }
    channels[{sending, peer, c.bits}] = std::move(*comm);
  }
  auto all = all_started(host, mine, !ids->empty(), limit, why_not);
  if (!all) return all.error();
  if (!*all) return NcclAttempt{nullptr, why_not};  // the channels opened here are destroyed: aborted
  return NcclAttempt{ChannelledCommunicator::over_channels(GroupMembers{host.name(), host.ranks(), host.index()},
                                                          transfer_channel_tags(), std::move(channels)),
                     ""};
}

}  // namespace

Expected<DevicePath> open_device_path(const DevicePathRequest& r) {
  HostCommunicator& host = *r.host;
  const GroupMembers m{host.name(), host.ranks(), host.index()};
  DevicePath out;
  const std::string shared = shared_gpu(m, *r.gpu_ids);
  if (m.ranks.size() == 1) {
    out.why = "one member: nothing moves";
  } else if (r.choice == "staged") {
    out.why = "parallel.device_transport = \"staged\"";
  } else if (r.device->hardware_id().empty()) {
    out.why = "NCCL needs train.device = \"cuda\"";
  } else if (!shared.empty()) {
    out.why = shared + " share one GPU (NCCL refuses two ranks on one GPU)";
  } else {
    auto nccl = r.transfers ? try_nccl_channels(host, *r.device, r.chunks, r.limit) : try_nccl(host, *r.device, r.limit);
    if (!nccl) return nccl.error();
    out.comm = std::move(nccl->comm);
    if (!out.comm) out.why = nccl->why_not;
    else if (r.transfers)
      out.why = "every member has a GPU of its own; a channel per neighbouring virtual stages and direction";
    else out.why = "every member has a GPU of its own";
  }
  if (!out.comm && r.choice == "nccl" && m.ranks.size() > 1)
    return make_error("parallel.device_transport = \"nccl\": the ", m.name, " group ", members_text(m),
                      " cannot use NCCL: ", out.why, " (use \"auto\" or \"staged\")");
  if (!out.comm) {
    auto staged = StagedCommunicator::create(m, *r.collectives, *r.transport, r.device->device());
    if (!staged) return staged.error();
    out.comm = std::move(*staged);
  }
  return out;
}

}  // namespace troupe
