// troupe bench collectives --nodes K...: ring all-reduce, reduce-scatter and
// all-gather between K node processes over UCX, bus bandwidth as nccl-tests
// defines it, repeated (min, median, max), beside gloo
// (bench/gloo_collectives.py) on the same sizes, as many times, and beside the
// machine's cross-core round trip at each size and repetition. With
// --across-hosts, each K also runs with every rank in a network namespace of
// its own, ours and gloo's over TCP, as between hosts.
#include "tools/troupe/bench_collectives.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <thread>

#include "backends/comm/host_communicator.hpp"
#include "backends/host_memory.hpp"
#include "backends/tensor.hpp"
#include "backends/transport/collectives.hpp"
#include "ops/compute_device.hpp"
#include "training/device_path.hpp"
#include "runtime/harness/local_ranks.hpp"
#include "runtime/harness/veth_hosts.hpp"
#include "tools/troupe/bench_figures.hpp"
#include "tools/troupe/cross_core_probe.hpp"
#include "tools/troupe/in_place_ring.hpp"
#include "tools/troupe/memory_bound.hpp"
#include "tools/troupe/steal_time.hpp"


namespace troupe::cli {
namespace {

constexpr const char* kOps[] = {"all_reduce", "reduce_scatter", "all_gather"};

// Iterations per op, size and repetition: 1 GiB of buffers, at least nccl-tests'
// default of 20 and at most 1000. (With 16 MiB, a figure at 1-4 MiB took 2 ms:
// one stretch of a shared machine's noise moved a whole repetition.)
int iterations_for(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>((std::size_t{1} << 30) / std::max<std::size_t>(bytes, 1), 20, 1000));
}

struct OpDef {
  const char* name;
  double factor;  // nccl-tests' bus bandwidth factor
  std::function<void(Completion)> run;
};

// The machine's figures at this moment, taken by rank 0 once every rank is
// ready, while the others sleep with nothing posted (a rank waiting in a
// collective drives its transport, and its progress thread polls, on the
// probe's cores); the ranks then leave together. The round trip of a cache
// line between the first and last rank's cores, and (at sizes >= 1 MiB) the
// time of the in-place ring all-reduce's memory traffic alone (0 below).
struct MachineNow {
  double round_trip_ns = 0, all_reduce_s = 0;
};
Expected<MachineNow> probe_machine(UcxTransport& t, Collectives& coll, const std::vector<int>& group,
                                   const std::vector<int>& cores, std::size_t bytes) {
  auto barrier = [&] {
    float token = 0;
    return wait_for(t, [&](Completion c) { coll.all_reduce(group, &token, 1, std::move(c)); });
  };
  TROUPE_TRY(barrier());
  MachineNow now;
  // The others sleep through the probe (1-8 ms), then wait in the barrier:
  // they drive it for kDriveIdle (2 ms) and sleep, before the ring's traffic
  // is timed.
  constexpr auto kProbeSlept = std::chrono::milliseconds(12);
  if (t.rank() == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // Ranks all on one core have no round trip to show (0).
    if (cores.front() != cores.back()) {
      auto round_trip = cross_core_round_trip_ns(cores.front(), cores.back());
      if (!round_trip) return round_trip.error();
      now.round_trip_ns = *round_trip;
    }
    if (bytes >= (std::size_t{1} << 20)) {
      std::this_thread::sleep_until(t0 + kProbeSlept + kDriveIdle + std::chrono::milliseconds(1));
      const int iterations = static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / bytes, 5, 30));
      auto s = in_place_all_reduce_seconds(bytes, cores, iterations);
      if (!s) return s.error();
      now.all_reduce_s = *s;
    }
  } else {
    std::this_thread::sleep_for(kProbeSlept);
  }
  TROUPE_TRY(barrier());
  return now;
}

// One pass over every size: each op's median time over its iterations, the
// machine's round trip before the size and the vCPU time stolen while its ops
// ran. Returns rows [{bytes, machine_round_trip_ns, machine_steal_ms, op:
// {time_us, busbw_GBps}}].
Expected<nlohmann::json> measure_pass(UcxTransport& t, Collectives& coll, HostCommunicator& host, Device& device,
                                      const std::vector<std::size_t>& sizes, Sharing sharing,
                                      const std::vector<int>& cores) {
  const std::vector<int>& group = host.ranks();
  const int n = t.size();
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t bytes : sizes) {
    // As the trainer allocates its flat parameters and gradients.
    auto tensor = Tensor::empty(device, {static_cast<std::int64_t>(std::max<std::size_t>(1, bytes / sizeof(float)))},
                                DType::f32, sharing);
    if (!tensor) return tensor.error();
    const std::span<float> buf(tensor->f32(), static_cast<std::size_t>(tensor->numel()));
    std::fill(buf.begin(), buf.end(), 1.0f);
    auto machine = probe_machine(t, coll, group, cores, bytes);
    if (!machine) return machine.error();
    nlohmann::json row = {{"bytes", bytes}, {"machine_round_trip_ns", machine->round_trip_ns}};
    if (machine->all_reduce_s > 0)
      row["machine_all_reduce_GBps"] =
          static_cast<double>(bytes) / machine->all_reduce_s * Collectives::all_reduce_bus_factor(n) / 1e9;
    const double steal_before = stolen_ms();
    // Through the group's host communicator, as the trainer's groups run them.
    const std::vector<OpDef> ops = {
        {"all_reduce", Collectives::all_reduce_bus_factor(n),
         [&](Completion c) { host.all_reduce(buf.data(), buf.size(), std::move(c)); }},
        {"reduce_scatter", Collectives::gather_bus_factor(n),
         [&](Completion c) { host.reduce_scatter(buf.data(), buf.size(), std::move(c)); }},
        {"all_gather", Collectives::gather_bus_factor(n),
         [&](Completion c) { host.all_gather(buf.data(), buf.size(), std::move(c)); }},
    };
    // As a waiting actor would: the caller drives the transport (UX-1).
    for (const auto& op : ops) TROUPE_TRY(wait_for(t, op.run));  // warm-up
    // The ops take turns, iteration by iteration: a stretch of the shared
    // machine's noise (tens of ms) falls on all of them alike, not on one op's
    // whole run, so reduce-scatter and all-gather are compared at one moment.
    std::vector<std::vector<double>> times(ops.size());
    std::vector<float> rank_seconds(static_cast<std::size_t>(n));
    for (int i = 0; i < iterations_for(bytes); ++i) {
      for (std::size_t o = 0; o < ops.size(); ++o) {
        // As in training (gradients, then parameters, are written just
        // before they are reduced or gathered), the data is freshly written:
        // a peer reading it in place (CL-5) finds it in the writer's cache
        // or in memory, never in its own from the iteration before. Untimed,
        // and the ranks start together.
        std::fill(buf.begin(), buf.end(), 1.0f);
        float token = 0;
        TROUPE_TRY(wait_for(t, [&](Completion c) { coll.all_reduce(group, &token, 1, std::move(c)); }));
        const auto t0 = std::chrono::steady_clock::now();
        TROUPE_TRY(wait_for(t, ops[o].run));
        const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        // The op took as long as its slowest rank: every rank's time, summed
        // into place (each writes its own). Untimed, and a barrier too: no
        // rank begins the next iteration's writes while another is still in
        // its timed op (on a shared core they would take that rank's time).
        std::fill(rank_seconds.begin(), rank_seconds.end(), 0.0f);
        rank_seconds[static_cast<std::size_t>(t.rank())] = static_cast<float>(mine);
        TROUPE_TRY(wait_for(t, [&](Completion c) {
          coll.all_reduce(group, rank_seconds.data(), rank_seconds.size(), std::move(c));
        }));
        times[o].push_back(*std::max_element(rank_seconds.begin(), rank_seconds.end()));
      }
    }
    for (std::size_t o = 0; o < ops.size(); ++o) {
      const double secs = median(times[o]);
      row[ops[o].name] = {{"time_us", secs * 1e6},
                          {"busbw_GBps", static_cast<double>(bytes) / secs * ops[o].factor / 1e9}};
    }
    row["machine_steal_ms"] = stolen_ms() - steal_before;
    rows.push_back(row);
  }
  return rows;
}

// The pinned copy's bandwidth at `bytes` on rank 0's device, GB/s: the
// slower of host-to-device and device-to-host, each the median of 5 copies
// (the others wait in the barrier meanwhile). 0 on the other ranks.
Expected<double> pinned_copy_GBps(UcxTransport& t, HostCommunicator& host, ComputeDevice& compute, std::size_t bytes) {
  auto barrier = [&] {
    float token = 0;
    return wait_for(t, [&](Completion c) { host.all_reduce(&token, 1, std::move(c)); });
  };
  TROUPE_TRY(barrier());
  double slower = 0;
  if (t.rank() == 0) {
    Device& d = compute.device();
    Stream& s = compute.stream();
    auto pinned = d.allocate_pinned_host(bytes);
    auto on_device = d.allocate(bytes);
    if (!pinned) return pinned.error();
    if (!on_device) return on_device.error();
    double directions[2];
    for (int dir = 0; dir < 2; ++dir) {
      std::vector<double> secs;
      for (int i = 0; i < 5; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        TROUPE_TRY(dir ? d.copy((*on_device)->data(), (*pinned)->data(), bytes, s)
                       : d.copy((*pinned)->data(), (*on_device)->data(), bytes, s));
        s.synchronize();
        secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      directions[dir] = static_cast<double>(bytes) / median(secs) / 1e9;
    }
    slower = std::min(directions[0], directions[1]);
  }
  TROUPE_TRY(barrier());
  return slower;
}

// One pass of the device path at every size: each op through `path` on the
// device's memory, timed as measure_pass times the host's (the slowest rank,
// between barriers), and the pinned copy beside it. Rows [{bytes,
// device_<op>: {time_us, busbw_GBps}, machine_pinned_copy_GBps}].
Expected<nlohmann::json> measure_device_pass(UcxTransport& t, HostCommunicator& host, Communicator& path,
                                             ComputeDevice& compute, const std::vector<std::size_t>& sizes) {
  const int n = t.size();
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t bytes : sizes) {
    auto tensor = Tensor::zeros(compute.device(), {static_cast<std::int64_t>(std::max<std::size_t>(1, bytes / sizeof(float)))});
    if (!tensor) return tensor.error();
    compute.stream().synchronize();
    auto copy = pinned_copy_GBps(t, host, compute, bytes);
    if (!copy) return copy.error();
    nlohmann::json row = {{"bytes", bytes}};
    if (t.rank() == 0) row["machine_pinned_copy_GBps"] = *copy;
    Stream& s = compute.stream();
    const std::vector<OpDef> ops = {
        {"device_all_reduce", Collectives::all_reduce_bus_factor(n),
         [&](Completion c) { path.all_reduce(*tensor, s, std::move(c)); }},
        {"device_reduce_scatter", Collectives::gather_bus_factor(n),
         [&](Completion c) { path.reduce_scatter(*tensor, s, std::move(c)); }},
        {"device_all_gather", Collectives::gather_bus_factor(n),
         [&](Completion c) { path.all_gather(*tensor, s, std::move(c)); }},
    };
    for (const auto& op : ops) TROUPE_TRY(wait_for(t, op.run));  // warm-up (and the pinned pool's buffers)
    std::vector<std::vector<double>> times(ops.size());
    std::vector<float> rank_seconds(static_cast<std::size_t>(n));
    for (int i = 0; i < std::min(iterations_for(bytes), 200); ++i)
      for (std::size_t o = 0; o < ops.size(); ++o) {
        float token = 0;
        TROUPE_TRY(wait_for(t, [&](Completion c) { host.all_reduce(&token, 1, std::move(c)); }));
        const auto t0 = std::chrono::steady_clock::now();
        TROUPE_TRY(wait_for(t, ops[o].run));
        const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fill(rank_seconds.begin(), rank_seconds.end(), 0.0f);
        rank_seconds[static_cast<std::size_t>(t.rank())] = static_cast<float>(mine);
        TROUPE_TRY(wait_for(t, [&](Completion c) { host.all_reduce(rank_seconds.data(), rank_seconds.size(), std::move(c)); }));
        times[o].push_back(*std::max_element(rank_seconds.begin(), rank_seconds.end()));
      }
    for (std::size_t o = 0; o < ops.size(); ++o) {
      const double secs = median(times[o]);
      row[ops[o].name] = {{"time_us", secs * 1e6},
                          {"busbw_GBps", static_cast<double>(bytes) / secs * ops[o].factor / 1e9}};
    }
    rows.push_back(row);
  }
  return rows;
}

// The device each rank opens for --device, and the group's path on it.
struct DeviceGroup {
  std::unique_ptr<ComputeDevice> compute;
  std::unique_ptr<Communicator> path;
  std::string why;
};
Expected<std::optional<DeviceGroup>> open_device_group(UcxTransport& t, Collectives& coll, HostCommunicator& host,
                                                       const std::string& kind) {
  if (kind.empty()) return std::optional<DeviceGroup>();
  DeviceChoice choice;
  choice.kind = kind == "cuda" ? DeviceKind::cuda : DeviceKind::cpu;
  choice.local_rank = t.rank();
  auto compute = ComputeDevice::open(choice);
  if (!compute) return make_error("--device ", kind, ": ", compute.error().message);
  DeviceGroup g;
  g.compute = std::move(*compute);
  if (g.compute->device().host_accessible()) {
    g.why = "the host reads this device's memory: the host rings";
    return std::optional<DeviceGroup>(std::move(g));
  }
  constexpr std::chrono::milliseconds kLimit{60000};
  auto ids = exchange_gpu_identities(host, *g.compute, kLimit);
  if (!ids) return ids.error();
  auto opened = open_device_path(DevicePathRequest{&host, g.compute.get(), &coll, &t, "auto", &*ids, false, 1, kLimit});
  if (!opened) return opened.error();
  g.path = std::move(opened->comm);
  g.why = opened->why;
  return std::optional<DeviceGroup>(std::move(g));
}

// Repetitions passes in one set of processes: rows [{bytes, op: [{time_us, busbw_GBps}, ...]}].
// `cores`: rank r's core (as run_ranks pins it), for the machine's figures.
Expected<nlohmann::json> measure(UcxTransport& t, const std::vector<std::size_t>& sizes, int repetitions, Sharing sharing,
                                 const std::vector<int>& cores, const std::string& device_kind) {
  Collectives coll(t);
  std::vector<int> everyone(static_cast<std::size_t>(t.size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  HostCommunicator host(GroupMembers{"bench", everyone, t.rank()}, coll, t);
  Device& device = host_memory();  // the buffers' allocator
  // Untimed: 1 MiB all-reduces for at least 200 ms (right after connecting,
  // transfers ran several times slower for about the first 100 ms; see bench
  // transport). Rank 0 decides when to stop: the sum of the first element
  // tells every rank.
  {
    std::vector<int> group(static_cast<std::size_t>(t.size()));
    std::iota(group.begin(), group.end(), 0);
    std::vector<float> buf(std::size_t{1} << 18);
    const auto w0 = std::chrono::steady_clock::now();
    for (bool more = true; more;) {
      std::fill(buf.begin(), buf.end(), 0.0f);
      if (t.rank() == 0 && std::chrono::steady_clock::now() - w0 > std::chrono::milliseconds(200)) buf[0] = 1;
      TROUPE_TRY(wait_for(t, [&](Completion c) { coll.all_reduce(group, buf.data(), buf.size(), std::move(c)); }));
      more = buf[0] == 0;
    }
  }
  auto on_device = open_device_group(t, coll, host, device_kind);
  if (!on_device) return on_device.error();
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t bytes : sizes) rows.push_back({{"bytes", bytes}});
  for (int r = 0; r < repetitions; ++r) {
    auto pass = measure_pass(t, coll, host, device, sizes, sharing, cores);
    if (!pass) return pass.error();
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      for (const char* op : kOps) rows[i][op].push_back((*pass)[i][op]);
      for (const char* machine : {"machine_round_trip_ns", "machine_steal_ms", "machine_all_reduce_GBps"})
        if ((*pass)[i].contains(machine)) rows[i][machine].push_back((*pass)[i][machine]);
    }
    if (!*on_device || !(*on_device)->path) continue;
    auto dev = measure_device_pass(t, host, *(*on_device)->path, *(*on_device)->compute, sizes);
    if (!dev) return dev.error();
    for (std::size_t i = 0; i < sizes.size(); ++i)
      for (const auto& [key, value] : (*dev)[i].items())
        if (key != "bytes") rows[i][key].push_back(value);
  }
  if (*on_device && !rows.empty()) {  // rank 0's answer carries the path, for the report
    rows[0]["device_path"] = (*on_device)->path ? comm_path_name((*on_device)->path->path()) : "host";
    rows[0]["device_path_why"] = (*on_device)->why;
    if ((*on_device)->path) rows[0]["device_path_detail"] = (*on_device)->path->detail();
    rows[0]["device"] = (*on_device)->compute->describe();
  }
  return rows;
}

// Where the ranks run: all on this machine's loopback, or each in a network
// namespace of its own (`hosts`), ours and gloo's over TCP.
struct Hosts {
  std::string name;
  RankPlacement placement;
  std::string gloo_hosts;  // gloo_collectives.py --hosts: "NAMESPACE:ADDRESS:DEVICE,..." per rank
};

Hosts on_this_host() {
  Hosts h{"one host: every rank on this machine's loopback", {}, ""};
  h.placement.pin_to_cores = true;  // and gloo's ranks (--pin)
  return h;
}

Hosts across(const VethHosts& hosts, const std::string& congestion_control) {
  Hosts h{"a host per rank: network namespaces joined by veth pairs (a bridge for more than two), UCX and gloo over "
          "TCP, congestion control " + congestion_control, {}, ""};
  h.placement = on_hosts(hosts);
  for (int r = 0; r < hosts.hosts(); ++r)
    h.gloo_hosts += (r ? "," : "") + hosts.name(r) + ":" + hosts.address(r) + ":" + hosts.device(r);
  return h;
}

nlohmann::json run_gloo(int nodes, const std::vector<std::size_t>& sizes, const Hosts& where,
                        const std::string& device = "cpu") {
  std::string list;
  for (auto s : sizes) {
    if (!list.empty()) list += ',';
    list += std::to_string(s);
  }
  const std::string cmd = peer_python() + " " + peer_script("gloo_collectives.py") + " --nodes " +
                          std::to_string(nodes) + " --sizes " + list + " --pin --device " + device +
                          (where.gloo_hosts.empty() ? "" : " --hosts " + where.gloo_hosts) + " 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  if (!p) return {{"error", "cannot run " + cmd}};
  std::string text;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p.get())) text += buf;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return {{"error", "gloo_collectives.py printed no JSON (is python3-torch installed?)"}};
  return j;
}

// The device path's figures at one size: each op's spread, the pinned copy's
// beside them, and the all-reduce over min(pinned copy, the host ring's
// all-reduce), repetition by repetition: the goal (>= 0.7 at 64 MiB and up).
nlohmann::json device_row(const nlohmann::json& raw, const std::vector<double>& host_all_reduce, std::size_t bytes,
                          nlohmann::json& goals_met) {
  nlohmann::json dev;
  for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"}) {
    const nlohmann::json& cells = raw[std::string("device_") + op];
    const auto bw = column(cells, "busbw_GBps");
    dev[op] = {{"busbw_GBps", spread(bw)}, {"busbw_GBps_each", bw}, {"time_us", spread(column(cells, "time_us"))}};
  }
  const auto copy = raw["machine_pinned_copy_GBps"].get<std::vector<double>>();
  const auto ours = column(raw["device_all_reduce"], "busbw_GBps");
  std::vector<double> over;
  for (std::size_t r = 0; r < ours.size() && r < copy.size() && r < host_all_reduce.size(); ++r)
    over.push_back(ours[r] / std::min(copy[r], host_all_reduce[r]));
  dev["machine_pinned_copy_GBps"] = spread(copy);
  dev["all_reduce_over_min_copy_and_host"] = {{"spread", spread(over)}, {"each", over}};
  if (bytes >= (std::size_t{64} << 20)) {
    auto& goal = goals_met["device_all_reduce_ge_0.7_of_min_copy_and_host"];
    if (goal.is_null()) goal = true;
    if (lowest(over) < 0.7) goal = false;
  }
  return dev;
}

// torch.distributed's figures at size i on the device (each op's spread over
// its runs, or its error) and ours over them (median over median).
nlohmann::json torch_peer(const std::vector<nlohmann::json>& runs, std::size_t i, const nlohmann::json& ours) {
  nlohmann::json peer;
  for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"}) {
    std::vector<double> bw;
    std::string error = "no result";
    for (const auto& run : runs) {
      if (run.contains("peer")) peer["backend"] = run["peer"];
      if (!run.contains("results") || run["results"].size() <= i) {
        error = run.value("error", error);
        continue;
      }
      const auto& cell = run["results"][i][op];
      if (cell.contains("busbw_GBps")) bw.push_back(cell["busbw_GBps"].get<double>());
      else error = cell.value("error", error);
    }
    if (bw.empty()) {
      peer[op] = {{"error", error}};
      continue;
    }
    peer[op] = {{"busbw_GBps", spread(bw)},
                {"ours_over_torch", ours[op]["busbw_GBps"]["median"].get<double>() / median(bw)}};
  }
  return peer;
}

// One node count on `where`: ours (repetitions passes) beside gloo's (its
// own passes), with the three checks per size.
Expected<nlohmann::json> run_nodes(int nodes, const CollectivesBenchArgs& args, const Hosts& where) {
  const auto& sizes = args.sizes;
  const int repetitions = args.repetitions;
  const bool with_gloo = args.with_gloo;
  const Sharing sharing = args.buffers;
  nlohmann::json goals_met = {{"max_over_min_le_1.5", true}, {"reduce_scatter_ge_0.8_all_gather", true}};
  if (with_gloo) goals_met["all_reduce_ge_2x_gloo"] = true;
  std::vector<int> cores;  // taken here: a rank's own process may use only its core
  for (int r = 0; r < nodes; ++r) {
    auto core = pinned_core(r, nodes);
    if (!core) return core.error();
    cores.push_back(*core);
  }
  auto ours = run_ranks(nodes, [&](UcxTransport& t) { return measure(t, sizes, repetitions, sharing, cores, args.device); },
                        where.placement);
  if (!ours) return ours.error();
  std::vector<nlohmann::json> gloo_runs, torch_device_runs;
  if (with_gloo)
    for (int r = 0; r < repetitions; ++r) gloo_runs.push_back(run_gloo(nodes, sizes, where));
  if (with_gloo && args.device == "cuda")  // torch.distributed on the same GPUs: NCCL with a GPU each, else gloo
    for (int r = 0; r < repetitions; ++r) torch_device_runs.push_back(run_gloo(nodes, sizes, where, "cuda"));
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto& raw = (*ours)[i];
    nlohmann::json row = {{"bytes", sizes[i]}};
    std::map<std::string, std::vector<double>> bw;
    for (const char* op : kOps) {
      bw[op] = column(raw[op], "busbw_GBps");
      row[op] = {{"busbw_GBps", spread(bw[op])},
                 {"busbw_GBps_each", bw[op]},
                 {"time_us", spread(column(raw[op], "time_us"))}};
      row[op]["max_over_min"] = highest(bw[op]) / lowest(bw[op]);
    }
    const auto round_trips = raw["machine_round_trip_ns"].get<std::vector<double>>();
    row["machine_round_trip_ns"] = spread(round_trips);
    row["machine_round_trip_ns_each"] = round_trips;
    row["machine_round_trip_max_over_min"] = highest(round_trips) / lowest(round_trips);
    row["machine_steal_ms_each"] = raw["machine_steal_ms"];
    if (raw.contains("machine_all_reduce_GBps")) {
      // Ours over the machine's in-place ring, repetition by repetition (taken just before ours).
      const auto machine = raw["machine_all_reduce_GBps"].get<std::vector<double>>();
      std::vector<double> over;
      for (std::size_t r = 0; r < machine.size() && r < bw["all_reduce"].size(); ++r)
        over.push_back(bw["all_reduce"][r] / machine[r]);
      row["machine_all_reduce_GBps"] = spread(machine);
      row["machine_all_reduce_GBps_each"] = machine;
      row["all_reduce_over_machine"] = {{"spread", spread(over)}, {"each", over}, {"max_over_min", highest(over) / lowest(over)}};
    }
    // Reduce-scatter against all-gather, repetition by repetition (same moment, same load).
    std::vector<double> rs_ag;
    for (std::size_t r = 0; r < bw["reduce_scatter"].size() && r < bw["all_gather"].size(); ++r)
      rs_ag.push_back(bw["reduce_scatter"][r] / bw["all_gather"][r]);
    row["reduce_scatter_vs_all_gather"] = spread(rs_ag);
    const bool large = sizes[i] >= (std::size_t{1} << 20);
    if (large) {  // the machine's figure beside it: the same memory traffic, no transport
      const std::size_t received = sizes[i] / static_cast<std::size_t>(nodes) * static_cast<std::size_t>(nodes - 1);
      const auto bound = copy_vs_add(received, CollectiveOptions{}.segment_floats * sizeof(float), nodes, repetitions,
                                     /*staged=*/sharing == Sharing::process);
      row["machine_copy_vs_add"] = spread(bound);
      row["reduce_scatter_vs_all_gather_over_machine"] = median(rs_ag) / median(bound);
      for (const char* op : kOps)
        if (row[op]["max_over_min"].get<double>() > 1.5) goals_met["max_over_min_le_1.5"] = false;
      if (lowest(rs_ag) < 0.8) goals_met["reduce_scatter_ge_0.8_all_gather"] = false;
    }
    if (with_gloo) {
      nlohmann::json peer;
      for (const char* op : kOps) {
        std::vector<double> g;
        std::string error;
        for (const auto& run : gloo_runs) {
          if (!run.contains("results") || run["results"].size() <= i) {
            error = run.value("error", "no result");
            continue;
          }
          const auto& cell = run["results"][i][op];
          if (cell.contains("busbw_GBps")) g.push_back(cell["busbw_GBps"].get<double>());
          else error = cell.value("error", "no result");
        }
        if (g.empty()) {
          peer[op] = {{"error", error}};
          continue;
        }
        peer[op] = {{"busbw_GBps", spread(g)}};
        row[std::string(op) + "_vs_gloo"] = {{"median", median(bw[op]) / median(g)},
                                             {"worst", lowest(bw[op]) / median(g)}};
      }
      row["gloo"] = peer;
      if (row.contains("all_reduce_vs_gloo") && row["all_reduce_vs_gloo"]["worst"].get<double>() < 2)
        goals_met["all_reduce_ge_2x_gloo"] = false;
      if (!row.contains("all_reduce_vs_gloo")) goals_met["all_reduce_ge_2x_gloo"] = nullptr;
    }
    if (raw.contains("device_all_reduce")) {
      row["device"] = device_row(raw, bw["all_reduce"], sizes[i], goals_met);
      if (!torch_device_runs.empty()) row["device"]["torch"] = torch_peer(torch_device_runs, i, row["device"]);
    }
    rows.push_back(row);
  }
  nlohmann::json run = {{"nodes", nodes}, {"hosts", where.name}, {"results", rows}, {"goals_met", goals_met}};
  if ((*ours)[0].contains("device_path"))
    run["device"] = {{"name", (*ours)[0]["device"]}, {"path", (*ours)[0]["device_path"]},
                     {"why", (*ours)[0]["device_path_why"]},
                     {"detail", (*ours)[0].value("device_path_detail", std::string())}};
  return run;
}

// A run's goals into the judged ones: false wins, then null (not judged).
void judge(nlohmann::json& goals_met, const nlohmann::json& run) {
  for (const auto& [goal, met] : run["goals_met"].items()) {
    if (!goals_met.contains(goal) || goals_met[goal] == false) continue;
    if (met == false || met.is_null()) goals_met[goal] = met;
  }
}

}  // namespace

Expected<nlohmann::json> bench_collectives(const CollectivesBenchArgs& args) {
  nlohmann::json goals_met = {{"max_over_min_le_1.5", true}, {"reduce_scatter_ge_0.8_all_gather", true}};
  if (!args.device.empty()) goals_met["device_all_reduce_ge_0.7_of_min_copy_and_host"] = nullptr;
  if (args.with_gloo) goals_met["all_reduce_ge_2x_gloo"] = true;
  nlohmann::json runs = nlohmann::json::array();
  for (int n : args.nodes) {
    if (n < 2) return make_error("--nodes must be >= 2");
    if (args.across_hosts && n > 26) return make_error("--nodes: at most 26 with --across-hosts (a namespace each)");
  }
  for (int n : args.nodes) {
    auto run = run_nodes(n, args, on_this_host());
    if (!run) return run.error();
    judge(goals_met, *run);
    runs.push_back(*run);
    if (!args.across_hosts) continue;
    auto made = VethHosts::create("coll", n);
    if (!made) {  // reported, not judged
      runs.push_back({{"nodes", n}, {"hosts", "a host per rank (network namespaces)"}, {"skipped", made.error().message}});
      continue;
    }
    const VethHosts& hosts = **made;
    if (!args.tcp_congestion_control.empty())
      if (auto set = hosts.set_tcp_congestion_control(args.tcp_congestion_control); !set)
        return make_error("--tcp-congestion-control: ", set.error().message);
    auto in_use = hosts.tcp_congestion_control(0);
    if (!in_use) return in_use.error();
    auto across_run = run_nodes(n, args, across(hosts, *in_use));
    if (!across_run) return across_run.error();
    runs.push_back(*across_run);
  }
  return nlohmann::json{
      {"bench", "collectives"},
      {"algorithm", "ring over UCX in segments of 1 MiB (larger beyond 64 per chunk); segments >= 16 KiB "
                    "lent in place (CL-5: buffers in host-shared memory) or through shared-memory slots (CL-4: "
                    "private buffers)"},
      {"buffers", args.buffers == Sharing::host ? "host-shared (as the trainer's flat parameters and gradients)" : "private"},
      {"data", "written by each rank before every timed iteration (untimed; the ranks then start together), as "
               "gradients and parameters are before they are reduced or gathered"},
      {"timing", "an iteration's time is its slowest rank's, from leaving the barrier that starts it to the op's "
                 "completion; the ranks then gather their times (a barrier: no rank writes the next iteration's data "
                 "while another still runs its op); the three ops take turns, iteration by iteration"},
      {"placement", "rank r of K, ours and gloo's, pinned to core floor(r * cores / K): ring neighbours share a core"},
      {"bus_bandwidth", "nccl-tests: all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n"},
      {"repetitions", args.repetitions},
      {"figures", "busbw_GBps and time_us: min/median/max over repetitions, each the median of its iterations; "
                  "*_vs_gloo: worst = our lowest over gloo's median; machine_round_trip_ns: the machine's figure beside "
                  "max_over_min, one cache line's round trip between the first and last rank's cores, before each "
                  "size in each repetition; machine_all_reduce_GBps (>= 1 MiB): the machine's figure beside the all-reduce, "
                  "the in-place ring's memory traffic alone (threads pinned as the ranks, no transport, a barrier per "
                  "step), taken just before ours at each size in each repetition; all_reduce_over_machine: ours over "
                  "it, repetition by repetition; machine_steal_ms_each: vCPU time the hypervisor took, summed over the machine's "
                  "CPUs, while each repetition's ops at the size ran (10 ms resolution); *_each: the repetitions in "
                  "order; machine_copy_vs_add (>= 1 MiB): the machine's figure beside "
                  "reduce_scatter_vs_all_gather, one thread per rank copying each byte into place against adding it "
                  "into place (each staged first, a copy into a slot, with private buffers)"},
      {"runs", runs},
      {"device", args.device.empty() ? nlohmann::json(nullptr) : nlohmann::json{
           {"kind", args.device},
           {"figures", "device.<op>: the group's device path (each run's device.path: nccl where every rank has a "
                       "GPU of its own, staged through pinned host memory and the host rings otherwise) on the "
                       "device's memory, timed as the host's; device.machine_pinned_copy_GBps: the slower of "
                       "host-to-device and device-to-host pinned copies of the size on rank 0's device (median of "
                       "5); device.all_reduce_over_min_copy_and_host: the device path's all-reduce over the lower of "
                       "that copy and the host ring's all-reduce, repetition by repetition; device.torch (cuda, "
                       "unless --no-gloo): torch.distributed on the same GPUs (NCCL where every rank has a GPU of "
                       "its own, else gloo), bench/gloo_collectives.py --device cuda, and ours over it"}}},
      {"goals", {{"all_reduce_vs_gloo", "worst >= 2 at every size"},
                 {"device_all_reduce", ">= 0.7 of min(pinned copy, host ring) at every size >= 64 MiB, every repetition "
                                       "(--device)"},
                 {"reduce_scatter_vs_all_gather", ">= 0.8 at every size >= 1 MiB, every repetition"},
                 {"max_over_min", "<= 1.5 at every size >= 1 MiB, every op"},
                 {"judged", "goals_met: the runs on one host; each run has its own (across hosts: reported, not "
                            "judged)"}}},
      {"goals_met", goals_met}};
}

}  // namespace troupe::cli
