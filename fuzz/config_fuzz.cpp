// libFuzzer target: the job config parser on arbitrary TOML text and --set
// overrides (the lines before a "\n--\n" separator). It must never crash or
// throw, and an accepted config must hold every range it promises.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/config/job_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto cut = input.find("\n--\n");
  std::vector<std::string> overrides;
  std::string text = input;
  if (cut != std::string::npos) {
    std::istringstream lines(input.substr(0, cut));
    for (std::string line; std::getline(lines, line);) overrides.push_back(line);
    text = input.substr(cut + 4);
  }
  auto c = troupe::parse_job_config(text, "fuzz.toml", overrides);
  if (!c) return 0;
  const auto& t = c->train;
  if (!(t.lr > 0) || !std::isfinite(t.lr) || !(t.beta1 < 1) || !(t.beta2 < 1) || !(t.eps > 0) ||
      !std::isfinite(t.grad_clip) || !(c->parallel.bucket_mb > 0) || !std::isfinite(c->parallel.bucket_mb) ||
      c->model.dim < 1 || c->model.vocab < 1 || t.batch < 1 || c->parallel.dp < 1 || c->health.heartbeat_ms < 1)
    std::abort();
  return 0;
}
