// What both executables' commands share: errors, the executables' paths,
// the --fault and --plugin options.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <filesystem>

#include "actors/actor_registry.hpp"
#include "actors/node.hpp"
#include "actors/plugin_loader.hpp"
#include "runtime/config/job_config.hpp"
#include "tools/troupe/bench_figures.hpp"
#include "tools/troupe/commands.hpp"

namespace troupe::cli {

int fail(const std::string& command, const Error& error) {
  std::fprintf(stderr, "troupe %s: %s\n", command.c_str(), error.message.c_str());
  return 1;
}

std::string this_executable() {
  char self[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  return n > 0 ? std::string(self, static_cast<std::size_t>(n)) : "";
}

std::string troupe_executable() {
  const std::filesystem::path self = this_executable();
  if (self.empty()) return "troupe";
  return self.filename() == "troupe" ? self.string() : (self.parent_path() / "troupe").string();
}

std::string peer_script(const std::string& name) {
  const char* source = std::getenv("TROUPE_SOURCE_DIR");
  if (source && *source) return std::string(source) + "/bench/" + name;
  const std::filesystem::path dir = std::filesystem::path(this_executable()).parent_path();
  for (const auto& candidate : {dir / "bench" / name, dir / ".." / "share" / "troupe" / "bench" / name}) {
    std::error_code ec;
    if (std::filesystem::exists(candidate, ec)) return candidate.string();
  }
  return "";
}

void add_plugin_option(CLI::App* cmd, std::vector<std::string>& paths) {
  cmd->add_option("--plugin", paths,
                  "Load actor types from this shared library (a Troupe plugin; repeatable; as [plugins] paths)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

Status build_registry(const std::vector<std::string>& plugins, const std::string& config_path,
                      const std::vector<std::string>& overrides, ActorRegistry& registry) {
  register_builtin_actors(registry);
  return load_job_plugins(plugins, config_path, overrides, registry);
}

std::function<void()> add_fault_option(CLI::App* cmd, std::vector<std::string>& overrides) {
  auto specs = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--fault", *specs,
                  "A fault drill: kind=kill|hang|stall|slow|exception,node=N|actor=R,step=S"
                  "[,instruction=I][,factor=F,steps=K] (repeatable; as [[faults]] in the config)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return [specs, &overrides] {
    for (auto& s : *specs) overrides.push_back(fault_override(s));
  };
}

}  // namespace troupe::cli
