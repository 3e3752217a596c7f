// Where a job's key for control messages comes from (common/message_key.hpp):
// a file only its owner can read (--job-secret-file, the same on every node,
// for jobs whose Redis others can read), else the job's Redis, behind its
// password: the first node to ask stores 32 random bytes there, every later
// one (a restarted process, a spare) reads them.
//
//  AU-3  Every process of a job gets the same key for the job's whole life:
//        the Redis key is set once (SET NX) and kept until the job's keys go
//        (forget_job); a file's first line is the key as written.
#pragma once

#include <string>

#include "common/expected.hpp"
#include "runtime/control/redis_client.hpp"

namespace troupe {

/// The key of job `job_id`: `secret_file`'s first line (mode 0600, at least
/// 16 bytes; errors name --job-secret-file) if given, else the job's Redis
/// key "secret", created by the first caller.
Expected<std::string> job_secret(RedisClient& redis, const std::string& job_id, const std::string& secret_file);

}  // namespace troupe
