// Reading a non-negative decimal number from text that may be hostile (an
// environment variable, a Redis reply, a published endpoint): one parser for
// all of them, never throwing.
#pragma once

#include <charconv>
#include <string_view>

namespace troupe {

/// Reads all of `text` as a non-negative decimal number of type T: digits
/// only (no sign, no space, nothing after), within T's range. False otherwise.
template <class T>
bool parse_decimal(std::string_view text, T& out) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace troupe
