// A node's endpoint as published at rendezvous: where its node actor listens,
// its actor system's identity (so peers accept control messages only from
// the job's members), and one UCX worker address per work actor on it.
// Encoded as text lines and length-prefixed binary; decoding treats the bytes
// as hostile (they come from Redis) and checks every length and number.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/expected.hpp"

namespace troupe {

struct NodeEndpoint {
  std::string host;
  std::uint16_t port = 0;
  std::string system_id;          ///< the node's actor system identity (CAF node id, as text)
  std::vector<std::string> ucx;   ///< UCX worker addresses, one per work actor on the node
  std::string domain;             ///< its failure domain (runtime/config/failure_domains.hpp; "" = unknown)
};

/// "troupe-endpoint 2\nHOST:PORT\nSYSTEM_ID\nDOMAIN\nK\n" then K times "LEN\n" + LEN bytes.
std::string encode_endpoint(const NodeEndpoint& e);

/// Parses what encode_endpoint wrote; `who` (e.g. "node 3") names it in errors.
/// At most `max_actors` addresses of at most 64 KiB each. Never throws.
Expected<NodeEndpoint> decode_endpoint(const std::string& bytes, const std::string& who, int max_actors = 1 << 16);

}  // namespace troupe
