// host_memory(): a function-local CpuDevice, built on first use.
#include "backends/host_memory.hpp"

#include "backends/cpu/cpu_device.hpp"

namespace troupe {

Device& host_memory() {
  static CpuDevice device(1);
  return device;
}

}  // namespace troupe
