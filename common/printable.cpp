// printable.
#include "common/printable.hpp"

#include <cstdio>

namespace troupe {

std::string printable(const std::string& s) {
  constexpr std::size_t kMax = 200;
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return s.size() > kMax ? out + "..." : out;
}

}  // namespace troupe
