// Every `troupe bench` command in a smoke mode: tiny sizes, a few seconds each.
// Each test checks the JSON's fields and that the figures are figures (finite,
// positive, in their units), so that a benchmark that breaks or silently
// changes meaning fails here. (bench schedules and rendezvous: schedule_cli;
// checkpoint: checkpoint; health: health.)
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "tests/test_support.hpp"

namespace troupe::testing {
namespace {

nlohmann::json bench(const std::string& args) {
  const auto r = run("timeout 300 " + troupe_bin() + " bench " + args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

// A positive, finite number.
bool figure(const nlohmann::json& x) { return x.is_number() && std::isfinite(x.get<double>()) && x.get<double>() > 0; }

std::string config(const char* name) { return source_dir() + "/examples/configs/" + name; }

}  // namespace

TEST_CASE("bench transport refuses a TCP congestion control the namespaces refuse, naming the flag, before measuring",
          "[bench][transport]") {
  if (::geteuid() != 0) skip("network namespaces need root: the flag is only used across them");
  const auto r = run("timeout 60 " + troupe_bin() + " bench transport --sizes 8 --repetitions 1 --tcp-congestion-control no_such_cc");
  INFO(r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.out.empty());  // nothing measured, nothing printed
  CHECK(r.err.find("--tcp-congestion-control") != std::string::npos);
  CHECK(r.err.find("'no_such_cc'") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') <= 1);
}

TEST_CASE("bench transport: latency and bandwidth per size and link, repeated, beside ucx_perftest", "[bench][transport]") {
  const auto j = bench("transport --sizes 8 --sizes 65536 --repetitions 2 --max-iterations 2000");
  CHECK(j["bench"] == "transport");
  CHECK(j["repetitions"] == 2);
  CHECK(j["max_iterations"] == 2000);
  REQUIRE(j["links"].size() == 2);  // loopback, then across two network namespaces
  CHECK(j["goals_met"].contains("latency_le_3x"));
  for (const auto& link : j["links"]) {
    INFO(link["link"]);
    if (link.contains("skipped")) {  // no namespaces here: said why, never on loopback
      CHECK(link != j["links"][0]);
      CHECK_FALSE(link["skipped"].get<std::string>().empty());
      continue;
    }
    REQUIRE(link["results"].size() == 2);
    // Across namespaces TCP runs with reno unless told otherwise, and says so.
    if (link != j["links"][0]) CHECK(link["link"].get<std::string>().find("congestion control reno") != std::string::npos);
    CHECK(link["results"][0]["bytes"] == 8);
    CHECK(link["results"][1]["bytes"] == 65536);
    for (const auto& row : link["results"]) {
      INFO(row.dump());
      for (const char* key : {"latency_us", "bandwidth_MBps"}) {
        CHECK(row[key]["n"] == 2);
        CHECK(figure(row[key]["min"]));
        CHECK(row[key]["min"].get<double>() <= row[key]["median"].get<double>());
        CHECK(row[key]["median"].get<double>() <= row[key]["max"].get<double>());
      }
      CHECK(row["latency_us"]["max"].get<double>() < 1e6);  // microseconds, not seconds
      // The same pair of processes, sending from written memory (not judged).
      for (const char* key : {"latency_us", "bandwidth_MBps"}) {
        const auto& w = row["from_written_memory"][key];
        CHECK(w["n"] == 2);
        CHECK(figure(w["min"]));
        CHECK(w["min"].get<double>() <= w["max"].get<double>());
      }
      REQUIRE(row.contains("ucx_perftest"));
      if (row["ucx_perftest"].contains("error")) continue;  // reported, not hidden
      CHECK(figure(row["ucx_perftest"]["tag_lat"]["latency_us"]["median"]));
      CHECK(figure(row["ucx_perftest"]["tag_bw"]["bandwidth_MBps"]["median"]));
      CHECK(figure(row["latency_vs_perftest"]["median"]));
      CHECK(figure(row["from_written_memory"]["bandwidth_vs_perftest_median"]));
      // Judged repetition by repetition: the worst pair is no better than the
      // medians' ratio (ours >= m * peer in every pair bounds the medians).
      for (const char* ratio : {"latency_vs_perftest", "bandwidth_vs_perftest"}) {
        const auto& pairs = row[ratio]["per_repetition"];
        CHECK(pairs.size() == 2);
        std::vector<double> v;
        for (const auto& x : pairs) v.push_back(x.get<double>());
        const bool latency = std::string(ratio) == "latency_vs_perftest";
        CHECK(row[ratio]["worst"].get<double>() == (latency ? *std::max_element(v.begin(), v.end()) : *std::min_element(v.begin(), v.end())));
      }
      CHECK(row["bandwidth_vs_perftest"]["worst"].get<double>() <= row["bandwidth_vs_perftest"]["median"].get<double>());
      CHECK(row["latency_vs_perftest"]["worst"].get<double>() >= row["latency_vs_perftest"]["median"].get<double>());
    }
  }
}

TEST_CASE("bench collectives: ring all-reduce, reduce-scatter and all-gather per size, repeated", "[bench][collectives]") {
  const auto j = bench("collectives --nodes 2 --sizes 1024 --sizes 262144 --sizes 1048576 --repetitions 2 --no-gloo");
  CHECK(j["bench"] == "collectives");
  CHECK(j["repetitions"] == 2);
  REQUIRE(j["runs"].size() == 1);
  const auto& run = j["runs"][0];
  CHECK(run["nodes"] == 2);
  REQUIRE(run["results"].size() == 3);
  CHECK(run["results"][0]["bytes"] == 1024);
  for (const auto& row : run["results"]) {
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"}) {
      INFO(op);
      CHECK(row[op]["busbw_GBps"]["n"] == 2);
      CHECK(figure(row[op]["busbw_GBps"]["min"]));
      CHECK(row[op]["busbw_GBps"]["min"].get<double>() <= row[op]["busbw_GBps"]["max"].get<double>());
      CHECK(figure(row[op]["time_us"]["median"]));
      CHECK(row[op]["max_over_min"].get<double>() >= 1);
      // Each repetition's figure, in order, within the spread.
      REQUIRE(row[op]["busbw_GBps_each"].size() == 2);
      for (const auto& x : row[op]["busbw_GBps_each"]) {
        CHECK(x.get<double>() >= row[op]["busbw_GBps"]["min"].get<double>());
        CHECK(x.get<double>() <= row[op]["busbw_GBps"]["max"].get<double>());
      }
    }
    CHECK(figure(row["reduce_scatter_vs_all_gather"]["median"]));
    CHECK_FALSE(row.contains("gloo"));  // --no-gloo
    // The machine's figure beside the spread, at every size and repetition.
    CHECK(row["machine_round_trip_ns"]["n"] == 2);
    CHECK(figure(row["machine_round_trip_ns"]["min"]));
    CHECK(row["machine_round_trip_max_over_min"].get<double>() >= 1);
    CHECK(row["machine_round_trip_ns_each"].size() == 2);
    // And the vCPU time the hypervisor took meanwhile (0 at most moments; -1 without /proc/stat).
    REQUIRE(row["machine_steal_ms_each"].size() == 2);
    for (const auto& x : row["machine_steal_ms_each"]) CHECK(x.get<double>() >= -1);
    // The machine's figure beside it, where the goal applies (>= 1 MiB).
    const bool large = row["bytes"].get<std::size_t>() >= (std::size_t{1} << 20);
    CHECK(row.contains("machine_copy_vs_add") == large);
    CHECK(row.contains("machine_all_reduce_GBps") == large);
    if (large) {
      // The in-place ring's memory traffic alone, beside each repetition of ours.
      CHECK(row["machine_all_reduce_GBps"]["n"] == 2);
      CHECK(figure(row["machine_all_reduce_GBps"]["min"]));
      REQUIRE(row["all_reduce_over_machine"]["each"].size() == 2);
      for (std::size_t r = 0; r < 2; ++r)
        CHECK(row["all_reduce_over_machine"]["each"][r].get<double>() ==
              Approx(row["all_reduce"]["busbw_GBps_each"][r].get<double>() /
                     row["machine_all_reduce_GBps_each"][r].get<double>()));
      CHECK(row["all_reduce_over_machine"]["max_over_min"].get<double>() >= 1);
      CHECK(row["machine_copy_vs_add"]["n"] == 2);
      CHECK(figure(row["machine_copy_vs_add"]["min"]));
      CHECK(figure(row["reduce_scatter_vs_all_gather_over_machine"]));
    }
  }
  CHECK(j["goals_met"].contains("max_over_min_le_1.5"));
  CHECK_FALSE(j["goals_met"].contains("all_reduce_ge_2x_gloo"));
  CHECK(j["buffers"].get<std::string>().rfind("host-shared", 0) == 0);
}

TEST_CASE("bench collectives --buffers private: staged through slots, and a buffer kind it does not know is refused", "[bench][collectives]") {
  const auto j = bench("collectives --nodes 2 --sizes 1048576 --repetitions 1 --no-gloo --buffers private");
  CHECK(j["buffers"] == "private");
  REQUIRE(j["runs"][0]["results"].size() == 1);
  CHECK(figure(j["runs"][0]["results"][0]["all_reduce"]["busbw_GBps"]["min"]));
  CHECK(figure(j["runs"][0]["results"][0]["machine_copy_vs_add"]["min"]));
  const auto refused = run("timeout 60 " + troupe_bin() + " bench collectives --buffers pinned");
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("--buffers") != std::string::npos);
}

TEST_CASE("bench collectives --device: the group's device path beside the host rings and the pinned copy", "[bench][collectives][device]") {
  // CPU memory that says it is a device's: the staged path, as processes sharing one GPU take it.
  const auto r = run("TROUPE_CPU_AS_DEVICE=1 timeout 300 " + troupe_bin() +
                     " bench collectives --nodes 2 --sizes 65536 --sizes 67108864 --repetitions 2 --no-gloo --device cpu");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["device"]["kind"] == "cpu");
  const auto& run0 = j["runs"][0];
  CHECK(run0["device"]["path"] == "staged");
  CHECK(run0["device"]["why"] == "NCCL needs train.device = \"cuda\"");
  for (const auto& row : run0["results"]) {
    const auto& d = row["device"];
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"}) {
      INFO(op);
      CHECK(d[op]["busbw_GBps"]["n"] == 2);
      CHECK(figure(d[op]["busbw_GBps"]["min"]));
    }
    CHECK(figure(d["machine_pinned_copy_GBps"]["min"]));
    REQUIRE(d["all_reduce_over_min_copy_and_host"]["each"].size() == 2);
  }
  CHECK(j["goals_met"].contains("device_all_reduce_ge_0.7_of_min_copy_and_host"));  // judged at 64 MiB
  const auto refused = run("timeout 60 " + troupe_bin() + " bench collectives --device tpu");
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("--device") != std::string::npos);
}

TEST_CASE("bench collectives --across-hosts: each process count also runs with a namespace per rank, over TCP, reported but not judged",
          "[bench][collectives][netns]") {
  const auto j = bench("collectives --nodes 2 --sizes 1048576 --repetitions 1 --no-gloo --across-hosts");
  REQUIRE(j["runs"].size() == 2);  // on one host, then across
  const auto& here = j["runs"][0];
  const auto& across = j["runs"][1];
  CHECK(here["hosts"].get<std::string>().rfind("one host", 0) == 0);
  CHECK(across["nodes"] == 2);
  if (across.contains("skipped")) {  // no namespaces here: said why
    CHECK_FALSE(across["skipped"].get<std::string>().empty());
  } else {
    CHECK(across["hosts"].get<std::string>().find("network namespaces") != std::string::npos);
    CHECK(across["hosts"].get<std::string>().find("congestion control reno") != std::string::npos);
    REQUIRE(across["results"].size() == 1);
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"})
      CHECK(figure(across["results"][0][op]["busbw_GBps"]["min"]));
    CHECK(across["goals_met"].contains("max_over_min_le_1.5"));
  }
  // Judged on one host only: the top-level verdict is the first run's.
  CHECK(j["goals_met"] == here["goals_met"]);
  const auto refused = run("timeout 60 " + troupe_bin() + " bench collectives --nodes 27 --across-hosts --no-gloo");
  CHECK(refused.exit_code != 0);
  CHECK(refused.out.empty());
  CHECK(refused.err.find("--nodes") != std::string::npos);
}

TEST_CASE("bench step: step time, throughput, MFU and memory of one process", "[bench][step]") {
  const auto j = bench("step " + config("tiny.toml") + " --steps 2 --warmup 1");
  CHECK(j["bench"] == "step");
  CHECK(j["measured_steps"] == 2);
  CHECK(figure(j["step_ms"]));
  CHECK(figure(j["tokens_per_s"]));
  CHECK(figure(j["mfu"]));
  // Against the best of its sgemm repetitions; on shared cores even that can
  // fall short of a step that ran in a quiet moment, but not by half.
  CHECK(j["mfu"].get<double>() < 1.5);
  CHECK(figure(j["model"]["parameters"]));
  CHECK(figure(j["memory_mib"]["peak_rss"]));
}

TEST_CASE("bench ops: forward and backward time of each op", "[bench][ops]") {
  const auto j = bench("ops --threads 1 --reps 1");
  CHECK(j["bench"] == "ops");
  CHECK(j["threads"] == 1);
  CHECK(figure(j["sgemm_peak_gflops"]));
  REQUIRE(j["results"].size() == 2);  // the tiny and the small model's shapes
  for (const auto& shapes : j["results"]) {
    REQUIRE(shapes["ops"].size() >= 6);
    for (const auto& op : shapes["ops"]) {
      INFO(op.dump());
      CHECK(op["op"].is_string());
      for (const char* key : {"forward_ms", "backward_ms", "forward_rate", "backward_rate"}) CHECK(figure(op[key]));
      CHECK((op["unit"] == "GFLOP/s" || op["unit"] == "GB/s"));
    }
  }
}

TEST_CASE("bench pipeline: bubble beside the simulator, blocked time and hidden gradient buckets", "[bench][pipeline]") {
  ScratchDir dir("bench_pipeline");
  write_file(dir / "corpus.txt", synthetic_text(30000));
  REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string()).exit_code ==
          0);
  const auto j = bench("pipeline " + config("tiny_pipeline.toml") +
                       " --nodes 2 --warmup 1 --set train.steps=4 --set train.eval_every=0 --set data.train=" +
                       (dir / "train.bin") + " --set data.val=" + (dir / "val.bin"));
  INFO(j.dump());
  CHECK(j["bench"] == "pipeline");
  CHECK(j["nodes"] == 2);
  CHECK(j["measured_steps"] == 2);  // 4 steps - 1 warm-up - the last (it evaluates the model)
  CHECK(figure(j["step_ms"]));
  CHECK(figure(j["tokens_per_s"]));
  const auto& bubble = j["bubble"];
  INFO(bubble.dump());
  CHECK(bubble["ours"].get<double>() >= 0);
  CHECK(bubble["ours"].get<double>() < 1);
  CHECK(bubble["simulator"].get<double>() > 0);
  CHECK(bubble["simulator"].get<double>() < 1);
  CHECK(j["blocked_beyond_prediction"]["median_fraction_of_step"].get<double>() >= 0);
  CHECK(j["grad_sync"]["buckets_per_step"].get<double>() > 0);
  CHECK(j["grad_sync"]["buckets_hidden_by_backward"].get<double>() >= 0);
}


TEST_CASE("bench tp: step time, the collectives' exposed time and activations per actor beside the formula",
          "[bench][tp]") {
  ScratchDir dir("bench_tp");
  write_file(dir / "corpus.txt", synthetic_text(30000));
  REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string()).exit_code ==
          0);
  const auto j = bench("tp " + config("tiny.toml") + " --tp 2 --chunks 2 --steps 2 --warmup 1 --set model.layers=2 --set model.ctx=64"
                       " --set train.batch=2 --set train.threads=1 --set data.train=" + (dir / "train.bin") +
                       " --set data.val=" + (dir / "val.bin"));
  INFO(j.dump());
  CHECK(j["bench"] == "tp");
  REQUIRE(j["runs"].size() == 4);
  double last_mb = 1e300;
  for (const auto& run : j["runs"]) {
    INFO(run.dump());
    CHECK(run["step_ms"]["n"] == 2);
    CHECK(figure(run["step_ms"]["median"]));
    // The stage actors' own buffers equal the formula from the model's shapes, and each layout keeps less.
    const double mb = run["activation_mb_per_actor"]["measured"].get<double>();
    CHECK(mb == Approx(run["activation_mb_per_actor"]["formula"].get<double>()).epsilon(1e-6));
    CHECK(mb <= last_mb);  // each layout keeps less (the overlap: as much as without)
    if (run["layout"].get<std::string>().find("overlap") == std::string::npos) CHECK(mb < last_mb);
    last_mb = mb;
    if (run["layout"] == "tp 1") continue;
    CHECK(figure(run["tp_comm_ms"]["median"]));
    CHECK(run["tp_exposed_ms"]["median"].get<double>() <= run["tp_comm_ms"]["median"].get<double>() * (1 + 1e-9));
  }
  CHECK(j["overlap"]["chunks"] == 2);
  CHECK(j["overlap"]["exposed_vs_unoverlapped_comm"].get<double>() >= 0);
}

TEST_CASE("bench recovery --simulate-nodes: one recovery's control traffic per survivor, at two sizes", "[bench][recovery]") {
  const auto j = bench("recovery --simulate-nodes 8,96");
  INFO(j.dump());
  REQUIRE(j["simulated"].size() == 2);
  for (const auto& row : j["simulated"]) {
    // Recover, Rewire and Redo in; NodeAborted and Rewired out; the real coordinator's count.
    CHECK(row["messages_per_survivor"]["received"]["max"] == 3);
    CHECK(row["messages_per_survivor"]["received"]["min"] == 3);
    CHECK(row["messages_per_survivor"]["sent"]["max"] == 2);
    CHECK(row["coordinator_messages"] == 5 * row["nodes"].get<int>() + 1);
    CHECK(row["redis_commands"].get<int>() >= 1);  // the generation's bump at least
    CHECK(figure(row["report_to_every_redo_ms"]));
  }
  CHECK(j["goals"]["per_survivor_traffic_constant"] == true);
}

}  // namespace troupe::testing

namespace troupe::testing {

TEST_CASE("bench report: a synthetic run's page size, write time and load time in Chromium", "[bench][report]") {
  const auto j = bench("report --steps 3000 --actors 64 --runs 2");
  CHECK(j["bench"] == "report");
  CHECK(j["steps"] == 3000);
  CHECK(figure(j["metrics_mb"]));
  CHECK(figure(j["page_mb"]));
  CHECK(j["page_mb"].get<double>() < j["page_limit_mb"].get<double>());
  CHECK(j["write_report_s"]["n"] == 2);
  if (std::filesystem::exists("/usr/bin/chromium")) {
    CHECK(j["load_ms"]["n"] == 2);
    CHECK(figure(j["load_ms"]["max"]));
    CHECK(j["page_errors"].empty());
  } else {
    CHECK(j["load_ms"].is_null());
  }
}

}  // namespace troupe::testing
