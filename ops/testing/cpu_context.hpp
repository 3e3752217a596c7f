// A CPU device with its kernel table and execution context, for tests that
// run layers and optimizers: converts to the ExecContext& or Device& that the
// code under test asks for.
#pragma once

#include "backends/cpu/cpu_device.hpp"
#include "ops/cpu/cpu_kernels.hpp"
#include "ops/exec_context.hpp"

namespace troupe::testing {

struct CpuContext {
  explicit CpuContext(int threads = 1)
      : device(threads), kernels(device.cpu_stream().pool()), ctx{device, device.default_stream(), kernels} {}
  CpuContext(const CpuContext&) = delete;
  CpuContext& operator=(const CpuContext&) = delete;

  operator const ExecContext&() const { return ctx; }
  operator Device&() { return device; }

  CpuDevice device;
  CpuKernels kernels;
  ExecContext ctx;
};

}  // namespace troupe::testing
