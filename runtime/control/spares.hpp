// Spare node processes (recovery.spares): a `troupe node --spare` offers
// itself in the job's Redis and waits; when a node process is lost and no
// restart is left, the coordinator takes the oldest offer and names the rank
// the spare is to play, which then rejoins the job as that rank.
//
// Keys: troupe:<job>:spares (a list of offers, oldest first) and
// troupe:<job>:spare:<id> (one spare's assignment, a list it pops).
//
//  SP-1  An offer is taken at most once (LPOP), and a spare receives at most
//        one assignment: it stops waiting at the first.
//  SP-2  An assignment is a rank in [0, world) or an error naming the key; a
//        spare never plays a rank it was not given.
//  SP-3  An offer leaves the list only with its assignment (one script) or
//        with the job's keys (forget_job): a spare whose offer is gone and
//        who has no assignment knows that the job has ended.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "common/expected.hpp"
#include "runtime/control/redis_client.hpp"

namespace troupe {

/// A spare's identity in the job's offers: host name and process id.
std::string spare_id();

/// Offers spare `id` to the job (appended to its offers).
Status offer_spare(RedisClient& redis, const std::string& job_id, const std::string& id);

/// Waits up to `wait` (whole seconds; 0: only looks) for spare `id`'s
/// assignment: the rank to play, or nullopt if none came.
Expected<std::optional<int>> await_assignment(RedisClient& redis, const std::string& job_id, const std::string& id,
                                              int world, std::chrono::seconds wait);

/// Takes the oldest offer and assigns it `rank`: the spare's id, or nullopt if none waits.
Expected<std::optional<std::string>> assign_spare(RedisClient& redis, const std::string& job_id, int rank);

/// Whether spare `id`'s offer still waits in the job's list (SP-3).
Expected<bool> still_offered(RedisClient& redis, const std::string& job_id, const std::string& id);

/// Whether the job's members are in Redis (it runs, or has not ended).
Expected<bool> job_running(RedisClient& redis, const std::string& job_id);

}  // namespace troupe
