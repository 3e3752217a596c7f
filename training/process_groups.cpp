// ProcessGroups: the layout from the topology, then per group the device
// path: host where the host reads device memory, else staged or NCCL.
#include "training/process_groups.hpp"

#include <cstring>
#include <numeric>

#include "backends/comm/staged_communicator.hpp"
#include "backends/transport/wait.hpp"
#include "common/hash.hpp"

namespace troupe {

GroupLayout group_layout(const StagePlan& plan, int rank) {
  const ParallelDims& d = plan.dims;
  const Coord me = coord_of(d, rank);
  GroupLayout g;
  g.data_parallel = {"data-parallel", dp_group(d, rank), me.dp};
  g.tensor_parallel = {"tensor-parallel", tp_group(d, rank), me.tp};
  g.pipeline = {"pipeline", pp_group(d, rank), me.pp};
  std::vector<int> everyone(static_cast<std::size_t>(d.world()));
  std::iota(everyone.begin(), everyone.end(), 0);
  g.world = {"world", std::move(everyone), rank};
  const bool split_tied = plan.schedule.virtual_stages() > 1 && d.pp > 1;  // PG-2
  if (split_tied && (me.pp == 0 || me.pp == d.pp - 1))
    g.tied = {"tied-embedding", {g.pipeline.ranks.front(), g.pipeline.ranks.back()}, me.pp == 0 ? 0 : 1};
  else
    g.tied = {"tied-embedding", {}, 0};
  return g;
}

namespace {

std::string members_text(const GroupMembers& g) {
  std::string s = "(stage actors";
  for (int r : g.ranks) s.append(" ").append(std::to_string(r));
  return s.append(")");
}

// The exchanges while building: bounded, every operation aborted past the bound.
Status exchange(HostCommunicator& c, std::chrono::milliseconds limit, const std::string& what,
                const std::function<void(Completion)>& start) {
  return wait_for(start, limit, c.transport(), what + " (" + c.name() + " group)");
}

// A GPU's identity as two floats of 24 bits each (exact in f32), summed over
// the world from a table that is zero except at each rank's own place.
Expected<std::vector<std::uint64_t>> exchange_identities(HostCommunicator& world, const std::string& id,
                                                         std::chrono::milliseconds limit) {
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

Expected<std::unique_ptr<ProcessGroups>> ProcessGroups::build(const ProcessGroupArgs& a) {
  const GroupLayout layout = group_layout(*a.plan, a.rank);
  auto host_of = [&](const GroupMembers& m) -> Expected<std::unique_ptr<HostCommunicator>> {
    TROUPE_TRY(validate(m));
    return std::make_unique<HostCommunicator>(m, *a.collectives, *a.transport);
  };
  std::unique_ptr<ProcessGroups> g(new ProcessGroups());
  auto world = host_of(layout.world);
  if (!world) return world.error();
  Device& device = a.device->device();
  const std::string& choice = a.plan->job.parallel.device_transport;
  std::vector<std::uint64_t> ids;
  if (!device.host_accessible()) {  // PG-1: a job-wide fact, so every rank exchanges or none does
    auto exchanged = exchange_identities(**world, a.device->hardware_id(), a.limit);
    if (!exchanged) return exchanged.error();
    ids = std::move(*exchanged);
  }
  // One group: its host communicator and, where device memory is not the
  // host's, its device path.
  auto build_one = [&](const GroupMembers& m, bool transfers) -> Expected<std::unique_ptr<ProcessGroup>> {
    auto host = host_of(m);
    if (!host) return host.error();
    if (device.host_accessible()) return std::make_unique<ProcessGroup>(std::move(*host), nullptr, "");
    std::string why;
    std::unique_ptr<Communicator> comm;
    const std::string shared = shared_gpu(m, ids);
    if (m.ranks.size() == 1) {
      why = "one member: nothing moves";
    } else if (choice == "staged") {
      why = "parallel.device_transport = \"staged\"";
    } else if (transfers) {  // NC-2
      why = "its receives are posted ahead of their sends, which NCCL would match in another order";
    } else if (a.device->hardware_id().empty()) {
      why = "NCCL needs train.device = \"cuda\"";
    } else if (!shared.empty()) {
      why = shared + " share one GPU (NCCL refuses two ranks on one GPU)";
    } else {
      auto nccl = try_nccl(**host, *a.device, a.limit);
      if (!nccl) return nccl.error();
      comm = std::move(nccl->comm);
      why = comm ? "every member has a GPU of its own" : nccl->why_not;
    }
    if (!comm && choice == "nccl" && m.ranks.size() > 1 && !transfers)
      return make_error("parallel.device_transport = \"nccl\": the ", m.name, " group ", members_text(m),
                        " cannot use NCCL: ", why, " (use \"auto\" or \"staged\")");
    if (!comm) {
      auto staged = StagedCommunicator::create(m, *a.collectives, *a.transport, device);
      if (!staged) return staged.error();
      comm = std::move(*staged);
    }
    return std::make_unique<ProcessGroup>(std::move(*host), std::move(comm), std::move(why));
  };
  struct Wanted {
    const GroupMembers* members;
    std::unique_ptr<ProcessGroup>* into;
    bool transfers;  // point-to-point (the pipeline's activations) rather than collectives
  };
  for (const Wanted& w : {Wanted{&layout.data_parallel, &g->dp_, false}, Wanted{&layout.tensor_parallel, &g->tp_, false},
                          Wanted{&layout.pipeline, &g->pp_, true}, Wanted{&layout.tied, &g->tied_, false}}) {
    if (w.members->ranks.empty()) continue;  // PG-2
    auto built = build_one(*w.members, w.transfers);
    if (!built) return built.error();
    *w.into = std::move(*built);
  }
  g->world_ = std::make_unique<ProcessGroup>(std::move(*world), nullptr, "");
  return g;
}

void ProcessGroups::abort() {
  world_->host().abort();  // the transport's every operation, every group's host path
  for (ProcessGroup* p : {dp_.get(), tp_.get(), pp_.get(), tied_.get()})
    if (p && &p->tensors() != &p->host()) p->tensors().abort();
}

void ProcessGroups::restart() {
  world_->host().restart();  // the ring collectives' sequences, shared by every group's host path
  for (ProcessGroup* p : {dp_.get(), tp_.get(), pp_.get(), tied_.get()})
    if (p && &p->tensors() != &p->host()) p->tensors().restart();
}

std::vector<std::string> ProcessGroups::describe() const {
  std::vector<std::string> out;
  for (const ProcessGroup* p : {dp_.get(), tp_.get(), pp_.get(), tied_.get()}) {
    if (!p) continue;
    GroupMembers m{p->name(), p->host().ranks(), p->index()};
    std::string line = p->name() + " group " + members_text(m) + ": " + comm_path_name(p->path());
    if (!p->why().empty()) line += " (" + p->why() + ")";
    out.push_back(std::move(line));
  }
  return out;
}

}  // namespace troupe
