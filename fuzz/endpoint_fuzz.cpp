// libFuzzer target: decoding a node endpoint read from Redis. It must never
// crash or throw; what it accepts must encode back to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/control/endpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto e = troupe::decode_endpoint(bytes, "node 1", 64);
  if (!e) return 0;
  if (e->ucx.size() > 64 || troupe::encode_endpoint(*e) != bytes) std::abort();
  return 0;
}
