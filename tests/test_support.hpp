// Helpers for tests that drive the `troupe` executable: run a shell command,
// capture its output and exit code; make a scratch directory.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_skip.hpp"

namespace troupe::testing {

struct RunResult {
  int exit_code = -1;
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

/// The troupe executable of this build (the build system defines its path),
/// or TROUPE_BIN where set (a test run elsewhere, as on the GPU machine).
inline std::string troupe_bin() {
  const char* p = std::getenv("TROUPE_BIN");
  return p && *p ? p : TROUPE_BIN_PATH;
}

/// The source tree (for bench/torch_gpt.py and the example configs), or
/// TROUPE_SOURCE_DIR where set.
inline std::string source_dir() {
  const char* p = std::getenv("TROUPE_SOURCE_DIR");
  return p && *p ? p : TROUPE_SOURCE_DIR;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The last `n` lines of `text` (a failure's message keeps what matters short).
inline std::string tail_lines(const std::string& text, int n) {
  std::size_t at = text.size();
  for (int i = 0; i <= n && at != std::string::npos && at > 0; ++i) at = text.rfind('\n', at - 1);
  return at == std::string::npos ? text : text.substr(at + 1);
}

/// Starts `cmd` under /bin/sh in the background, exec'd (the pid returned is
/// the command's own; -1 if it could not fork), its stderr to `err_path`,
/// with `env` (name, value) set in it; `own_group`: in a process group of its
/// own, so that kill(-pid) reaches everything it starts.
inline pid_t start_in_background(const std::string& cmd, const std::string& err_path,
                                 const std::vector<std::pair<std::string, std::string>>& env = {},
                                 bool own_group = false) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (own_group) ::setsid();
  for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
  ::execl("/bin/sh", "sh", "-c", ("exec " + cmd + " 2> " + err_path).c_str(), static_cast<char*>(nullptr));
  ::_exit(127);
}

/// Runs `cmd` under /bin/sh; stderr goes to a file read back afterwards.
inline RunResult run(const std::string& cmd) {
  static std::atomic<int> counter{0};
  const auto err_path = std::filesystem::temp_directory_path() /
                        ("troupe_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  RunResult r;
  FILE* p = ::popen((cmd + " 2>" + err_path.string()).c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p)) r.out += buf.data();
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = slurp(err_path);
  std::filesystem::remove(err_path);
  return r;
}

/// A fresh directory removed when the object dies.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() / ("troupe_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

/// Waits until the file at `path` contains `needle`; false after `limit`.
inline bool wait_for_text(const std::string& path, const std::string& needle, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (slurp(path).find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

/// Processes (other than this one) whose command line mentions `needle`,
/// e.g. a job's scratch directory: what a test checks is left behind.
inline std::vector<pid_t> processes_with(const std::string& needle) {
  std::vector<pid_t> out;
  for (auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = slurp(e.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(needle) != std::string::npos && std::stoi(name) != ::getpid()) out.push_back(std::stoi(name));
  }
  return out;
}

/// True in a build with the sanitizers (scripts/sanitize.sh), where every
/// process runs several times slower than in the plain build.
constexpr bool sanitized_build() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#else
  return false;
#endif
}

/// `troupe train|launch` arguments for a job whose subject is not the health
/// monitor's timing: under the sanitizers a node process has gone silent for
/// 845 ms (past the default 4 x 200 ms) beside a CPU hog or another test's job,
/// and a fault-free run then ended with a hung_process verdict (twice in one
/// sanitizer run, a recovery test's fault-free reference and C-3's resumed
/// run), so there the bound is 10 beats; nothing in the plain build.
inline std::string sanitizer_health_slack() { return sanitized_build() ? " --set health.miss_limit=10" : ""; }

/// For a test that repeats one scenario over variants whose code paths the
/// sanitizers see alike: every variant in the plain build; under the
/// sanitizers `n` of them, drawn at random each run (so successive CI runs
/// cover them all), in their listed order. The caller INFOs the variant.
template <class T>
std::vector<T> all_or_drawn(std::vector<T> all, std::size_t n) {
  if (!sanitized_build() || n >= all.size()) return all;
  static std::mt19937 draw{std::random_device{}()};
  std::vector<T> out;
  std::sample(all.begin(), all.end(), std::back_inserter(out), n, draw);  // keeps their order
  return out;
}

/// Writes `text` to `path`.
inline void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

/// A deterministic English-like corpus of about `bytes` bytes.
inline std::string synthetic_text(std::size_t bytes) {
  static const char* words[] = {"the", "actor", "sends", "a",     "message", "to",   "its", "peer",
                                "and", "waits", "for",   "tensor", "bytes",  "over", "ucx", "pipeline"};
  std::string s;
  unsigned x = 12345;
  while (s.size() < bytes) {
    x = x * 1103515245u + 12345u;
    s += words[(x >> 16) % 16];
    s += ((x >> 8) % 11 == 0) ? ".\n" : " ";
  }
  return s;
}

}  // namespace troupe::testing
