// launch_job, stamp_ms (see bench_launch.hpp).
#include "tools/troupe/bench_launch.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "tools/troupe/commands.hpp"

namespace troupe::cli {

Launched launch_job(const LaunchSpec& a, const std::string& extra, int limit_s) {
  const std::string metrics = (std::filesystem::temp_directory_path() /
                               ("troupe_bench_" + a.bench + "_" + std::to_string(::getpid()) + ".jsonl")).string();
  std::ostringstream command;
  command << "timeout -k 10 " << limit_s << " '" << troupe_executable() << "' launch --nodes " << a.nodes << " '" << a.config << "' --metrics '" << metrics
          << "'";
  for (auto& o : a.overrides) command << " --set '" << o << "'";
  command << " " << extra << " 2>&1";
  const std::string cmd = command.str();
  Launched out;
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
    std::array<char, 4096> buf{};
    while (pipe && std::fgets(buf.data(), buf.size(), pipe.get())) out.log += buf.data();
    const int status = pipe ? pclose(pipe.release()) : -1;
    out.exit_code = status == -1 ? -1 : WEXITSTATUS(status);
  }
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  out.ended_by_limit = out.exit_code == 124 || out.exit_code == 137;  // timeout's
  if (out.ended_by_limit) {
    const std::size_t tail = out.log.size() > 3000 ? out.log.size() - 3000 : 0;
    std::fprintf(stderr, "bench %s: a job ran longer than %d s and was ended: %s\n--- its log's end:\n%s\n", a.bench.c_str(),
                 limit_s, extra.c_str(), out.log.substr(tail).c_str());
  }
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.metrics.push_back(std::move(j));
  }
  std::filesystem::remove(metrics);
  return out;
}

double stamp_ms(const std::string& log, const std::string& needle, std::size_t from, std::size_t* at) {
  for (std::size_t pos = log.find(needle, from); pos != std::string::npos; pos = std::string::npos) {
    const std::size_t begin = log.rfind('\n', pos) == std::string::npos ? 0 : log.rfind('\n', pos) + 1;
    const std::size_t end = log.find('\n', pos);
    const std::string line = log.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (at) *at = end == std::string::npos ? log.size() : end;
    // spdlog's "[2026-11-23 16:54:17.375]"
    for (auto b = line.find('['); b != std::string::npos; b = line.find('[', b + 1)) {
      int y, mo, d, h, mi, s, ms;
      if (std::sscanf(line.c_str() + b, "[%d-%d-%d %d:%d:%d.%d]", &y, &mo, &d, &h, &mi, &s, &ms) == 7)
        return ((h * 60.0 + mi) * 60.0 + s) * 1000.0 + ms;
    }
  }
  return -1;
}

}  // namespace troupe::cli
