// Work actors that fail in every way a user's code can — an error, an
// exception, an exit without a report — end `train_in_process` promptly with
// the failure's message, and their peers never wait for them (N-2).
#include "actors/local_trainer.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <caf/all.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "actors/actor_registry.hpp"
#include "actors/gpt_stage_actor.hpp"
#include "runtime/data/token_file.hpp"

namespace troupe {
namespace {

// A job of two actors (dp = 2) over a small token file, in a scratch directory.
struct Job {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("troupe_local_" + std::to_string(::getpid()));
  std::string cfg = (dir / "job.toml").string();
  explicit Job(const std::string& actor_type) {
    std::filesystem::create_directories(dir);
    std::vector<std::uint8_t> tokens(4096);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint8_t>(i * 7 % 251);
    REQUIRE(write_token_file((dir / "t.bin").string(), tokens).ok());
    std::ofstream(cfg) << "[model]\nlayers = 2\nheads = 2\ndim = 16\nctx = 16\n[train]\nbatch = 2\nthreads = 1\n"
                       << "steps = 3\n[parallel]\ndp = 2\nstage_actor = \"" << actor_type << "\"\n[data]\ntrain = \""
                       << (dir / "t.bin").string() << "\"\nval = \"" << (dir / "t.bin").string() << "\"\n";
  }
  ~Job() { std::filesystem::remove_all(dir); }
};

// Actor 1 fails as `how` says; actor 0 trains the GPT stage normally, so it
// waits on actor 1's all-reduces until the failure reaches it.
void failing_main(caf::blocking_actor* self, ActorArgs args, std::string how) {
  if (args.rank != 1) return report_outcome(self, args, run_guarded([&] { return train_gpt_stage(self, args); }));
  if (how == "exception")
    return report_outcome(self, args, run_guarded([]() -> Expected<double> { throw std::runtime_error("boom"); }));
  if (how == "error") return report_outcome(self, args, Expected<double>(make_error("it went wrong")));
  // "silent": the actor just ends, without a report
}

Status run_with(const std::string& how) {
  ActorRegistry registry;
  REQUIRE(registry
              .add(
                  "test.failing",
                  [how](caf::actor_system& sys, const ActorArgs& args) {
                    return sys.spawn<caf::detached>(failing_main, args, how);
                  },
                  validate_gpt_stage_job, gpt_stage_placement())
              .ok());
  Job job("test.failing");
  return train_in_process(job.cfg, {}, TrainOptions{}, registry);
}

}  // namespace

TEST_CASE("an error, an exception or a silent exit of one work actor ends the run with its message", "[local][failure]") {
  using namespace std::chrono_literals;
  for (auto [how, needle] : {std::pair{"error", "stage actor 1: it went wrong"},
                             std::pair{"exception", "stage actor 1: exception: boom"},
                             std::pair{"silent", "stage actor 1: ended without reporting"}}) {
    INFO(how);
    const auto t0 = std::chrono::steady_clock::now();
    auto st = run_with(how);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().message.find(needle) != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  }
}

}  // namespace troupe
