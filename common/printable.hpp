// Text from untrusted input (a tensor name in a file, a value in Redis) made
// safe for a one-line error message.
#pragma once

#include <string>

namespace troupe {

/// `s` with control and non-ASCII bytes escaped as \xNN, cut to 200 bytes.
std::string printable(const std::string& s);

}  // namespace troupe
