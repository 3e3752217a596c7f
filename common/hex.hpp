// Bytes as lowercase hexadecimal text, two digits a byte (secrets, passwords,
// device ids, addresses handed on a command line).
#pragma once

#include <string>
#include <string_view>

namespace troupe {

inline std::string to_hex(std::string_view bytes) {
  constexpr const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

}  // namespace troupe
