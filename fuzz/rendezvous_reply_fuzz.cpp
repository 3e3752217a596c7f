// libFuzzer target: the rendezvous's reading of Redis replies (the join
// script's verdict, the peers' endpoints). A reply is built from the bytes:
// a kind, then elements of (kind, length, bytes). It must never crash or throw.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/control/rendezvous.hpp"

namespace {

troupe::RedisValue value_from(const std::uint8_t*& p, const std::uint8_t* end, int depth) {
  troupe::RedisValue v;
  if (p == end) return v;
  v.kind = static_cast<troupe::RedisValue::Kind>(*p++ % 6);
  if (v.kind == troupe::RedisValue::Kind::array && depth < 3) {
    const int n = p == end ? 0 : *p++ % 8;
    for (int i = 0; i < n && p != end; ++i) v.elements.push_back(value_from(p, end, depth + 1));
    return v;
  }
  const std::size_t len = p == end ? 0 : *p++;
  const std::size_t take = std::min<std::size_t>(len, static_cast<std::size_t>(end - p));
  v.str.assign(reinterpret_cast<const char*>(p), take);
  p += take;
  v.integer = static_cast<long long>(len);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::uint8_t* p = data;
  const std::uint8_t* end = data + size;
  const int world = p == end ? 1 : 1 + *p++ % 16;
  const troupe::RedisValue reply = value_from(p, end, 0);
  troupe::RendezvousRequest req{"job", 0, world, "hash", "0.1.0", "endpoint", std::chrono::milliseconds(1)};
  auto verdict = troupe::interpret_join_reply(reply, req);
  if (verdict && (verdict->arrived < 1 || verdict->arrived > world)) __builtin_trap();
  std::vector<int> peers;
  for (int i = 0; i < world; ++i) peers.push_back(i);
  auto endpoints = troupe::interpret_peers_reply(reply, req, peers);
  if (endpoints && endpoints->size() != peers.size()) __builtin_trap();
  return 0;
}
