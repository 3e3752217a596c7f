// A CPU compute device opened the way a stage actor opens one
// (ComputeDevice::open), for tests that run layers and optimizers: converts
// to the ExecContext& or Device& that the code under test asks for.
#pragma once

#include <memory>

#include "ops/compute_device.hpp"

namespace troupe::testing {

struct CpuContext {
  explicit CpuContext(int threads = 1)
      : owner(*ComputeDevice::open(DeviceChoice{DeviceKind::cpu, threads, 0, Precision::fp32})),
        device(owner->device()),
        kernels(owner->kernels()),
        ctx(owner->context()) {}
  CpuContext(const CpuContext&) = delete;
  CpuContext& operator=(const CpuContext&) = delete;

  operator const ExecContext&() const { return ctx; }
  operator Device&() { return device; }

  std::unique_ptr<ComputeDevice> owner;
  Device& device;
  const Kernels& kernels;
  const ExecContext& ctx;
};

}  // namespace troupe::testing
