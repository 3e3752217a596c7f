// Sealed control messages (AU-1 in common/message_key.hpp): each message
// type's inspect() goes through sealed(), which has CAF's serializer write,
// after the fields, an HMAC of the type and the fields under the job's key,
// and has the deserializer check it before the message exists: a message
// whose MAC does not match is refused inside CAF's BASP layer ("cannot read
// ... content of remote message") and never reaches a handler; it is counted.
//
//  AU-5  What CAF 0.17 delivers of a refused message is an empty message
//        (its sender and receiver, no content): every actor that takes
//        remote messages drops it in its default handler without counting it
//        again (refused_remnant).
//  AU-4  Only bytes that crossed between processes are checked: a message
//        sent inside a process is never serialized (its sender is that
//        process's own actor), so the check costs a remote message one HMAC
//        of its fields and a local one nothing.
#pragma once

#include <spdlog/spdlog.h>

#include <caf/binary_serializer.hpp>
#include <caf/message_view.hpp>
#include <caf/result.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/type_erased_tuple.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/save_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>
#include <string>
#include <vector>

#include "common/message_key.hpp"

namespace troupe {

namespace sealed_detail {

// The MAC of `fields` as CAF serializes them (`context`: the inspector's, for actor handles).
template <class... Fields>
caf::error mac_of(caf::execution_unit* context, const char* type, std::string& out, Fields&... fields) {
  std::vector<char> bytes;
  caf::binary_serializer sink{context, bytes};
  if (auto err = sink(fields...)) return err;
  out = message_mac(type, bytes.data(), bytes.size());
  return caf::none;
}

inline caf::error refuse(const char* type) {
  const std::uint64_t count = count_unauthenticated();
  if (count == 1 || count % 1000 == 0)
    spdlog::warn("refused a {} whose MAC does not match the job's key (not from a member of the job); {} refused so "
                 "far",
                 type, count);
  return caf::sec::invalid_argument;
}

}  // namespace sealed_detail

/// AU-5: a message with no content, what CAF delivers of one refused for its MAC.
inline bool refused_remnant(caf::message_view& m) { return m.content().empty(); }

/// AU-5: a default handler that counts each unexpected message in `counter`
/// (a member of the actor's state: the handler runs only while it lives),
/// but not the remnant of a refused one, which count_unauthenticated counted.
inline auto count_unexpected_in(std::uint64_t& counter) {
  return [&counter](caf::scheduled_actor*, caf::message_view& m) -> caf::result<caf::message> {
    if (!refused_remnant(m)) ++counter;
    return caf::sec::unexpected_message;
  };
}

/// inspect() of a control message: `fields` under `type`, sealed for the
/// network by serializers and checked by deserializers (AU-1, AU-4).
template <class Inspector, class... Fields>
typename Inspector::result_type sealed(Inspector& f, const char* type, Fields&... fields) {
  if constexpr (requires { f.context(); }) {
    std::string mac;
    return f(caf::meta::type_name(type), fields...,
             caf::meta::save_callback([&]() -> caf::error { return sealed_detail::mac_of(f.context(), type, mac, fields...); }),
             mac, caf::meta::load_callback([&]() -> caf::error {
               std::string expected;
               if (auto err = sealed_detail::mac_of(f.context(), type, expected, fields...)) return err;
               return macs_equal(mac, expected) ? caf::error{} : sealed_detail::refuse(type);
             }));
  } else {
    return f(caf::meta::type_name(type), fields...);  // printing: no MAC
  }
}

}  // namespace troupe
