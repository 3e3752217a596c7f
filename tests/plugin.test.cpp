// Troupe as a library, end to end: the installed package builds the examples
// out of the tree (find_package and pkg-config), the stock troupe runs a
// plugin's actor, restores it bit for bit after its node is killed and from
// a checkpoint (its own state too, UH-1), and refuses a plugin it cannot load
// or a node with another set of plugins in one line (PL-1 … PL-3).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>

#include "runtime/control/redis_server.hpp"
#include "tests/recovery_job.hpp"
#include "tests/test_support.hpp"

using namespace troupe::testing;
namespace fs = std::filesystem;

namespace {

const std::string kPlugin = ACTIVATION_STATS_PLUGIN;  // examples/custom_stage, built in the tree

// The example's config with its data and steps made `dir`'s.
std::string example_job(const ScratchDir& dir, int steps) {
  write_file(dir / "corpus.txt", synthetic_text(60000));
  REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string()).exit_code == 0);
  std::string text = slurp(source_dir() + "/examples/configs/custom_stage.toml");
  text = std::regex_replace(text, std::regex("steps = 20"), "steps = " + std::to_string(steps));
  text = std::regex_replace(text, std::regex("\"data/train.bin\""), "\"" + (dir / "train.bin") + "\"");
  text = std::regex_replace(text, std::regex("\"data/val.bin\""), "\"" + (dir / "val.bin") + "\"");
  write_file(dir / "job.toml", text);
  return dir / "job.toml";
}

// The example actor's line for `actor` at `step` (without the log's prefix): its figures and running state.
std::string stats_line(const std::string& err, int actor, int step) {
  const std::string key = "activation stats: actor " + std::to_string(actor) + " step " + std::to_string(step) + " ";
  const auto at = err.rfind(key);  // the last one: a redone step prints again
  if (at == std::string::npos) return "(none)";
  return err.substr(at, err.find('\n', at) - at);
}

// Runs a command that must succeed; its stderr.
std::string must(const std::string& cmd) {
  auto r = run(cmd);
  INFO(cmd);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return r.err;
}

}  // namespace

TEST_CASE("the examples build against the installed package, with find_package and with pkg-config, and the stock troupe runs the plugin",
          "[plugin][install]") {
  ScratchDir dir("plugin_install");
  const std::string prefix = dir / "prefix", examples = source_dir() + "/examples";
  must("cmake --install " + std::string(TROUPE_BUILD_DIR) + " --prefix " + prefix + " >/dev/null");
  CHECK(fs::exists(prefix + "/include/troupe/troupe.hpp"));
  CHECK(fs::exists(prefix + "/lib/cmake/Troupe/TroupeConfig.cmake"));
  // The commands of the README's "Writing a stage actor".
  must("cmake -S " + examples + "/custom_stage -B " + (dir / "build-plugin") + " -DCMAKE_PREFIX_PATH=" + prefix +
       " >/dev/null && cmake --build " + (dir / "build-plugin") + " >/dev/null");
  must("c++ -shared -fPIC -o " + (dir / "libactivation_stats_pc.so") + " " + examples +
       "/custom_stage/activation_stats_stage.cpp $(PKG_CONFIG_PATH=" + prefix +
       "/lib/pkgconfig pkg-config --cflags --libs troupe)");
  must("cmake -S " + examples + "/own_main -B " + (dir / "build-own") + " -DCMAKE_PREFIX_PATH=" + prefix +
       " >/dev/null && cmake --build " + (dir / "build-own") + " >/dev/null");
  const std::string cfg = example_job(dir, 3), troupe = prefix + "/bin/troupe";
  for (const std::string& plugin : {"--plugin " + (dir / "build-plugin/libactivation_stats.so"),
                                    "--set 'plugins.paths=[\"" + (dir / "libactivation_stats_pc.so") + "\"]'"}) {
    INFO(plugin);
    const std::string err = must(troupe + " launch " + cfg + " --nodes 2 " + plugin);
    CHECK(err.find("plugin activation_stats 1.0") != std::string::npos);
    CHECK(stats_line(err, 0, 2).find("over 3 steps") != std::string::npos);
    CHECK(stats_line(err, 1, 2).find("over 3 steps") != std::string::npos);
    CHECK(err.find("step     2 | loss") != std::string::npos);
  }
  // The program with its own main.
  const std::string own = must(dir / "build-own/my_troupe" + std::string(" launch ") + cfg + " 2");
  CHECK(stats_line(own, 1, 2).find("over 3 steps") != std::string::npos);
  // Without the plugin the stock executable does not know the actor type.
  auto stock = run(troupe + " launch " + cfg + " --nodes 2");
  CHECK(stock.exit_code != 0);
  CHECK(stock.err.find("actor type 'example.activation_stats' is not registered") != std::string::npos);
}

TEST_CASE("UH-1: a plugin's actor is restored bit for bit, its own state too, after its node is killed and from a checkpoint",
          "[plugin][recovery]") {
  ScratchDir dir("plugin_recovery");
  const std::string cfg = tiny_job(dir,
                                   "stage_actor = \"example.activation_stats\"\n[recovery]\nmax_failures_per_hour = 4\n"
                                   "restarts = 1\n[checkpoint]\ndir = \"" + (dir / "ckpt") + "\"\nevery = 4\nkeep = 5\n",
                                   12);
  const auto clean = run(launch(cfg, dir / "clean.safetensors", dir / "clean.jsonl", "--plugin " + kPlugin));
  INFO(clean.err);
  REQUIRE(clean.exit_code == 0);
  for (int actor = 0; actor < 4; ++actor) CHECK(stats_line(clean.err, actor, 11).find("over 12 steps") != std::string::npos);
  // Killed: the new process's actors come back from their buddy copies, the running average with them.
  const int step = random_step(2, 10);
  INFO("killed at step " << step);
  auto killed = run(launch(cfg, dir / "kill.safetensors", dir / "kill.jsonl",
                           "--plugin " + kPlugin + " --fault kind=kill,node=1,step=" + std::to_string(step)));
  INFO(killed.err);
  REQUIRE(killed.exit_code == 0);
  CHECK(killed.err.find("coordinator: recovered") != std::string::npos);
  check_fault_free(dir, "kill");
  for (int actor = 0; actor < 4; ++actor) CHECK(stats_line(killed.err, actor, 11) == stats_line(clean.err, actor, 11));
  // Resumed from step 8's checkpoint (another folder for its own checkpoints): the same end.
  const std::string step8 = dir / "ckpt/step-00000008";
  CHECK(fs::exists(step8 + "/actor-state-a00003.bin"));
  auto resumed = run(launch(cfg, dir / "resume.safetensors", dir / "resume.jsonl",
                            "--plugin " + kPlugin + " --resume " + step8 + " --set checkpoint.dir=" + (dir / "ckpt2")));
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(slurp(dir / "resume.safetensors") == slurp(dir / "clean.safetensors"));
  for (int actor = 0; actor < 4; ++actor) CHECK(stats_line(resumed.err, actor, 11) == stats_line(clean.err, actor, 11));
  // Resumed on another layout (dp 1): the stage is restored, the actors' own state cannot be, and the log says so.
  auto other = run(launch(cfg, dir / "other.safetensors", dir / "other.jsonl",
                          "--plugin " + kPlugin + " --resume " + step8 + " --set parallel.dp=1 --set checkpoint.dir=" +
                              (dir / "ckpt3")));
  INFO(other.err);
  REQUIRE(other.exit_code == 0);
  CHECK(other.err.find("stage actor 0's own state is not restored: the checkpoint was written by another layout") !=
        std::string::npos);
  CHECK(stats_line(other.err, 0, 11).find("over 4 steps") != std::string::npos);  // UH-2: started afresh at step 8
}

TEST_CASE("the guide's code is the examples' code, and the README shows the commands this test runs", "[plugin][docs]") {
  // Every block of docs/writing-a-stage-actor.md that names its file on its
  // first line is a verbatim piece of that file (which CI compiles).
  const std::string guide = slurp(source_dir() + "/docs/writing-a-stage-actor.md");
  std::size_t blocks = 0;
  for (std::size_t at = guide.find("```"); at != std::string::npos;) {
    const std::size_t body = guide.find('\n', at) + 1, end = guide.find("```", body);
    REQUIRE(end != std::string::npos);
    const std::string block = guide.substr(body, end - body);
    const std::size_t first_line = block.find('\n');
    std::smatch named;
    const std::string head = block.substr(0, first_line);
    if (std::regex_match(head, named, std::regex(R"((//|#) (examples/\S+))"))) {
      INFO(named[2].str());
      CHECK(slurp(source_dir() + "/" + named[2].str()).find(block.substr(first_line + 1)) != std::string::npos);
      ++blocks;
    }
    at = guide.find("```", end + 3);
  }
  CHECK(blocks >= 6);
  // The commands a user types, as the install test above runs them.
  const std::string readme = slurp(source_dir() + "/README.md");
  for (const char* line :
       {"cmake --install build --prefix PREFIX", "cmake -S examples/custom_stage -B build-plugin -DCMAKE_PREFIX_PATH=PREFIX",
        "cmake --build build-plugin",
        "PREFIX/bin/troupe launch examples/configs/custom_stage.toml --nodes 2 --plugin build-plugin/libactivation_stats.so"}) {
    INFO(line);
    CHECK(readme.find(std::string(line) + "\n") != std::string::npos);
    CHECK(guide.find(std::string(line) + "\n") != std::string::npos);
  }
}

TEST_CASE("PL-1, PL-2: a plugin that cannot be loaded is refused in one line naming the flag or key and the file", "[plugin]") {
  ScratchDir dir("plugin_refused");
  const std::string cfg = tiny_job(dir, "stage_actor = \"example.activation_stats\"\n", 2, 1);
  const std::string train = troupe_bin() + " train " + cfg + " --set parallel.pp=1 ";
  struct Refusal {
    std::string args, message;
  };
  const std::vector<Refusal> refusals{
      {"--plugin " + (dir / "missing.so"), "troupe train: --plugin " + (dir / "missing.so") + ": no such file"},
      {"--plugin " + std::string(NOT_A_PLUGIN),
       "troupe train: --plugin " + std::string(NOT_A_PLUGIN) + ": not a Troupe plugin (no troupe_plugin entry point"},
      {"--plugin " + std::string(WRONG_ABI_PLUGIN),
       "troupe train: --plugin " + std::string(WRONG_ABI_PLUGIN) + ": built against another Troupe (plugin ABI "},
      {"--plugin " + std::string(FAILING_PLUGIN),
       "troupe train: --plugin " + std::string(FAILING_PLUGIN) +
           ": plugin clash failed to register its actor types: actor registry: actor type 'troupe.gpt_stage' is "
           "already registered"},
      {"--set 'plugins.paths=[\"nope.so\"]'",
       "troupe train: " + cfg + ": plugins.paths " + (dir / "nope.so") + ": no such file"},
      {"--set plugins.paths=3", "plugins.paths has the wrong type (a list of strings is expected)"},
  };
  for (const auto& r : refusals) {
    INFO(r.args);
    auto out = run(train + r.args);
    INFO(out.err);
    CHECK(out.exit_code == 1);
    CHECK(out.err.find(r.message) != std::string::npos);
    CHECK(std::count(out.err.begin(), out.err.end(), '\n') == 1);
  }
  // [plugins] paths relative to the config's folder, and the same plugin named twice: loaded once.
  fs::copy_file(kPlugin, dir / "libactivation_stats.so");
  auto ok = run(train + "--set 'plugins.paths=[\"libactivation_stats.so\"]' --plugin " + (dir / "libactivation_stats.so"));
  INFO(ok.err);
  REQUIRE(ok.exit_code == 0);
  std::size_t loads = 0;
  for (auto at = ok.err.find("plugin activation_stats 1.0"); at != std::string::npos;
       at = ok.err.find("plugin activation_stats 1.0", at + 1))
    ++loads;
  CHECK(loads == 1);
  CHECK(stats_line(ok.err, 0, 1).find("over 2 steps") != std::string::npos);
}

TEST_CASE("PL-3: a node missing a plugin, or with another set of plugins, is refused", "[plugin]") {
  ScratchDir dir("plugin_nodes");
  const std::string cfg = tiny_job(dir, "stage_actor = \"example.activation_stats\"\n[health]\nrendezvous_timeout_ms = 4000\n", 2, 1);
  auto server = troupe::RedisServer::start();
  REQUIRE(server.ok());
  ::setenv(troupe::kRedisPasswordVariable, server->password().c_str(), 1);
  const std::string node = troupe_bin() + " node " + cfg + " --redis " + server->url() + " --nodes 2 --job plugins ";
  // Without the plugin: one line before anything starts.
  auto missing = run(node + "--node-rank 1");
  CHECK(missing.exit_code == 1);
  CHECK(missing.err.find("actor type 'example.activation_stats' is not registered") != std::string::npos);
  CHECK(std::count(missing.err.begin(), missing.err.end(), '\n') == 1);
  // With one more plugin than node 0: refused at rendezvous.
  const pid_t first = start_in_background(node + "--node-rank 0 --plugin " + kPlugin, dir / "node0.err");
  REQUIRE(first > 0);
  REQUIRE(wait_for_text(dir / "node0.err", "plugin activation_stats", std::chrono::seconds(10)));
  auto other = run(node + "--node-rank 1 --plugin " + kPlugin + " --plugin " + OTHER_STAGE_PLUGIN);
  ::kill(first, SIGKILL);
  ::waitpid(first, nullptr, 0);
  const std::string both = other.err + slurp(dir / "node0.err");
  INFO(both);
  CHECK(other.exit_code != 0);
  CHECK(both.find("runs a different config or set of plugins than the job's first node") != std::string::npos);
}
