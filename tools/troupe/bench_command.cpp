// troupe-bench's benchmarks (troupe bench step|ops|collectives|...): JSON on stdout.
#include <array>
#include <cstdio>
#include <thread>

#include "runtime/config/job_config.hpp"
#include "tools/troupe/bench_ops.hpp"
#include "tools/troupe/bench_checkpoint.hpp"
#include "tools/troupe/bench_collectives.hpp"
#include "tools/troupe/bench_health.hpp"
#include "backends/device.hpp"
#include "tools/troupe/bench_recovery.hpp"
#include "tools/troupe/bench_report.hpp"
#include "tools/troupe/bench_step.hpp"
#include "tools/troupe/commands.hpp"

namespace troupe::cli {
nlohmann::json bench_schedules(int p, int m, int v);
Expected<nlohmann::json> bench_rendezvous(const std::vector<int>& sizes, const std::string& redis_url, int clients);
Expected<nlohmann::json> bench_transport(const std::vector<std::size_t>& sizes, int repetitions, bool across_hosts,
                                         const std::string& tcp_congestion_control, int max_iterations);
Expected<nlohmann::json> bench_tp(const std::string& config, int tp, int chunks, std::vector<std::string> overrides,
                                  int steps, int warmup);
Expected<nlohmann::json> bench_pipeline(const std::string& config, int nodes, std::vector<std::string> overrides,
                                        int warmup);
}

namespace troupe::cli {

void register_bench(CLI::App& app, Action& action) {
  CLI::App* bench = &app;
  bench->require_subcommand(1);

  auto step = std::make_shared<BenchStepArgs>();
  auto* s = bench->add_subcommand("step", "Training step throughput, MFU and memory");
  s->add_option("config", step->config, "Job config (TOML)")->required();
  s->add_option("--set", step->overrides, "Override a config key")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  s->add_option("--steps", step->steps, "Measured steps");
  s->add_option("--warmup", step->warmup, "Warm-up steps");
  s->add_flag("--pytorch", step->pytorch, "Also run PyTorch on the same model and print it beside");
  s->add_option("--device", step->device, "cpu or cuda (train.device)")->check(CLI::IsMember({"cpu", "cuda"}));
  s->add_option("--precision", step->precision, "fp32 or bf16 (train.precision)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  s->add_option("--pytorch-modes", step->pytorch_modes,
                "On a GPU, PyTorch's modes to run: eager, compile, cudagraphs (comma-separated)");
  s->callback([step, &action] {
    action = [step] {
      auto r = bench_step(*step);
      if (!r) return fail("bench step", r.error());
      std::printf("%s\n", r->dump(2).c_str());
      return 0;
    };
  });

  auto ckpt = std::make_shared<BenchCheckpointArgs>();
  auto* ck = bench->add_subcommand("checkpoint", "Checkpoint stall, persist and restore beside memcpy, the disk and torch.save");
  ck->add_option("config", ckpt->config, "Job config (TOML)")->required();
  ck->add_option("--set", ckpt->overrides, "Override a config key")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  ck->add_option("--dir", ckpt->dir, "Where to write (default: a temporary directory, removed)");
  ck->add_option("--repeats", ckpt->repeats, "Repetitions of every figure")->check(CLI::Range(1, 1000));
  ck->add_option("--steps", ckpt->steps, "Training steps measured with and without a persist running")
      ->check(CLI::Range(1, 100000));
  ck->add_flag("--pytorch", ckpt->pytorch, "Also time PyTorch's torch.save of the same state");
  auto* ck_nodes = ck->add_option("--nodes", ckpt->nodes,
                                  "Measure the job itself, launched on N node processes (each with its writer)")
                       ->check(CLI::Range(1, 64));
  ck->add_option("--every", ckpt->every, "With --nodes: a checkpoint every this many steps")
      ->check(CLI::Range(1, 100000))
      ->needs(ck_nodes);
  ck_nodes->excludes(ck->get_option("--pytorch"));
  ck->callback([ckpt, &action] {
    action = [ckpt] {
      auto r = bench_checkpoint(*ckpt);
      if (!r) return fail("bench checkpoint", r.error());
      std::printf("%s\n", r->dump(2).c_str());
      return 0;
    };
  });

  auto health = std::make_shared<BenchHealthArgs>();
  auto* he = bench->add_subcommand("health", "Fault detection latency, heartbeat cost, straggler precision and recall");
  auto simulate = std::make_shared<BenchHealthSimArgs>();
  he->add_option("config", health->config, "Job config (TOML): one stage actor per node");
  he->add_option("--set", health->overrides, "Override a config key")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  he->add_option("--nodes", health->nodes, "Node processes")->check(CLI::Range(2, 64));
  he->add_option("--drills", health->drills, "Drills of each fault kind")->check(CLI::Range(0, 1000));
  he->add_option("--straggler-drills", health->straggler_drills, "Slow drills (random actor and factor)")
      ->check(CLI::Range(0, 1000));
  he->add_option("--overhead-runs", health->overhead_runs, "Pairs of runs with and without heartbeats")
      ->check(CLI::Range(1, 100));
  he->add_option("--simulate-nodes", simulate->nodes,
                 "Instead: simulate the heartbeats of this many nodes (a list: 1024,4096,16384)")
      ->delimiter(',')
      ->check(CLI::Range(2, 1000000));
  he->add_option("--simulate-actors", simulate->actors_per_node, "Stage actors per simulated node")
      ->check(CLI::Range(1, 1024));
  he->add_option("--repetitions", simulate->repetitions, "Simulated runs of each size")->check(CLI::Range(1, 100));
  he->callback([health, simulate, &action] {
    action = [health, simulate] {
      if (!simulate->nodes.empty()) {
        Expected<JobConfig> job = JobConfig{};
        if (!health->config.empty()) job = load_job_config(health->config, health->overrides);
        else if (!health->overrides.empty()) job = make_error("--set needs a CONFIG");
        if (!job) return fail("bench health", job.error());
        simulate->limits = HealthLimits{job->health.heartbeat_ms, job->health.miss_limit, job->health.progress_timeout_ms};
        simulate->relay_group = job->health.relay_group;
        auto r = bench_health_simulated(*simulate);
        if (!r) return fail("bench health", r.error());
        std::printf("%s\n", r->dump(2).c_str());
        return 0;
      }
      if (health->config.empty()) return fail("bench health", Error{"a CONFIG is needed (or --simulate-nodes)"});
      auto r = bench_health(*health);
      if (!r) return fail("bench health", r.error());
      std::printf("%s\n", r->dump(2).c_str());
      return 0;
    };
  });

  auto recovery = std::make_shared<BenchRecoveryArgs>();
  auto* rc = bench->add_subcommand("recovery", "Hot replacement: time lost per fault by phase, restore source, final weights");
  auto recovery_sim = std::make_shared<std::vector<int>>();
  rc->add_option("config", recovery->config, "Job config (TOML)");
  rc->add_option("--simulate-nodes", *recovery_sim,
                 "Instead: one recovery's control traffic among this many simulated nodes (a list: 1024,4096,16384)")
      ->delimiter(',');
  rc->add_option("--set", recovery->overrides, "Override a config key")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  rc->add_option("--nodes", recovery->nodes, "Node processes")->check(CLI::Range(2, 64));
  rc->add_option("--faults", recovery->faults, "Faults in the run (exception, stall, lost message, actor kill, node kill, coordinator kill and, with --simultaneous, a simultaneous kill in turn)")
      ->check(CLI::Range(1, 1000));
  rc->add_option("--seed", recovery->seed, "Seed of the faults' actors, nodes and steps");
  rc->add_option("--steps-between", recovery->steps_between, "Steps from one fault to the next")->check(CLI::Range(3, 1000));
  rc->add_option("--simultaneous", recovery->simultaneous,
                 "With N >= 2, a seventh kind of fault: N node processes killed in the same step (a rack)")
      ->check(CLI::Range(1, 64));
  rc->add_option("--log", recovery->log_path, "Write the run with faults' log to FILE");
  rc->callback([recovery, recovery_sim, &action] {
    action = [recovery, recovery_sim] {
      if (recovery_sim->empty() && recovery->config.empty())
        return fail("bench recovery", Error{"a CONFIG is needed (or --simulate-nodes)"});
      auto r = recovery_sim->empty() ? bench_recovery(*recovery) : bench_recovery_simulated(*recovery_sim);
      if (!r) return fail("bench recovery", r.error());
      std::printf("%s\n", r->dump(2).c_str());
      return 0;
    };
  });

  auto rep = std::make_shared<BenchReportArgs>();
  auto* rp = bench->add_subcommand("report", "troupe report on a synthetic run: page size, write time, load time in Chromium");
  rp->add_option("--steps", rep->steps, "Steps of the synthetic run")->check(CLI::Range(1, 10000000));
  rp->add_option("--actors", rep->actors, "Stage actors of the synthetic run")->check(CLI::Range(1, 65536));
  rp->add_option("--runs", rep->runs, "Repetitions (min / median / max)")->check(CLI::Range(1, 100));
  rp->add_option("--dir", rep->dir, "Keep the metrics and the page here (default: a temporary folder, removed)");
  rp->callback([rep, &action] {
    action = [rep] {
      auto r = bench_report(*rep);
      if (!r) return fail("bench report", r.error());
      std::printf("%s\n", r->dump(2).c_str());
      return 0;
    };
  });

  auto sizes = std::make_shared<std::array<int, 3>>(std::array<int, 3>{64, 512, 4});
  auto* sc = bench->add_subcommand("schedules", "Time to build, validate and simulate every schedule kind");
  sc->add_option("--stages", (*sizes)[0], "Pipeline stages")->check(CLI::Range(1, 4096));
  sc->add_option("--microbatches", (*sizes)[1], "Microbatches (a multiple of stages)")->check(CLI::Range(1, 1 << 20));
  sc->add_option("--chunks", (*sizes)[2], "Chunks for interleaved-1f1b")->check(CLI::Range(1, 64));
  sc->callback([sizes, &action] {
    action = [sizes] {
      std::printf("%s\n", bench_schedules((*sizes)[0], (*sizes)[1], (*sizes)[2]).dump(2).c_str());
      return 0;
    };
  });

  struct RendezvousArgs {
    std::vector<int> ranks{256, 1024, 4096, 16384};
    std::string redis;
    int clients = 16;
  };
  auto rz = std::make_shared<RendezvousArgs>();
  auto* r = bench->add_subcommand("rendezvous", "Simulated ranks joining through one real Redis");
  r->add_option("--ranks", rz->ranks, "Rank counts to run")->check(CLI::Range(1, 1 << 20));
  r->add_option("--redis", rz->redis, "Redis URL (default: start a private redis-server)");
  r->add_option("--clients", rz->clients, "Client connections simulating the ranks")->check(CLI::Range(1, 256));
  r->callback([rz, &action] {
    action = [rz] {
      auto out = bench_rendezvous(rz->ranks, rz->redis, rz->clients);
      if (!out) return fail("bench rendezvous", out.error());
      std::printf("%s\n", out->dump(2).c_str());
      return 0;
    };
  });

  auto tsizes = std::make_shared<std::vector<std::size_t>>(std::vector<std::size_t>{
      8, 64, 512, 4096, 32768, 65536, 262144, 1 << 20, 8 << 20, 64 << 20});
  auto* tr = bench->add_subcommand("transport", "Latency and bandwidth between two node processes, beside ucx_perftest");
  tr->add_option("--sizes", *tsizes, "Message sizes in bytes")->check(CLI::PositiveNumber);
  auto treps = std::make_shared<int>(5);
  tr->add_option("--repetitions", *treps, "Runs of every figure, ours and ucx_perftest's")->check(CLI::Range(1, 100));
  auto tloop = std::make_shared<bool>(false);
  tr->add_flag("--loopback-only", *tloop, "Skip the run across two network namespaces");
  auto tcc = std::make_shared<std::string>("reno");
  tr->add_option("--tcp-congestion-control", *tcc,
                 "TCP congestion control in the two namespaces; empty keeps the machine's (reno: see bench_transport.cpp)");
  auto titers = std::make_shared<int>(100000);
  tr->add_option("--max-iterations", *titers,
                 "At most this many messages per figure (default: 1 GiB's worth, 16 to 100,000; fewer is a smoke run)")
      ->check(CLI::Range(1, 100000));
  tr->callback([tsizes, treps, tloop, tcc, titers, &action] {
    action = [tsizes, treps, tloop, tcc, titers] {
      auto out = bench_transport(*tsizes, *treps, !*tloop, *tcc, *titers);
      if (!out) return fail("bench transport", out.error());
      std::printf("%s\n", out->dump(2).c_str());
      return 0;
    };
  });

  auto ca = std::make_shared<CollectivesBenchArgs>();
  auto no_gloo = std::make_shared<bool>(false);
  auto buffers = std::make_shared<std::string>("host-shared");
  auto* co = bench->add_subcommand("collectives", "Ring collectives between node processes, beside gloo");
  co->add_option("--nodes", ca->nodes, "Process counts, each a run")->check(CLI::Range(2, 64));
  co->add_option("--repetitions", ca->repetitions, "Passes over every size, ours and gloo's")->check(CLI::Range(1, 100));
  co->add_option("--sizes", ca->sizes, "Buffer sizes in bytes")->check(CLI::PositiveNumber);
  co->add_flag("--no-gloo", *no_gloo, "Skip the gloo peer");
  co->add_option("--buffers", *buffers,
                 "host-shared (lent in place to the other ranks, as the trainer's) or private (staged through slots)")
      ->check(CLI::IsMember({"host-shared", "private"}));
  co->add_flag("--across-hosts", ca->across_hosts,
               "Also run each process count with every rank in a network namespace of its own, over TCP (needs root)");
  co->add_option("--device", ca->device,
                 "Also each rank's device (cuda: the GPU of its rank; cpu): the group's device path on its memory, "
                 "beside the host rings and the pinned copy")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  co->add_option("--tcp-congestion-control", ca->tcp_congestion_control,
                 "TCP congestion control in those namespaces; empty keeps the machine's (reno: see bench_transport.cpp)");
  co->callback([ca, no_gloo, buffers, &action] {
    ca->with_gloo = !*no_gloo;
    ca->buffers = *buffers == "private" ? Sharing::process : Sharing::host;
    action = [ca] {
      auto out = bench_collectives(*ca);
      if (!out) return fail("bench collectives", out.error());
      std::printf("%s\n", out->dump(2).c_str());
      return 0;
    };
  });

  struct PipelineArgs {
    std::string config;
    int nodes = 2, warmup = 3;
    std::vector<std::string> overrides;
  };
  auto pa = std::make_shared<PipelineArgs>();
  auto* pl = bench->add_subcommand("pipeline", "A job through troupe launch: bubble beside the simulator, blocked time, hidden gradient traffic");
  pl->add_option("config", pa->config, "Job config (TOML)")->required();
  pl->add_option("--nodes", pa->nodes, "Node processes")->check(CLI::Range(1, 64));
  pl->add_option("--warmup", pa->warmup, "Steps left out at the start")->check(CLI::Range(0, 1000));
  pl->add_option("--set", pa->overrides, "Override a config key")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  pl->callback([pa, &action] {
    action = [pa] {
      auto out = bench_pipeline(pa->config, pa->nodes, pa->overrides, pa->warmup);
      if (!out) return fail("bench pipeline", out.error());
      std::printf("%s\n", out->dump(2).c_str());
      return 0;
    };
  });

  struct TpArgs {
    std::string config;
    int tp = 2, chunks = 4, steps = 8, warmup = 2;
    std::vector<std::string> overrides;
  };
  auto ta = std::make_shared<TpArgs>();
  auto* tpc = bench->add_subcommand(
      "tp", "Tensor parallelism on one node: step time, the collectives' time exposed, activations per actor");
  tpc->add_option("config", ta->config, "Job config (TOML), one stage and one replica")->required();
  tpc->add_option("--tp", ta->tp, "Tensor-parallel members")->check(CLI::Range(2, 64));
  tpc->add_option("--chunks", ta->chunks, "Chunks of the overlapped layout (parallel.tp_overlap_chunks)")
      ->check(CLI::Range(2, 64));
  tpc->add_option("--steps", ta->steps, "Measured steps per layout")->check(CLI::Range(1, 10000));
  tpc->add_option("--warmup", ta->warmup, "Steps left out at the start")->check(CLI::Range(0, 1000));
  tpc->add_option("--set", ta->overrides, "Override a config key")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  tpc->callback([ta, &action] {
    action = [ta] {
      auto out = bench_tp(ta->config, ta->tp, ta->chunks, ta->overrides, ta->steps, ta->warmup);
      if (!out) return fail("bench tp", out.error());
      std::printf("%s\n", out->dump(2).c_str());
      return 0;
    };
  });

  auto threads = std::make_shared<int>(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  auto reps = std::make_shared<int>(5);
  auto device = std::make_shared<std::string>("cpu");
  auto precision = std::make_shared<std::string>("fp32");
  auto* o = bench->add_subcommand("ops", "Forward and backward time of each op");
  o->add_option("--threads", *threads, "Compute threads")->check(CLI::Range(1, 256));
  o->add_option("--reps", *reps, "Measured repetitions per op")->check(CLI::Range(1, 1000));
  o->add_option("--device", *device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  o->add_option("--precision", *precision, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  auto ops_pytorch = std::make_shared<bool>(false);
  o->add_flag("--pytorch", *ops_pytorch, "PyTorch's SDPA beside the attention (GPU)");
  o->callback([threads, reps, device, precision, ops_pytorch, &action] {
    action = [threads, reps, device, precision, ops_pytorch] {
      DeviceChoice choice;
      choice.kind = *device == "cuda" ? DeviceKind::cuda : DeviceKind::cpu;
      choice.threads = *threads;
      choice.precision = *precision == "bf16" ? Precision::bf16 : Precision::fp32;
      auto out = bench_ops(choice, *reps, *ops_pytorch);
      if (!out) return fail("bench ops", out.error());
      std::printf("%s\n", out->dump(2).c_str());
      return 0;
    };
  });
}

}  // namespace troupe::cli
