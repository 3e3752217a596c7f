// The job's secret key for control messages (issue 34: nodes that prove who
// they are). Every control message that crosses between processes carries
// an HMAC-SHA256 of its type and fields under the job's key
// (actors/sealed.hpp); a message whose MAC does not match is refused before
// any handler sees it, and counted.
//
//  AU-1  The key is process-wide and set once, before the process's actor
//        system exchanges a message (run_node); without a key a process
//        seals with an empty MAC and accepts only an empty one, so a process
//        without the job's key and a job's member never accept each other's
//        messages.
//  AU-2  MACs are compared in constant time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace troupe {

/// Sets the process's key (any bytes, at least 16).
void install_message_key(std::string key);
/// Removes it (tests).
void forget_message_key();
/// The HMAC-SHA256 of `type` and `bytes` under the key; "" when none is set (AU-1).
std::string message_mac(std::string_view type, const void* bytes, std::size_t size);
/// Whether two MACs are equal, in time independent of where they differ (AU-2).
bool macs_equal(const std::string& a, const std::string& b);

/// Counts a message refused for its MAC; the count so far, this one included.
std::uint64_t count_unauthenticated();
/// Messages refused for their MAC in this process.
std::uint64_t unauthenticated_messages();

}  // namespace troupe
