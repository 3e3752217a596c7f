// `troupe bench ...`: the benchmarks live in troupe-bench, beside this
// executable; the same arguments run there, so every command and test that
// says `troupe bench` keeps working while the production executable carries
// none of them.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tools/troupe/commands.hpp"

namespace troupe::cli {

void register_bench_forwarder(CLI::App& app, Action& action) {
  auto* bench = app.add_subcommand("bench", "Benchmarks, JSON output (runs troupe-bench; `troupe bench --help` lists them)");
  bench->prefix_command();  // every argument after `bench` goes to troupe-bench untouched
  bench->set_help_flag();   // --help too
  bench->callback([bench, &action] {
    std::vector<std::string> args = bench->remaining();
    action = [args] {
      const std::filesystem::path exe = std::filesystem::path(troupe_executable()).parent_path() / "troupe-bench";
      std::vector<char*> argv{const_cast<char*>("troupe bench")};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(exe.c_str(), argv.data());
      return fail("bench", make_error("cannot run ", exe.string(), ": ", std::strerror(errno),
                                      " (the benchmarks are built as troupe-bench beside troupe)"));
    };
  });
}

}  // namespace troupe::cli
