// troupe bench transport: latency (ping-pong, half the round trip) and
// bandwidth (windows of back-to-back sends, then an ack) between two node
// processes over UCX, beside ucx_perftest's tag_lat and tag_bw on the same
// sizes; every figure repeated (min, median, max), ours and the peer's.
// Both pairs run pinned, one process per core, and take turns: each
// repetition of each size runs the peer's latency, ours, then the peer's
// bandwidth. On this shared VM a cross-core ping-pong's speed changes
// fivefold for seconds to minutes at a time (8 B: ucx_perftest's 0.1 us
// became 0.5 us, ours 0.2 became 0.65), so that a figure taken minutes after
// its peer's compares two machines; taken ten seconds apart (ours at every
// size, then the peer's), one pair in five still straddled a change (5.5x at
// 8 B, 0.38x at 4 KiB in the same run).
// Ours sends from memory it never wrote, as ucx_perftest does (see
// UnwrittenBytes), and then, in a new pair of processes, from written memory.
// Across namespaces TCP runs with reno, not this machine's default, bbr: on a
// veth link with a round trip of microseconds, bbr's paced rate settled per
// connection at about 2.2 or 6.6 GB/s (256 KiB, ucx_perftest alone, 8
// connections in a row: 4.4 5.3 3.6 6.7 3.2 2.8 2.5 4.8), so a pair of
// figures compared two draws of the pacing, not two programs; with reno
// every connection ran at 4.2-5.0 GB/s. `--tcp-congestion-control` chooses.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <atomic>
#include <optional>
#include <sstream>
#include <sys/mman.h>

#include "runtime/control/redis_server.hpp"
#include "tools/troupe/bench_figures.hpp"
#include "runtime/harness/local_ranks.hpp"
#include "runtime/harness/veth_hosts.hpp"

namespace troupe::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Messages per figure, ours and ucx_perftest's: 1 GiB, 16 to 100,000. With
// 256 MiB and at most 2,000, a figure at 8 B lasted under a millisecond and
// one at 8 MiB 25 ms, and a single hiccup of the shared machine moved it.
// --max-iterations lowers the cap (a smoke run's figures, not the goals').
int iterations_for(std::size_t bytes, int max_iterations) {
  const auto n = std::clamp<std::size_t>((std::size_t{1} << 30) / std::max<std::size_t>(bytes, 1), 16, 100000);
  return static_cast<int>(std::min<std::size_t>(n, static_cast<std::size_t>(max_iterations)));
}

// Anonymous memory that this process never writes: until a transfer writes
// it, every page reads as the kernel's one zero page. ucx_perftest sends from
// such memory (its client's resident memory stays at 6.5 MB while it sends
// from a 64 MiB buffer), so its sender's copy into a TCP socket reads a page
// that never leaves the cache. Over TCP at 8 and 64 MiB, ours sending from
// written memory reached 0.62-0.68 of ucx_perftest's bandwidth; sending from
// never-written memory, 1.2-1.3 of it.
class UnwrittenBytes {
 public:
  explicit UnwrittenBytes(std::size_t bytes) : bytes_(std::max<std::size_t>(bytes, 1)) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  ~UnwrittenBytes() {
    if (data_) ::munmap(data_, bytes_);
  }
  UnwrittenBytes(const UnwrittenBytes&) = delete;
  UnwrittenBytes& operator=(const UnwrittenBytes&) = delete;
  char* data() const { return data_; }

 private:
  std::size_t bytes_;
  char* data_ = nullptr;
};

// Latency and bandwidth of `bytes`-byte messages sent from `out` and received
// into `in` (each at least `bytes` long). As ucx_perftest does: one buffer to
// send from and one to receive into, each reused by every message of a window
// (the figure is the transport's, not the memory system's on a 64 MiB working
// set). With one buffer for both, a ping-pong's reply sends the bytes it just
// received, so every round trip moved them between the cores' caches twice;
// when the VM was slow to do that (8 B in 0.65 us), 256 KiB took 35 us,
// ucx_perftest's 18.
Expected<nlohmann::json> measure(UcxTransport& t, std::size_t bytes, char* out, char* in, int iters) {
  const int peer = 1 - t.rank();
  // Keep about 64 MiB in flight per window (as a streaming sender would).
  const int window = static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / std::max<std::size_t>(bytes, 1), 2, 64));
  char ack = 0;
  // As a waiting actor would: the caller drives the worker (UX-1).
  auto send = [&](char* p, std::size_t n) { return wait_for(t, [&](Completion c) { t.send(peer, 1, p, n, std::move(c)); }); };
  auto recv = [&](char* p, std::size_t n) { return wait_for(t, [&](Completion c) { t.recv(peer, 1, p, n, std::move(c)); }); };
  auto round_trip = [&]() -> Status {
    if (t.rank() == 0) {
      TROUPE_TRY(send(out, bytes));
      return recv(in, bytes);
    }
    TROUPE_TRY(recv(in, bytes));
    out[0] = in[0];  // rank 0's word to stop, passed back (writes one page)
    return send(out, bytes);
  };
  // Latency, after untimed round trips for at least 16 times and 200 ms (lanes
  // and buffers warm, as ucx_perftest's own warm-up; right after connecting,
  // small messages took 7 us instead of 0.6 for about the first 100 ms). Rank 0
  // decides when to stop and says so in the last round trip's first byte.
  const auto w0 = Clock::now();
  for (int i = 0;; ++i) {
    if (t.rank() == 0) out[0] = (i >= 16 && Clock::now() - w0 > std::chrono::milliseconds(200)) ? 1 : 0;
    TROUPE_TRY(round_trip());
    if (in[0] == 1) break;
  }
  out[0] = in[0] = 0;
  const auto l0 = Clock::now();
  for (int i = 0; i < iters; ++i) TROUPE_TRY(round_trip());
  const double lat_us = std::chrono::duration<double, std::micro>(Clock::now() - l0).count() / iters / 2;
  // Bandwidth: windows of sends into distinct buffers, then a 1-byte ack.
  const int rounds = std::max(2, iters / window);
  const auto b0 = Clock::now();
  for (int r = 0; r < rounds; ++r) {
    std::atomic<int> remaining{window};
    std::atomic<bool> failed{false};
    auto post_window = [&] {
      for (int w = 0; w < window; ++w) {
        char* at = t.rank() == 0 ? out : in;
        auto cb = [&](Status st) {
          if (!st) failed = true;
          if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining.notify_one();
        };
        if (t.rank() == 0) t.send(peer, 2, at, bytes, cb);
        else t.recv(peer, 2, at, bytes, cb);
      }
    };
    t.drive(post_window, [&] { return remaining.load(std::memory_order_acquire) == 0; }, kDriveIdle);
    for (int left; (left = remaining.load(std::memory_order_acquire)) > 0;) remaining.wait(left);
    if (failed) return make_error("bench transport: a windowed transfer failed");
    if (t.rank() == 0) TROUPE_TRY(recv(&ack, 1));
    else TROUPE_TRY(send(&ack, 1));
  }
  const double secs = std::chrono::duration<double>(Clock::now() - b0).count();
  const double bw = static_cast<double>(bytes) * window * rounds / secs;
  return nlohmann::json{{"bytes", bytes}, {"latency_us", lat_us}, {"bandwidth_MBps", bw / 1e6}};
}

// One repetition's figures, sending from memory never written, as
// ucx_perftest sends (the figures the goals judge), or from written memory,
// as a tensor is sent.
enum class SendFrom { unwritten, written };

Expected<nlohmann::json> measure_from(UcxTransport& t, std::size_t bytes, SendFrom from, int iters) {
  auto unmapped = [bytes] { return make_error("bench transport: cannot map ", std::to_string(bytes), " bytes"); };
  UnwrittenBytes in(bytes);
  if (!in.data()) return unmapped();
  if (from == SendFrom::unwritten) {
    UnwrittenBytes out(bytes);
    if (!out.data()) return unmapped();
    return measure(t, bytes, out.data(), in.data(), iters);
  }
  std::vector<char> out(std::max<std::size_t>(bytes, 1));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(i * 131 + 7);
  return measure(t, bytes, out.data(), in.data(), iters);
}

// Where the two processes run: loopback on this machine, or two namespaces
// joined by a veth pair with UCX over TCP (as between two hosts).
struct Link {
  std::string name;
  RankPlacement placement;
  std::string server_env, client_env;  // ucx_perftest's: "[ip netns exec NS] taskset -c C env UCX_...=..."
  std::string server_address;
};

// ucx_perftest's server (0) or client (1) runs on the core our rank would.
Expected<std::string> pinned(int rank) {
  auto core = pinned_core(rank, 2);
  if (!core) return core.error();
  return "taskset -c " + std::to_string(*core) + " ";
}

Expected<Link> loopback() {
  Link l{"loopback: shared memory between two processes", {}, "", "", "127.0.0.1"};
  l.placement.pin_to_cores = true;
  for (int h : {0, 1}) {
    auto taskset = pinned(h);
    if (!taskset) return taskset.error();
    (h == 0 ? l.server_env : l.client_env) = *taskset + "env UCX_NET_DEVICES=lo";
  }
  return l;
}

Expected<Link> across(const VethHosts& hosts, const std::string& congestion_control) {
  if (!congestion_control.empty()) {
    if (auto set = hosts.set_tcp_congestion_control(congestion_control); !set)
      return make_error("--tcp-congestion-control: ", set.error().message);
  }
  auto in_use = hosts.tcp_congestion_control(0);
  if (!in_use) return in_use.error();
  Link l;
  l.name = "tcp over a veth pair between two network namespaces, congestion control " + *in_use;
  l.placement = on_hosts(hosts);
  for (int h : {0, 1}) {
    auto taskset = pinned(h);
    if (!taskset) return taskset.error();
    (h == 0 ? l.server_env : l.client_env) =
        hosts.exec_prefix(h) + *taskset + "env UCX_TLS=tcp UCX_NET_DEVICES=" + hosts.device(h);
  }
  l.server_address = hosts.address(0);
  return l;
}

// The final row of ucx_perftest between two processes placed as `link` says.
nlohmann::json perftest(const Link& link, const char* test, std::size_t bytes, int iters) {
  const int port = free_loopback_port();
  const std::string server = link.server_env + " ucx_perftest -p " + std::to_string(port) + " >/dev/null 2>&1 &";
  if (std::system(server.c_str()) != 0) return {{"error", "cannot start ucx_perftest"}};
  std::string client = "sleep 0.3; " + link.client_env + " ucx_perftest " + link.server_address + " -p " +
                       std::to_string(port) + " -t " + test + " -s " + std::to_string(bytes) + " -n " +
                       std::to_string(iters) + " 2>/dev/null | grep Final:";
  FILE* p = ::popen(client.c_str(), "r");
  if (!p) return {{"error", "cannot run ucx_perftest"}};
  char line[512] = {};
  const bool got = std::fgets(line, sizeof line, p) != nullptr;
  ::pclose(p);
  if (!got) return {{"error", "ucx_perftest printed no result"}};
  std::istringstream in(line);
  std::string word;
  double n = 0, lat50 = 0, lat_avg = 0, lat_all = 0, bw_avg = 0, bw_all = 0;
  in >> word >> n >> lat50 >> lat_avg >> lat_all >> bw_avg >> bw_all;
  // A figure it printed as 0 (once, tag_lat at 64 MiB over TCP) is no figure.
  nlohmann::json out = nlohmann::json::object();
  if (lat_avg > 0) out["latency_us"] = lat_avg;
  if (bw_all > 0) out["bandwidth_MBps"] = bw_all;
  if (out.empty()) return {{"error", "ucx_perftest printed no figure"}};
  return out;
}

// Ours over the peer's, repetition by repetition (both taken within seconds
// of each other); repetitions either side lacks are skipped.
std::vector<double> paired(const nlohmann::json& ours, const nlohmann::json& peer, const char* key) {
  std::vector<double> v;
  for (std::size_t r = 0; r < ours.size() && r < peer.size(); ++r) {
    const auto& a = ours[r];
    const auto& b = peer[r];
    if (a.contains(key) && b.contains(key) && a[key].is_number() && b[key].is_number() && b[key].get<double>() > 0)
      v.push_back(a[key].get<double>() / b[key].get<double>());
  }
  return v;
}

// Ours and ucx_perftest's over one link, every size `repetitions` times, in
// turns (below), so that the two figures of a pair are taken about half a
// second apart.
Expected<nlohmann::json> bench_link(const Link& link, const std::vector<std::size_t>& sizes, int repetitions,
                                    int max_iterations, nlohmann::json& goals_met) {
  std::vector<nlohmann::json> ours(sizes.size(), nlohmann::json::array()), lat_runs(sizes.size(), nlohmann::json::array()),
      bw_runs(sizes.size(), nlohmann::json::array()), written(sizes.size(), nlohmann::json::array());
  for (int r = 0; r < repetitions; ++r) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      // The peer's latency, ours (latency, then bandwidth), the peer's
      // bandwidth: each judged figure of ours is taken next to its peer's.
      // Then ours from written memory, not judged, in a new pair of processes.
      const int iters = iterations_for(sizes[i], max_iterations);
      auto ours_from = [&](SendFrom from) {
        return run_ranks(2, [&](UcxTransport& t) { return measure_from(t, sizes[i], from, iters); }, link.placement);
      };
      lat_runs[i].push_back(perftest(link, "tag_lat", sizes[i], iters));
      auto once = ours_from(SendFrom::unwritten);
      if (!once) return once.error();
      bw_runs[i].push_back(perftest(link, "tag_bw", sizes[i], iters));
      auto from_written = ours_from(SendFrom::written);
      if (!from_written) return from_written.error();
      ours[i].push_back(*once);
      written[i].push_back(*from_written);
    }
  }
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto lat = column(ours[i], "latency_us"), bw = column(ours[i], "bandwidth_MBps");
    const auto peer_lat = column(lat_runs[i], "latency_us"), peer_bw = column(bw_runs[i], "bandwidth_MBps");
    nlohmann::json row = {{"bytes", sizes[i]},
                          {"latency_us", spread(lat)},
                          {"bandwidth_MBps", spread(bw)},
                          {"from_written_memory", {{"latency_us", spread(column(written[i], "latency_us"))},
                                                   {"bandwidth_MBps", spread(column(written[i], "bandwidth_MBps"))}}}};
    row["ucx_perftest"] = {{"tag_lat", {{"latency_us", spread(peer_lat)}}}, {"tag_bw", {{"bandwidth_MBps", spread(peer_bw)}}}};
    if (peer_lat.size() < static_cast<std::size_t>(repetitions) || peer_bw.size() < static_cast<std::size_t>(repetitions))
      row["ucx_perftest"]["error"] = lat_runs[i].back().value("error", bw_runs[i].back().value("error", "some runs printed no result"));
    if (!peer_lat.empty() && !peer_bw.empty()) {
      // Medians side by side; the worst of the repetitions, each ours over the
      // peer's of the same repetition; and our worst over the peer's median.
      const auto lat_pairs = paired(ours[i], lat_runs[i], "latency_us");
      const auto bw_pairs = paired(ours[i], bw_runs[i], "bandwidth_MBps");
      const double lat_worst = highest(lat_pairs), bw_worst = lowest(bw_pairs);
      row["latency_vs_perftest"] = {{"median", median(lat) / median(peer_lat)},
                                    {"worst", lat_worst},
                                    {"per_repetition", lat_pairs},
                                    {"worst_vs_peer_median", highest(lat) / median(peer_lat)}};
      row["bandwidth_vs_perftest"] = {{"median", median(bw) / median(peer_bw)},
                                      {"worst", bw_worst},
                                      {"per_repetition", bw_pairs},
                                      {"worst_vs_peer_median", lowest(bw) / median(peer_bw)}};
      row["from_written_memory"]["latency_vs_perftest_median"] =
          median(column(written[i], "latency_us")) / median(peer_lat);
      row["from_written_memory"]["bandwidth_vs_perftest_median"] =
          median(column(written[i], "bandwidth_MBps")) / median(peer_bw);
      if (sizes[i] >= 8 && sizes[i] <= 4096 && lat_worst > 3) goals_met["latency_le_3x"] = false;
      if (sizes[i] >= (64 << 10) && sizes[i] <= (64 << 20) && bw_worst < 0.9) goals_met["bandwidth_ge_0.9"] = false;
    }
    rows.push_back(row);
  }
  return nlohmann::json{{"link", link.name}, {"results", rows}};
}

}  // namespace

Expected<nlohmann::json> bench_transport(const std::vector<std::size_t>& sizes, int repetitions, bool across_hosts,
                                         const std::string& tcp_congestion_control, int max_iterations) {
  nlohmann::json goals_met = {{"latency_le_3x", true}, {"bandwidth_ge_0.9", true}};
  nlohmann::json links = nlohmann::json::array();
  auto lo = loopback();
  if (!lo) return lo.error();
  // The namespaces first, so that a congestion control they refuse fails the
  // command before anything is measured.
  std::unique_ptr<VethHosts> hosts;
  std::optional<Link> across_link;
  std::string skipped;
  if (across_hosts) {
    auto made = VethHosts::create("bench");
    if (!made) {
      skipped = made.error().message;
    } else {
      hosts = std::move(*made);
      auto link = across(*hosts, tcp_congestion_control);
      if (!link) return link.error();
      across_link = std::move(*link);
    }
  }
  auto first = bench_link(*lo, sizes, repetitions, max_iterations, goals_met);
  if (!first) return first.error();
  links.push_back(*first);
  if (across_link) {
    auto second = bench_link(*across_link, sizes, repetitions, max_iterations, goals_met);
    if (!second) return second.error();
    links.push_back(*second);
  } else if (!skipped.empty()) {
    links.push_back({{"link", "tcp over a veth pair between two network namespaces"}, {"skipped", skipped}});
  }
  return nlohmann::json{{"bench", "transport"},
                        {"transport", "ucx tag API, two processes"},
                        {"repetitions", repetitions},
                        {"max_iterations", max_iterations},
                        {"placement", "ours and ucx_perftest's: two processes pinned to a core each; each repetition "
                                      "of each size runs ucx_perftest's latency, ours, ucx_perftest's bandwidth, then "
                                      "ours from written memory"},
                        {"figures", "min/median/max over repetitions; *_vs_perftest: median = ours over the peer's "
                                    "median; per_repetition = ours over the peer's of the same repetition; worst = "
                                    "the worst of those (what the goals judge); worst_vs_peer_median = our worst "
                                    "repetition over the peer's median. Ours sends from memory it never wrote, as "
                                    "ucx_perftest does (zero pages); from_written_memory: ours sending from "
                                    "written memory, as a tensor is sent (not judged)"},
                        {"links", links},
                        {"goals", {{"latency_vs_perftest", "worst <= 3 from 8 B to 4 KiB"},
                                   {"bandwidth_vs_perftest", "worst >= 0.9 from 64 KiB to 64 MiB"}}},
                        {"goals_met", goals_met}};
}

}  // namespace troupe::cli
