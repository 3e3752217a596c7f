// Device paths: which members share a GPU, and NCCL started on a group or the staged path.
#include "training/device_path.hpp"

#include <cstring>

#include "backends/comm/staged_communicator.hpp"
#include "backends/transport/wait.hpp"
#include "common/hash.hpp"

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

// NCCL over `g`: member 0's unique id broadcast over the host ring (a flag
// float, then the id's bytes), each member's communicator, then whether every
// member has one (PG-1: all fall back together). Null with the reason if not.
struct NcclAttempt {
  std::unique_ptr<Communicator> comm;
  std::string why_not;
};
Expected<NcclAttempt> try_nccl(HostCommunicator& host, ComputeDevice& device, std::chrono::milliseconds limit) {
  constexpr std::size_t kIdFloats = 64;  // room for NCCL's 128-byte id and its length
  std::vector<float> message(1 + kIdFloats, 0.0f);
  std::string why_not = "NCCL did not start on stage actor " + std::to_string(host.rank_at(0));
  if (host.index() == 0) {
    auto id = device.nccl_unique_id();
    if (id && id->size() <= (kIdFloats - 1) * sizeof(float)) {
      message[0] = 1;
      message[1] = static_cast<float>(id->size());
      std::memcpy(message.data() + 2, id->data(), id->size());
    } else {
      why_not = id ? "NCCL's unique id is larger than expected" : id.error().message;
    }
  }
  TROUPE_TRY(exchange(host, limit, "the NCCL id's broadcast",
                      [&](Completion c) { host.broadcast(message.data(), message.size(), 0, std::move(c)); }));
  NcclAttempt out;
  float ok = 0;
  if (message[0] == 1) {
    const std::string id(reinterpret_cast<const char*>(message.data() + 2), static_cast<std::size_t>(message[1]));
    auto comm = device.nccl_communicator(GroupMembers{host.name(), host.ranks(), host.index()}, id, limit);
    if (comm) out.comm = std::move(*comm), ok = 1;
    else why_not = comm.error().message;
  }
  TROUPE_TRY(exchange(host, limit, "the NCCL start's agreement",
                      [&](Completion c) { host.all_reduce(&ok, 1, std::move(c)); }));
  if (static_cast<int>(ok) != host.size()) {
    out.comm.reset();  // destroyed: aborted, as the others' are
    out.why_not = message[0] == 1 && why_not.rfind("NCCL did not start", 0) == 0
                      ? "NCCL did not start on every member"
                      : why_not;
  }
  return out;
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
  } else if (r.transfers) {  // NC-2
    out.why = "its receives are posted ahead of their sends, which NCCL would match in another order";
  } else if (r.device->hardware_id().empty()) {
    out.why = "NCCL needs train.device = \"cuda\"";
  } else if (!shared.empty()) {
    out.why = shared + " share one GPU (NCCL refuses two ranks on one GPU)";
  } else {
    auto nccl = try_nccl(host, *r.device, r.limit);
    if (!nccl) return nccl.error();
    out.comm = std::move(nccl->comm);
    out.why = out.comm ? "every member has a GPU of its own" : nccl->why_not;
  }
  if (!out.comm && r.choice == "nccl" && m.ranks.size() > 1 && !r.transfers)
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
