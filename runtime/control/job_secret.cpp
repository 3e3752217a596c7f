// job_secret (see job_secret.hpp).
#include "runtime/control/job_secret.hpp"

#include <fstream>

#include "common/hex.hpp"
#include "common/private_file.hpp"
#include "runtime/control/rendezvous.hpp"

namespace troupe {
namespace {

// 32 random bytes as 64 hex digits, from the kernel.
Expected<std::string> random_secret() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  unsigned char bytes[32];
  if (!in.read(reinterpret_cast<char*>(bytes), sizeof bytes)) return make_error("/dev/urandom: cannot read");
  return to_hex({reinterpret_cast<const char*>(bytes), sizeof bytes});
}

}  // namespace

Expected<std::string> job_secret(RedisClient& redis, const std::string& job_id, const std::string& secret_file) {
  if (!secret_file.empty()) {
    auto line = read_private_line(secret_file, "--job-secret-file");
    if (!line) return line.error();
    if (line->size() < 16) return make_error("--job-secret-file ", secret_file, ": a key of at least 16 bytes is needed");
    return *line;
  }
  auto fresh = random_secret();
  if (!fresh) return fresh.error();
  const std::string key = job_key(job_id, "secret");
  auto set = redis.pipeline({{"SET", key, *fresh, "NX", "EX", "86400"}, {"GET", key}});  // AU-3: the first one stays
  if (!set) return make_error("the job's key for control messages: ", set.error().message);
  const RedisValue& got = (*set)[1];
  if (got.kind != RedisValue::Kind::string || got.str.size() != 64)
    return make_error("the job's key for control messages in Redis (", key, ") is not 64 hex digits");
  return got.str;
}

}  // namespace troupe
