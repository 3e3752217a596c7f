// The job configuration: TOML sections [model] [parallel] [train] [data]
// [checkpoint] [health] [faults], every key overridable with --set key=value.
// Unknown keys (with the closest known one suggested), wrongly typed values,
// integers that do not fit, NaN, infinities and values out of range are errors
// naming the file (or flag) and key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/expected.hpp"

namespace troupe {

struct ModelSection {
  int layers = 4;
  int heads = 4;
  int dim = 128;
  int ctx = 256;
  int vocab = 256;
  bool parallel_block = false;
  int window = 0;  ///< sliding attention window; 0 = full causal
};

struct ParallelSection {
  int dp = 1;
  int pp = 1;
  int tp = 1;
  /// Megatron's sequence parallelism: the activations around LayerNorm and
  /// the residual stored 1/tp per tensor-parallel member (tokens split).
  bool sequence_parallel = false;
  /// With sequence parallelism: the all-gathers before and reduce-scatters
  /// after the tensor-parallel GEMMs in this many chunks, each chunk's
  /// collective in flight while the next chunk's GEMMs run (1: no overlap).
  int tp_overlap_chunks = 1;
  std::string schedule = "1f1b";
  int chunks = 1;
  int microbatches = 1;      ///< per step and data-parallel replica; gradients accumulate over them
  std::vector<int> layers;   ///< layers per pipeline stage; empty = even split
  std::string stage_actor = "troupe.gpt_stage";  ///< registered stage actor type the job runs
  double bucket_mb = 4;      ///< ZeRO-1 gradient bucket size (MiB of f32 gradients)
  /// schedule = auto: activation memory a stage may hold, in whole-stage microbatches (0 = unlimited).
  double max_activations = 0;
  /// How device tensors move between a group's members: "auto" (NCCL where
  /// every member has a GPU of its own and NCCL loads, else staged), "nccl",
  /// or "staged" (through pinned host memory and the host rings).
  std::string device_transport = "auto";
};

struct TrainSection {
  int steps = 300;
  int batch = 16;            ///< sequences per microbatch
  std::string optimizer = "adamw";  ///< adamw | lamb
  double lr = 1e-3;
  double min_lr = 1e-4;
  int warmup_steps = 20;
  std::string lr_schedule = "cosine";  ///< cosine | constant
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;    ///< global-norm limit; 0 = off
  std::uint64_t seed = 1337;
  int threads = 0;           ///< compute threads; 0 = every core
  int eval_every = 100;      ///< steps between validation evaluations; 0 = only at the end
  int eval_windows = 32;     ///< validation windows per evaluation
  int log_every = 10;        ///< steps between progress lines on stderr
  std::string device = "cpu";       ///< cpu | cuda (the GPU: the node's local rank modulo the GPUs present)
  std::string precision = "fp32";   ///< fp32 | bf16 (bf16 GEMMs and activations, fp32 master weights and sums)
  bool cuda_graphs = true;          ///< cuda: each layer's passes captured once as CUDA graphs and replayed
  /// none | gelu: the MLP's GELU output is not kept for the backward but
  /// recomputed there from its input (4C values a token per layer less
  /// memory, one GELU pass more).
  std::string recompute = "none";
};

struct DataSection {
  std::string train = "data/train.bin";
  std::string val = "data/val.bin";
};

/// Bounds on every wait, so a lost or stopped peer ends the job instead of
/// hanging it.
struct HealthSection {
  int heartbeat_ms = 200;             ///< health monitors' beat, and the nodes' keep-alive on the control connection
  int miss_limit = 4;                 ///< a node whose heartbeats stop for this many beats is hung
  int progress_timeout_ms = 10000;    ///< an actor without progress this long while peers wait on it is stuck
  double straggler_threshold = 0.10;  ///< an actor that costs the step more than this share ...
  int straggler_steps = 3;            ///< ... for this many consecutive steps is a straggler
  int straggler_window = 20;          ///< steps in an actor's recent median compute time
  int relay_group = 64;               ///< in jobs of more nodes, nodes beat a relay per this many (HR-1; 0: never)
  int peer_timeout_ms = 3000;         ///< a node silent this long is lost (a stopped process, a cut link)
  int rendezvous_timeout_ms = 30000;  ///< waiting for every node to join
  int wait_timeout_ms = 600000;       ///< any single wait on a transfer or a local actor (a backstop)
};

/// Sharded two-phase checkpoints (training/checkpoint_*): every `every` steps
/// into `dir`, keeping the newest `keep` complete ones.
struct CheckpointSection {
  std::string dir;  ///< "" = no periodic checkpoints
  int every = 0;    ///< steps between checkpoints; 0 = none
  int keep = 2;     ///< complete checkpoints kept; older ones go once a newer one is complete
};

/// Hot replacement (recovery): a failed stage actor is replaced while the job
/// runs, and every actor rolls back to the newest step all of them hold a
/// host-memory snapshot of, then redoes the steps since.
struct RecoverySection {
  int max_failures_per_hour = 0;  ///< recoveries allowed per hour of the job (0: a failure ends the job)
  int snapshot_every = 1;         ///< steps between each actor's host-memory snapshot (the rollback points)
  int restarts = 0;  ///< troupe launch restarts a killed node process (node 0 too: SV-10) this many times in all
  /// Each snapshot is also copied in the background to the next node's host
  /// memory (its buddy), so a lost node process is restored from there
  /// instead of from disk (needs 2 nodes or more).
  bool buddy = true;
  /// troupe launch starts this many `troupe node --spare` processes; one takes
  /// a lost node's place when no restart is left.
  int spares = 0;
  /// Node processes one recovery replaces when they are lost together (a
  /// rack, a switch): a node lost before the recovery of another ends joins
  /// it while the count stays within this (SV-11); one more ends the job.
  int max_simultaneous_losses = 1;
};

/// A failure domain (`[[topology]]`): nodes lost together when it fails (a
/// rack, a switch). Buddy copies go to a node in another domain when one
/// exists (runtime/config/failure_domains.hpp); without it, each node's TROUPE_RACK
/// (or Slurm's switch) names its domain.
struct TopologyDomain {
  std::string domain;
  std::vector<int> nodes;  ///< node ranks
};

/// A fault drill: `[[faults]]` in the config or `--fault k=v,...` on the
/// command line. kill and hang of a `node` act on its whole process (SIGKILL /
/// SIGSTOP of itself); kill of an `actor` ends that stage actor alone, as
/// CAF's exit_reason::kill does (no report; its process and the other actors
/// go on); stall stops one actor's progress while its process lives; slow
/// multiplies one actor's compute time; exception throws out of one actor.
struct FaultSpec {
  std::string kind;      ///< kill | hang | stall | slow | exception | lose | slow_persist
  int node = -1;         ///< kill, hang: the node process (hang of an `actor`: its node's); slow_persist: whose writer
  int actor = -1;        ///< the stage actor's rank (required for stall, slow, exception, lose)
  int step = 0;          ///< the step it happens in
  int instruction = -1;  ///< before this instruction of the actor's step program (-1: at the step's start)
  double factor = 2;     ///< slow: compute time multiplied by this
  int steps = 1;         ///< slow: for this many steps from `step`
  int ms = 0;            ///< slow_persist: the persist of checkpoint `step` waits this long before it writes
  /// "step" (at `step`); "start" (kill, hang, exception): as the stage actor
  /// enters its start barrier before `step` (0: the job's; later: after a
  /// recovery rolled back to it); "recovery" (kill, hang of a node: when it
  /// hears its first Recover)
  std::string when = "step";
};

/// [plugins]: shared libraries of actor types every node loads (beside --plugin).
struct PluginsSection {
  std::vector<std::string> paths;  ///< relative ones to the config file's folder
};

struct JobConfig {
  ModelSection model;
  ParallelSection parallel;
  TrainSection train;
  DataSection data;
  HealthSection health;
  CheckpointSection checkpoint;
  RecoverySection recovery;
  PluginsSection plugins;
  std::vector<FaultSpec> faults;
  std::vector<TopologyDomain> topology;  ///< [[topology]], in the file's order
  std::string source;  ///< file it was read from (for messages)
  std::string text;    ///< the file's text as read (for the run's record)
  std::vector<std::string> overrides;  ///< --set and --fault, as applied after it
};

/// Parses TOML text; `source` names it in errors.
Expected<JobConfig> parse_job_config(const std::string& text, const std::string& source,
                                     const std::vector<std::string>& overrides = {});

/// Reads and parses `path`, then applies `overrides` ("section.key=value", TOML
/// syntax for the value; a bare word is taken as a string). An override
/// "faults+=key=value,key=value,..." adds a fault drill with the keys of
/// [[faults]] (what --fault SPEC passes).
Expected<JobConfig> load_job_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// The override that adds fault drill `spec` (--fault SPEC).
inline std::string fault_override(const std::string& spec) { return "faults+=" + spec; }

/// The failure domain of every node of a `nodes`-node job from [[topology]]
/// ("" where it names none); an error naming topology when a node it lists is
/// not in the job.
Expected<std::vector<std::string>> topology_domains(const JobConfig& c, int nodes);

/// Compute threads to use: train.threads, or every core when 0.
int resolved_threads(const TrainSection& t);
/// The same for one of `sharers` workers on a machine: train.threads if set,
/// else the machine's cores divided among them (at least 1).
int resolved_threads(const TrainSection& t, int sharers);

}  // namespace troupe
