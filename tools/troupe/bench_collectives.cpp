// troupe bench collectives --nodes K: ring all-reduce, reduce-scatter and
// all-gather between K node processes over UCX, bus bandwidth as nccl-tests
// defines it, beside gloo (bench/gloo_collectives.py) on the same sizes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>

#include "backends/transport/collectives.hpp"
#include "runtime/local_ranks.hpp"

#ifndef TROUPE_SOURCE_DIR
#define TROUPE_SOURCE_DIR "."
#endif

namespace troupe::cli {
namespace {

int iterations_for(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / std::max<std::size_t>(bytes, 1) / 4, 5, 200));
}

Expected<nlohmann::json> measure(UcxTransport& t, const std::vector<std::size_t>& sizes) {
  Collectives coll(t);
  std::vector<int> group(static_cast<std::size_t>(t.size()));
  std::iota(group.begin(), group.end(), 0);
  const int n = t.size();
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t bytes : sizes) {
    std::vector<float> buf(std::max<std::size_t>(1, bytes / sizeof(float)), 1.0f);
    nlohmann::json row = {{"bytes", bytes}};
    struct OpDef {
      const char* name;
      double factor;
      std::function<void(Completion)> run;
    };
    const std::vector<OpDef> ops = {
        {"all_reduce", Collectives::all_reduce_bus_factor(n),
         [&](Completion c) { coll.all_reduce(group, buf.data(), buf.size(), std::move(c)); }},
        {"reduce_scatter", Collectives::gather_bus_factor(n),
         [&](Completion c) { coll.reduce_scatter(group, buf.data(), buf.size(), std::move(c)); }},
        {"all_gather", Collectives::gather_bus_factor(n),
         [&](Completion c) { coll.all_gather(group, buf.data(), buf.size(), std::move(c)); }},
    };
    for (const auto& op : ops) {
      TROUPE_TRY(wait_for(op.run));  // warm-up
      std::vector<double> times;
      for (int i = 0; i < iterations_for(bytes); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        TROUPE_TRY(wait_for(op.run));
        times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(times.begin(), times.end());
      const double secs = times[times.size() / 2];
      row[op.name] = {{"time_us", secs * 1e6}, {"busbw_GBps", static_cast<double>(bytes) / secs * op.factor / 1e9}};
    }
    rows.push_back(row);
  }
  return rows;
}

nlohmann::json run_gloo(int nodes, const std::vector<std::size_t>& sizes) {
  std::string list;
  for (auto s : sizes) {
    if (!list.empty()) list += ',';
    list += std::to_string(s);
  }
  const std::string cmd = "/usr/bin/python3 " TROUPE_SOURCE_DIR "/bench/gloo_collectives.py --nodes " +
                          std::to_string(nodes) + " --sizes " + list + " 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  if (!p) return {{"error", "cannot run " + cmd}};
  std::string text;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p.get())) text += buf;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return {{"error", "gloo_collectives.py printed no JSON (is python3-torch installed?)"}};
  return j;
}

}  // namespace

Expected<nlohmann::json> bench_collectives(int nodes, const std::vector<std::size_t>& sizes, bool with_gloo) {
  if (nodes < 2) return make_error("--nodes must be >= 2");
  auto ours = run_ranks(nodes, [&](UcxTransport& t) { return measure(t, sizes); });
  if (!ours) return ours.error();
  nlohmann::json out = {{"bench", "collectives"}, {"nodes", nodes}, {"algorithm", "ring over UCX"},
                        {"bus_bandwidth", "nccl-tests: all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n"},
                        {"results", *ours}};
  if (with_gloo) {
    auto gloo = run_gloo(nodes, sizes);
    out["gloo"] = gloo;
    if (gloo.contains("results"))
      for (std::size_t i = 0; i < sizes.size() && i < gloo["results"].size(); ++i) {
        auto& row = out["results"][i];
        const auto& g = gloo["results"][i];
        for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"})
          if (g.contains(op) && g[op].contains("busbw_GBps"))
            row[std::string(op) + "_vs_gloo"] = row[op]["busbw_GBps"].get<double>() / g[op]["busbw_GBps"].get<double>();
      }
  }
  return out;
}

}  // namespace troupe::cli
