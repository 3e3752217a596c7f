#include "tools/troupe/steal_time.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace troupe::cli {

double stolen_ms() {
  std::ifstream in("/proc/stat");
  std::string line;
  if (!std::getline(in, line) || line.rfind("cpu ", 0) != 0) return -1;
  // cpu user nice system idle iowait irq softirq steal ...
  std::istringstream fields(line.substr(4));
  long long value = 0;
  for (int i = 0; i < 8; ++i)
    if (!(fields >> value)) return -1;
  const long ticks = ::sysconf(_SC_CLK_TCK);
  return ticks > 0 ? 1000.0 * static_cast<double>(value) / static_cast<double>(ticks) : -1;
}

}  // namespace troupe::cli
