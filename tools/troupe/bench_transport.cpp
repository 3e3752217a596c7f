// troupe bench transport: latency (ping-pong, half the round trip) and
// bandwidth (windows of back-to-back sends, then an ack) between two node
// processes over UCX, beside ucx_perftest's tag_lat and tag_bw on the same sizes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <atomic>
#include <sstream>

#include "runtime/redis_server.hpp"
#include "runtime/local_ranks.hpp"

namespace troupe::cli {
namespace {

using Clock = std::chrono::steady_clock;

int iterations_for(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / std::max<std::size_t>(bytes, 1), 8, 2000));
}

Expected<nlohmann::json> measure(UcxTransport& t, std::size_t bytes) {
  const int peer = 1 - t.rank(), iters = iterations_for(bytes);
  // Keep about 64 MiB in flight per window (as a streaming sender would).
  const int window = static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / std::max<std::size_t>(bytes, 1), 2, 64));
  // One buffer for every message of a window, as ucx_perftest does: the figure
  // is the transport's, not the memory system's on a 64 MiB working set.
  std::vector<char> buf(std::max<std::size_t>(bytes, 1));
  char ack = 0;
  auto send = [&](char* p, std::size_t n) { return wait_for([&](Completion c) { t.send(peer, 1, p, n, std::move(c)); }); };
  auto recv = [&](char* p, std::size_t n) { return wait_for([&](Completion c) { t.recv(peer, 1, p, n, std::move(c)); }); };
  // Latency.
  const auto l0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    if (t.rank() == 0) {
      TROUPE_TRY(send(buf.data(), bytes));
      TROUPE_TRY(recv(buf.data(), bytes));
    } else {
      TROUPE_TRY(recv(buf.data(), bytes));
      TROUPE_TRY(send(buf.data(), bytes));
    }
  }
  const double lat_us = std::chrono::duration<double, std::micro>(Clock::now() - l0).count() / iters / 2;
  // Bandwidth: windows of sends into distinct buffers, then a 1-byte ack.
  const int rounds = std::max(2, iters / window);
  const auto b0 = Clock::now();
  for (int r = 0; r < rounds; ++r) {
    std::atomic<int> remaining{window};
    std::atomic<bool> failed{false};
    for (int w = 0; w < window; ++w) {
      char* at = buf.data();
      auto cb = [&](Status st) {
        if (!st) failed = true;
        if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining.notify_one();
      };
      if (t.rank() == 0) t.send(peer, 2, at, bytes, cb);
      else t.recv(peer, 2, at, bytes, cb);
    }
    for (int left; (left = remaining.load(std::memory_order_acquire)) > 0;) remaining.wait(left);
    if (failed) return make_error("bench transport: a windowed transfer failed");
    if (t.rank() == 0) TROUPE_TRY(recv(&ack, 1));
    else TROUPE_TRY(send(&ack, 1));
  }
  const double secs = std::chrono::duration<double>(Clock::now() - b0).count();
  const double bw = static_cast<double>(bytes) * window * rounds / secs;
  return nlohmann::json{{"bytes", bytes}, {"latency_us", lat_us}, {"bandwidth_MBps", bw / 1e6}};
}

// The final row of ucx_perftest between two local processes (loopback only).
nlohmann::json perftest(const char* test, std::size_t bytes, int iters) {
  const int port = free_loopback_port();
  const std::string env = "UCX_NET_DEVICES=lo ";
  const std::string server = env + "ucx_perftest -p " + std::to_string(port) + " >/dev/null 2>&1 &";
  if (std::system(server.c_str()) != 0) return {{"error", "cannot start ucx_perftest"}};
  std::string client = env + "sleep 0.3; ucx_perftest 127.0.0.1 -p " + std::to_string(port) + " -t " + test + " -s " +
                       std::to_string(bytes) + " -n " + std::to_string(iters) + " 2>/dev/null | grep Final:";
  FILE* p = ::popen(client.c_str(), "r");
  if (!p) return {{"error", "cannot run ucx_perftest"}};
  char line[512] = {};
  const bool got = std::fgets(line, sizeof line, p) != nullptr;
  ::pclose(p);
  if (!got) return {{"error", "ucx_perftest printed no result"}};
  std::istringstream in(line);
  std::string word;
  double n, lat50, lat_avg, lat_all, bw_avg, bw_all;
  in >> word >> n >> lat50 >> lat_avg >> lat_all >> bw_avg >> bw_all;
  return {{"latency_us", lat_avg}, {"bandwidth_MBps", bw_all}};
}

}  // namespace

Expected<nlohmann::json> bench_transport(const std::vector<std::size_t>& sizes) {
  auto ours = run_ranks(2, [&](UcxTransport& t) -> Expected<nlohmann::json> {
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t s : sizes) {
      auto r = measure(t, s);
      if (!r) return r.error();
      rows.push_back(*r);
    }
    return rows;
  });
  if (!ours) return ours.error();
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const int iters = iterations_for(sizes[i]);
    nlohmann::json row = (*ours)[i];
    row["ucx_perftest"] = {{"tag_lat", perftest("tag_lat", sizes[i], iters)}, {"tag_bw", perftest("tag_bw", sizes[i], iters)}};
    const auto& peer_bw = row["ucx_perftest"]["tag_bw"];
    if (peer_bw.contains("bandwidth_MBps"))
      row["bandwidth_vs_perftest"] = row["bandwidth_MBps"].get<double>() / peer_bw["bandwidth_MBps"].get<double>();
    rows.push_back(row);
  }
  return nlohmann::json{{"bench", "transport"}, {"transport", "ucx tag API, two processes, loopback"},
                        {"results", rows}, {"target", "bandwidth >= 90% of ucx_perftest at 1 MiB and 64 MiB"}};
}

}  // namespace troupe::cli
