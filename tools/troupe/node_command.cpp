// troupe node: one node of a job (by hand, or under `srun`).
#include "actors/actor_registry.hpp"
#include "actors/node.hpp"
#include "runtime/control/redis_client.hpp"
#include "tools/troupe/commands.hpp"

namespace troupe::cli {

void register_node(CLI::App& app, Action& action) {
  auto o = std::make_shared<NodeOptions>();
  auto* cmd = app.add_subcommand("node", "Run one node of a job");
  cmd->add_option("config", o->config_path, "Job config (TOML)")->required();
  cmd->add_option("--redis", o->redis_url, "Redis URL every node shares")->required();
  cmd->add_option("--node-rank", o->rank, "This node's rank (default: SLURM_PROCID or RANK)");
  cmd->add_option("--nodes", o->world, "Number of nodes (default: SLURM_NTASKS or WORLD_SIZE)");
  cmd->add_option("--job", o->job_id, "Job ID (namespaces the Redis keys)");
  cmd->add_option("--host", o->host, "Address to bind and publish");
  cmd->add_option("--port", o->port, "Port of the node actor (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--trace", o->trace_path, "Write each stage actor's timeline to FILE.actor<R> (Chrome trace)");
  cmd->add_option("--metrics", o->metrics_path, "Write one JSON object per step to FILE (by the first stage actor)");
  cmd->add_option("--init", o->init_path, "Start from these safetensors weights");
  cmd->add_option("--save", o->save_path, "Save the final weights (safetensors, one file for the whole model)");
  cmd->add_option("--resume", o->resume,
                  "Continue from a checkpoint: latest (the newest complete one in checkpoint.dir) or its directory");
  cmd->add_option("--hold", o->hold_seconds, "Keep the job up this many seconds after it is verified");
  cmd->add_flag("--rejoin", o->rejoin, "This process replaces a killed one of a running job (troupe launch adds it)");
  cmd->add_flag("--spare", o->spare,
                "Wait in the job's Redis until a node process is lost, then take its place (no --node-rank)");
  auto password_file = std::make_shared<std::string>();
  cmd->add_option("--redis-password-file", *password_file,
                  "File (mode 0600) holding the Redis password (default: $TROUPE_REDIS_PASSWORD)");
  cmd->add_option("--job-secret-file", o->job_secret_file,
                  "File (mode 0600, the same on every node) holding the job's key that every control message between "
                  "nodes is signed with (default: a key the first node stores in the job's Redis)");
  cmd->add_option("--set", o->overrides, "Override a config key")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  auto add_faults = add_fault_option(cmd, o->overrides);
  auto plugins = std::make_shared<std::vector<std::string>>();
  add_plugin_option(cmd, *plugins);
  cmd->callback([o, password_file, plugins, add_faults, &action] {
    add_faults();
    action = [o, password_file, plugins] {
      auto password = redis_password(*password_file);
      if (!password) return fail("node", password.error());
      o->redis_password = *password;
      ActorRegistry registry;
      if (auto st = build_registry(*plugins, o->config_path, o->overrides, registry); !st) return fail("node", st.error());
      return run_node(*o, registry);
    };
  });
}

}  // namespace troupe::cli
