// troupe bench report.
#include "tools/troupe/bench_report.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "tools/report/report_page.hpp"
#include "tools/troupe/bench_figures.hpp"

namespace troupe::cli {
namespace {

constexpr const char* kChromium = "/usr/bin/chromium";

// A 1,024-actor job's metrics: pp 16 x dp 64, compute times around 100 ms with
// noise, one slow actor for 500 steps every 20,000, a verdict and a recovery
// every 25,000 steps, a checkpoint every 1,000.
Status write_synthetic_metrics(const std::string& path, int steps, int actors) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return make_error(path, ": cannot write the synthetic metrics");
  const int pp = std::min(16, actors), dp = std::max(1, actors / pp);
  fmt::print(f, R"({{"run":{{"version":"bench","started_at":"2026-01-01T00:00:00.000Z","config":{{"path":"synthetic.toml","text":"# synthetic\n","overrides":[]}},"model":{{"layers":96,"dim":12288,"heads":96,"ctx":2048,"vocab":50304,"parameters":175000000000}},"layout":{{"dp":{},"pp":{},"tp":1,"schedule":"1f1b","chunks":1,"microbatches":64,"batch":1}},"device":"cuda","precision":"bf16","steps":{},"nodes":{},"actors":{}}}}})"
             "\n",
             dp, pp, steps, std::max(1, actors / 8), actors);
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0, 2.0);
  std::string line;
  for (int step = 0; step < steps; ++step) {
    const int slow = (step / 20000) * 37 % actors;
    const bool slowed = step % 20000 >= 1000 && step % 20000 < 1500;
    line.clear();
    fmt::format_to(std::back_inserter(line), R"({{"actor_compute_ms":[)");
    for (int a = 0; a < actors; ++a)
      fmt::format_to(std::back_inserter(line), "{}{:.2f}", a ? "," : "",
                     100.0 + (a % pp) * 0.5 + noise(rng) + (slowed && a == slow ? 60.0 : 0.0));
    const double loss = 2.0 + 8.0 * std::exp(-step / 8000.0) + 0.05 * noise(rng) / 2;
    fmt::format_to(std::back_inserter(line),
                   R"(],"blocked_beyond_prediction":0.01,"blocked_beyond_prediction_ms":{:.3f},"bubble":{:.4f},)"
                   R"("bubble_predicted":0.06,"grad_buckets":16,"grad_buckets_hidden":{},"grad_norm":{:.4f},"loss":{:.5f},)"
                   R"("lr":{:.3e},"mfu":{:.4f},"step":{},"step_ms":{:.3f},"tokens_per_s":{:.1f})",
                   std::abs(noise(rng)), 0.07 + std::abs(noise(rng)) / 200, 14 + step % 3, 1.0 + std::abs(noise(rng)) / 4,
                   loss, 3e-4 * std::cos(step * 1.5 / steps), 0.45 + noise(rng) / 100, step,
                   6500 + 30 * noise(rng) + (slowed ? 400 : 0), 1.3e6 + 1e4 * noise(rng));
    if (slowed && step % 20000 >= 1003)
      fmt::format_to(std::back_inserter(line),
                     R"(,"stragglers":[{{"compute_slowdown":1.6,"node":{},"rank":{},"replica":{},"stage":{},"step_cost_ms":400,"step_share":0.06}}])",
                     slow / 8, slow, slow / pp, slow % pp);
    if (step % 1000 == 999)
      fmt::format_to(std::back_inserter(line), R"(,"checkpoint_persisted":{{"node_mb":2800,"s":9.5,"step":{}}},"checkpoint_stall_ms":210)",
                     step + 1);
    line += "}\n";
    std::fputs(line.c_str(), f);
    if (step % 25000 == 24999) {
      fmt::print(f, R"({{"fault":{{"actor":-1,"at_ms":1,"evidence":"its actor system went away","kind":"process_death","node":{}}}}})"
                    "\n",
                 step / 25000);
      fmt::print(f, R"({{"recovery":{{"abort_ms":40,"checkpoint":"","failed":{{"actor":-1,"kind":"process_death","node":{}}},"generation":{},"renewed_workers":8,"replaced_by":"a spare","replaced_on":{},"restored_mb":2800,"rewire_ms":12,"rollback_step":{},"source":"buddy","stale_messages_dropped":0}}}})"
                    "\n",
                 step / 25000, step / 25000 + 2, std::max(1, actors / 8), step);
    }
  }
  fmt::print(f, R"({{"end":{{"outcome":"finished","steps":{},"loss":2.01,"at":"2026-01-09T00:00:00.000Z"}}}})"
                "\n",
             steps);
  const bool ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !ok) return make_error(path, ": write failed (disk full?)");
  return Status::success();
}

// The page's own figures (#self-check) after headless Chromium loaded it, and Chromium's wall time.
Expected<nlohmann::json> load_in_chromium(const std::string& page, const std::string& profile) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string cmd = std::string("timeout 120 ") + kChromium +
                          " --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --window-size=1400,2500 "
                          "--user-data-dir=" + profile + " --dump-dom file://" + page +
                          " 2>/dev/null";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return make_error("bench report: cannot run ", kChromium);
  std::string dom;
  char buf[65536];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) dom.append(buf, n);
  const int status = ::pclose(p);
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::smatch m;
  if (status != 0 || !std::regex_search(dom, m, std::regex("<pre id=\"self-check\"[^>]*>([^<]*)</pre>")))
    return make_error("bench report: Chromium did not load ", page);
  auto check = nlohmann::json::parse(m[1].str(), nullptr, false);
  if (check.is_discarded()) return make_error("bench report: the page's self-check is not JSON");
  return nlohmann::json{{"page_ms", check.value("page_ms", -1.0)},
                        {"script_ms", check.value("render_ms", -1.0)},
                        {"chromium_wall_ms", wall_ms},
                        {"errors", check["errors"]}};
}

}  // namespace

Expected<nlohmann::json> bench_report(const BenchReportArgs& a) {
  BenchDirectory dir(a.dir, "troupe_bench_report");
  std::filesystem::create_directories(dir.path());
  const std::string metrics = dir.path() + "/metrics.jsonl", page = dir.path() + "/report.html";
  TROUPE_TRY(write_synthetic_metrics(metrics, a.steps, a.actors));
  std::vector<double> write_s, page_ms, script_ms, chromium_ms;
  nlohmann::json errors = nlohmann::json::array();
  const bool browser = std::filesystem::exists(kChromium);
  for (int i = 0; i < a.runs; ++i) {
    report::ReportInputs in;
    in.metrics = metrics;
    in.output = page;
    const auto t0 = std::chrono::steady_clock::now();
    TROUPE_TRY(report::write_report(in));
    write_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!browser) continue;
    auto loaded = load_in_chromium(page, dir.path() + "/chromium-profile");
    if (!loaded) return loaded.error();
    page_ms.push_back((*loaded)["page_ms"].get<double>());
    script_ms.push_back((*loaded)["script_ms"].get<double>());
    chromium_ms.push_back((*loaded)["chromium_wall_ms"].get<double>());
    for (const auto& e : (*loaded)["errors"]) errors.push_back(e);
  }
  return nlohmann::json{
      {"bench", "report"},
      {"steps", a.steps},
      {"actors", a.actors},
      {"metrics_mb", static_cast<double>(std::filesystem::file_size(metrics)) / 1e6},
      {"page_mb", static_cast<double>(std::filesystem::file_size(page)) / 1e6},
      {"page_limit_mb", 5.0},
      {"write_report_s", spread(write_s)},
      {"browser", browser ? kChromium : "none (no Chromium: load times not measured)"},
      {"load_ms", spread(page_ms)},
      {"load_limit_ms", 2000},
      {"script_ms", spread(script_ms)},
      {"chromium_process_ms", spread(chromium_ms)},
      {"page_errors", errors},
      {"dir", dir.described()}};
}

}  // namespace troupe::cli
