// Actor types by name, so a job config can name an actor type — the built-in
// ones or a user's own, registered before the node starts. An explicit object
// passed to whoever spawns, not a global.
#pragma once

#include <atomic>
#include <caf/fwd.hpp>
#include <caf/actor.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/data_loader.hpp"
#include "common/expected.hpp"
#include "runtime/config/job_config.hpp"

namespace troupe {

class Transport;
class SnapshotPool;
class ProgressBoard;

/// Where a job's outputs go and what it starts from (command-line flags, not
/// part of the job config and its hash).
struct JobFiles {
  std::string trace;    ///< each stage actor writes TRACE.actor<R> (Chrome trace); empty = none
  std::string metrics;  ///< per-step JSON lines (the whole-model root writes them); empty = none
  std::string init;     ///< safetensors weights to start from; empty = initialise from the seed
  std::string save;     ///< safetensors weights written at the end; empty = none
  std::string resume;   ///< the checkpoint directory to continue from (--resume, resolved); empty = none
};

/// What a factory gets: the actor's rank among the job's actors and its own
/// transport endpoint, the job generation, the actor to report to (its node:
/// msg::ActorDone or msg::ActorFailed, see report_outcome), the parsed and
/// validated job config, and the node's data loader if it has one.
class RecoverySnapshots;

struct ActorArgs {
  int rank = 0;   ///< among the job's actors (one per node unless the type places more)
  int world = 1;  ///< actors in the job
  std::uint64_t generation = 0;
  Transport* transport = nullptr;
  caf::actor report_to;
  JobConfig job;
  JobFiles files;
  int node = 0;
  int nodes = 1;
  caf::actor data_loader;  ///< the node's data loader (if the type asked for one)
  std::string data_ring;   ///< name of the loader's shared-memory ring
  caf::actor checkpoint_writer;              ///< the node's, if the job takes checkpoints
  std::shared_ptr<SnapshotPool> snapshots;   ///< its host buffers
  std::shared_ptr<ProgressBoard> progress;   ///< where the node's health monitor reads its actors (optional)
  /// Hot replacement (recovery.max_failures_per_hour > 0): the node's
  /// host-memory rollback points, and for a replacement the step to start from.
  std::shared_ptr<RecoverySnapshots> recovery;
  int restore_step = -1;
  /// The generation the actor now works in (a recovery bumps it; its reports carry it).
  std::shared_ptr<std::atomic<std::uint64_t>> live_generation;
};

/// How many actors of a type a job places on each node, and what the node
/// runs beside them.
struct ActorPlacement {
  /// Actors per node for `job` on `nodes` nodes; unset = one per node. An
  /// error names the config keys that do not fit.
  std::function<Expected<int>(const JobConfig& job, int nodes)> per_node;
  /// The data loader node `node` runs for its `per_node` actors; unset = none.
  std::function<DataLoaderSpec(const JobConfig& job, int node, int per_node)> data_loader;
};

using ActorFactory = std::function<caf::actor(caf::actor_system&, const ActorArgs&)>;

/// A plugin whose actor types the registry holds (actors/plugin_loader.hpp).
struct PluginRecord {
  std::string path;  ///< as loaded (absolute)
  std::string name;
  std::string version;
  std::vector<std::string> actor_types;  ///< what it registered
};
/// Checks a job before any node joins (e.g. that the parallel sizes fit the nodes).
using ActorValidator = std::function<Status(const ActorArgs&)>;

class ActorRegistry {
 public:
  /// Registers `name`; a name registered twice is an error naming it.
  Status add(const std::string& name, ActorFactory factory, ActorValidator validator = {},
             ActorPlacement placement = {});
  /// The type's placement (one per node, no loader, for unknown names).
  ActorPlacement placement(const std::string& name) const;
  /// Runs the type's validator (success if it has none or the name is unknown).
  Status validate(const std::string& name, const ActorArgs& args) const;
  /// Spawns the actor type called `name`; an unknown name is an error that
  /// lists the registered ones.
  Expected<caf::actor> spawn(const std::string& name, caf::actor_system& sys, const ActorArgs& args) const;
  std::vector<std::string> names() const;
  /// The plugins loaded into this registry, in load order.
  const std::vector<PluginRecord>& plugins() const { return plugins_; }
  void add_plugin(PluginRecord plugin) { plugins_.push_back(std::move(plugin)); }
  /// What every node of a job must load alike, for the config hash: each
  /// plugin's name, version and actor types ("" without plugins).
  std::string plugin_fingerprint() const;
  /// Success if `name` is registered, else the error spawn() would give.
  Status check(const std::string& name) const;

 private:
  std::map<std::string, ActorFactory> factories_;
  std::map<std::string, ActorValidator> validators_;
  std::map<std::string, ActorPlacement> placements_;
  std::vector<PluginRecord> plugins_;
};

/// What every process checks before it runs a job of `nodes` nodes (one for
/// troupe train) — the config and its ranges, the actor type, its placement,
/// and its validator (token files, --init weights) — so that bad input is one
/// line before anything starts. Returns the parsed config. A files.resume of
/// "latest" becomes the newest complete checkpoint under checkpoint.dir that
/// verifies (an older one, with a warning, when a newer one does not).
Expected<JobConfig> check_job(const std::string& config_path, const std::vector<std::string>& overrides, int nodes,
                              JobFiles& files, const ActorRegistry& registry);

}  // namespace troupe
