// troupe report in a real browser (headless Chromium): the pages of (a) the
// demo's layout, (b) a run with a slow drill and a recovery, (c) a failed run
// load without a console error, and hold the charts, heat map, events and
// schedule with the expected number of points (read from the page's
// #self-check, which its script fills with what it drew). A screenshot of
// each goes to build/tests/report-screenshots/.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <regex>

#include "tests/test_support.hpp"

namespace troupe::testing {
namespace {

const std::string kChromium = "/usr/bin/chromium";

std::filesystem::path screenshots() {
  const auto dir = std::filesystem::path(troupe_bin()).parent_path().parent_path().parent_path() / "tests" /
                   "report-screenshots";
  std::filesystem::create_directories(dir);
  return dir;
}

// What the page drew, from its #self-check; the browser's console lines in `console`.
struct Browsed {
  nlohmann::json check;
  std::string dom, console;
};

Browsed browse(const ScratchDir& dir, const std::string& page, const std::string& shot) {
  if (!std::filesystem::exists(kChromium)) skip("no Chromium at " + kChromium + " (scripts/setup.sh installs chromium)");
  // As root (CI) without the sandbox; /dev/shm may be small in a container.
  const std::string flags = " --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
                            "--hide-scrollbars --window-size=1400,2500 --virtual-time-budget=5000 "
                            "--enable-logging=stderr --v=0 --user-data-dir=" +
                            (dir / "chromium-profile");
  const auto r = run("timeout 90 " + kChromium + flags + " --dump-dom file://" + page);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  Browsed b;
  b.dom = r.out;
  std::smatch m;
  REQUIRE(std::regex_search(b.dom, m, std::regex("<pre id=\"self-check\"[^>]*>([^<]*)</pre>")));
  b.check = nlohmann::json::parse(m[1].str(), nullptr, false);
  REQUIRE_FALSE(b.check.is_discarded());
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);)
    if (line.find(":CONSOLE") != std::string::npos) b.console += line + "\n";
  // Every page loads clean: nothing on the console, no error caught by the page's script.
  CHECK(b.console.empty());
  CHECK(b.check["errors"].empty());
  const std::string png = (screenshots() / shot).string();
  std::filesystem::remove(png);
  const auto s = run("timeout 90 " + kChromium + flags + " --screenshot=" + png + " file://" + page);
  REQUIRE(s.exit_code == 0);
  CHECK(std::filesystem::file_size(png) > 20000);
  return b;
}

// A corpus and the demo's layout (tiny_pipeline.toml: pp 2 x dp 2 on two nodes) reading it.
struct DemoJob {
  ScratchDir dir;
  std::string data_args;
  explicit DemoJob(const std::string& tag) : dir(tag) {
    write_file(dir / "corpus.txt", synthetic_text(200000));
    REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string())
                .exit_code == 0);
    data_args = " --set data.train=" + (dir / "train.bin") + " --set data.val=" + (dir / "val.bin");
  }
  std::string launch(const std::string& args) const {
    return "timeout 240 " + troupe_bin() + " launch --nodes 2 " + source_dir() + "/examples/configs/tiny_pipeline.toml" +
           data_args + " " + args;
  }
};

int series_points(const nlohmann::json& check, const std::string& chart, const std::string& series) {
  return check["charts"][chart]["series"][series].get<int>();
}

}  // namespace

TEST_CASE("the demo's report loads in Chromium with every chart, the heat map and the events", "[report][browser]") {
  DemoJob job("report_demo");
  const auto r = run(job.launch("--set train.steps=40 --set train.eval_every=20 --report " + (job.dir / "demo.html")));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto b = browse(job.dir, job.dir / "demo.html", "demo.png");
  INFO(b.check.dump());
  CHECK(b.check["outcome"]["status"] == "finished");
  CHECK(series_points(b.check, "chart-loss", "loss") == 40);
  CHECK(series_points(b.check, "chart-loss", "val loss") == 2);  // steps 19 and 39
  for (const char* chart : {"chart-lr", "chart-grad_norm", "chart-tokens_per_s", "chart-step_ms", "chart-mfu",
                            "chart-blocked"})
    CHECK(b.check["charts"][chart]["drawn"] == true);
  CHECK(series_points(b.check, "chart-bubble", "measured") == 40);
  CHECK(series_points(b.check, "chart-bubble", "simulator") == 40);
  CHECK(b.check["heat"]["rows"] == 4);  // 4 stage actors
  CHECK(b.check["heat"]["columns"] == 40);
  CHECK(b.check["heat"]["painted"] == 160);
  CHECK(b.check["schedule"]["drawn"] == false);  // no --trace: left out, with a note
  CHECK(b.dom.find("no trace given (--trace)") != std::string::npos);
  CHECK(b.dom.find("dp 2 × pp 2 × tp 1, 1f1b") != std::string::npos);  // the header's layout
}

TEST_CASE("a report of a slow drill and a recovery frames the straggler and lists the verdict and the recovery",
          "[report][browser]") {
  DemoJob job("report_recovery");
  const auto r = run(job.launch("--set train.steps=50 --set train.eval_every=0 --trace " + (job.dir / "trace.json") +
                                " --report " + (job.dir / "recovery.html") +
                                " --set checkpoint.dir=" + (job.dir / "ckpt") +
                                " --set checkpoint.every=10 --set recovery.max_failures_per_hour=10 "
                                "--set recovery.restarts=1 --fault kind=slow,actor=1,step=15,factor=3,steps=10 "
                                "--fault kind=kill,node=1,step=35"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto b = browse(job.dir, job.dir / "recovery.html", "drill_and_recovery.png");
  INFO(b.check.dump());
  CHECK(b.check["outcome"]["status"] == "finished");
  CHECK(series_points(b.check, "chart-loss", "loss") == 50);  // the redone steps logged once
  CHECK(b.check["heat"]["painted"] == 200);
  CHECK(b.check["heat"]["stragglers_marked"].get<int>() >= 1);
  // The straggler's row, the verdict, the recovery, the checkpoints.
  CHECK(b.dom.find("stage 0 replica 1 (stage actor 1, node 0)") != std::string::npos);
  CHECK(b.dom.find("process_death: node 1") != std::string::npos);
  CHECK(std::regex_search(b.dom, std::regex("every actor rolled back to step 3[45] \\(generation 2\\)")));
  CHECK(b.dom.find("step 10 persisted") != std::string::npos);
  // One step's schedule from the trace beside the simulator's: 4 actors measured, 2 stages simulated.
  CHECK(b.check["schedule"]["drawn"] == true);
  CHECK(b.check["schedule"]["measured_lanes"] == 4);
  CHECK(b.check["schedule"]["simulated_lanes"] == 2);
  CHECK(b.check["schedule"]["spans"].get<int>() > 4 * 8);  // 4 forwards and 4 backwards per actor at least
}

TEST_CASE("a failed run's report has the verdict at the top, and a bad metrics line is skipped and counted",
          "[report][browser]") {
  DemoJob job("report_failed");
  const auto r = run(job.launch("--set train.steps=40 --report " + (job.dir / "failed.html") +
                                " --fault kind=kill,node=1,step=12"));
  INFO(r.err);
  REQUIRE(r.exit_code != 0);
  REQUIRE(std::filesystem::exists(job.dir / "failed.html"));
  const auto b = browse(job.dir, job.dir / "failed.html", "failed.png");
  INFO(b.check.dump());
  CHECK(b.check["outcome"]["status"] == "failed");
  CHECK(b.check["outcome"]["verdict"] == "process_death");
  CHECK(series_points(b.check, "chart-loss", "loss") <= 13);
  // The verdict's line comes before the first chart.
  const auto verdict = b.dom.find("verdict process_death: node 1"), charts = b.dom.find("id=\"chart-loss\"");
  CHECK(verdict != std::string::npos);
  CHECK(verdict < charts);
  // troupe report on the same metrics with a truncated line and garbage appended: counted, never a crash.
  {
    std::ofstream out(job.dir / "failed.html.metrics.jsonl", std::ios::app);
    out << "{\"step\": 13, \"loss\": 4.\nnot json\n";
  }
  const auto again = run(troupe_bin() + " report " + (job.dir / "failed.html.metrics.jsonl") + " --trace " +
                         (job.dir / "missing.json") + " --output " + (job.dir / "again.html"));
  INFO(again.err);
  REQUIRE(again.exit_code == 0);
  const auto c = browse(job.dir, job.dir / "again.html", "failed_with_bad_lines.png");
  CHECK(c.check["outcome"]["skipped_lines"] == 2);
  CHECK(c.dom.find("2 skipped") != std::string::npos);
  CHECK(c.dom.find("missing.json: cannot open the trace: the step's schedule is left out") != std::string::npos);
}

TEST_CASE("troupe report refuses a metrics file it cannot open and an output it cannot write, in one line",
          "[report][cli]") {
  ScratchDir dir("report_cli");
  auto r = run(troupe_bin() + " report " + (dir / "none.jsonl") + " --output " + (dir / "r.html"));
  CHECK(r.exit_code == 1);
  CHECK(r.err == "troupe report: " + (dir / "none.jsonl") + ": cannot open the metrics file\n");
  write_file(dir / "m.jsonl", "{\"step\":0,\"loss\":1}\n");
  r = run(troupe_bin() + " report " + (dir / "m.jsonl") + " --output " + (dir / "no/such/dir/r.html"));
  CHECK(r.exit_code == 1);
  CHECK(r.err.rfind("troupe report: --output " + (dir / "no/such/dir/r.html") + ": cannot create a temporary", 0) == 0);
  CHECK_FALSE(std::filesystem::exists(dir / "no"));
}

}  // namespace troupe::testing
