// ProcessGroups: the layout from the topology, then per group the device
// path: host where the host reads device memory, else staged or NCCL.
#include "training/process_groups.hpp"

#include <cstdlib>
#include <numeric>

#include "backends/comm/channelled_communicator.hpp"
#include "training/device_path.hpp"
#include "training/transfer_tags.hpp"

namespace troupe {

bool in_order_transfers() {
  const char* v = std::getenv("TROUPE_PIPELINE_IN_ORDER");
  return v && std::string(v) == "1";
}

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
    auto exchanged = exchange_gpu_identities(**world, *a.device, a.limit);
    if (!exchanged) return exchanged.error();
    ids = std::move(*exchanged);
  }
  // One group: its host communicator and, where device memory is not the
  // host's, its device path; the pipeline's transfers in order per channel
  // where asked (CH-2: as NCCL's channels match them, on any path).
  auto build_one = [&](const GroupMembers& m, bool transfers) -> Expected<std::unique_ptr<ProcessGroup>> {
    auto host = host_of(m);
    if (!host) return host.error();
    std::unique_ptr<Communicator> tensors;
    std::string why;
    if (!device.host_accessible()) {
      auto path = open_device_path(DevicePathRequest{host->get(), a.device, a.collectives, a.transport, choice, &ids,
                                                     transfers, a.plan->schedule.chunks, a.limit});
      if (!path) return path.error();
      tensors = std::move(path->comm);
      why = std::move(path->why);
    }
    if (transfers && in_order_transfers() && !(tensors && tensors->path() == CommPath::nccl)) {
      Communicator& tagged = tensors ? *tensors : **host;
      tensors = ChannelledCommunicator::in_order_over(tagged, transfer_channel_tags(), std::move(tensors));
      why += std::string(why.empty() ? "" : "; ") + "in order per channel (TROUPE_PIPELINE_IN_ORDER)";
    }
    return std::make_unique<ProcessGroup>(std::move(*host), std::move(tensors), std::move(why));
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
  std::vector<Communicator*> nccl;  // PG-4
  for (ProcessGroup* p : {g->dp_.get(), g->tp_.get(), g->pp_.get(), g->tied_.get()})
    if (p && p->path() == CommPath::nccl) nccl.push_back(&p->tensors());
  if (!nccl.empty())
    g->abort_with_transport_ = a.transport->on_abort([nccl] {
      for (Communicator* c : nccl) c->abort();
    });
  return g;
}

void ProcessGroups::abort() {
  world_->host().abort();  // the transport's every operation, every group's host path
  for (ProcessGroup* p : {dp_.get(), tp_.get(), pp_.get(), tied_.get()})
    if (p && &p->tensors() != &p->host()) p->tensors().abort();
}

std::string ProcessGroup::describe() const {
  std::string line = name() + " group " + members_text(GroupMembers{name(), host().ranks(), index()}) + ": " +
                     comm_path_name(path());
  return why_.empty() ? line : line + " (" + why_ + ")";
}

}  // namespace troupe
