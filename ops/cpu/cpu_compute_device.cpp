// CpuComputeDevice: owns the device, the kernel table over its stream's pool,
// and the CPU-only hooks (compute CPU time, the slow drill's burn).
#include "ops/cpu/cpu_compute_device.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include <immintrin.h>

#include "backends/cpu/cpu_device.hpp"
#include "backends/cpu/gemm.hpp"
#include "common/cpu_time.hpp"
#include "ops/cpu/cpu_kernels.hpp"

namespace troupe {
namespace {

class CpuComputeDevice final : public ComputeDevice {
 public:
  CpuComputeDevice(int threads, bool as_device_memory)
      : device_(threads, as_device_memory), kernels_(device_.cpu_stream().pool()),
        context_{device_, device_.default_stream(), kernels_, Precision::fp32} {}

  const ExecContext& context() const override { return context_; }

  std::string describe() const override {
    return "cpu (" + std::to_string(device_.capabilities().threads) + " threads, OpenBLAS " + gemm_backend_name() + ")";
  }

  // The measured rate per thread, times the threads that can run at once:
  // every sharer's, at most the machine's cores.
  double measure_peak_flops(int sharers) override {
    ThreadPool& pool = device_.cpu_stream().pool();
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return measure_sgemm_peak(pool) * 1e9 / pool.size() * std::min(pool.size() * std::max(1, sharers), cores);
  }

  std::function<double()> compute_cpu_clock() override {
    ThreadPool& pool = device_.cpu_stream().pool();
    return [&pool] { return pool.cpu_us(); };
  }

  // Each compute thread burns its share, in its own CPU time, mostly in
  // pause instructions: a stalled core, which leaves a hyperthread sibling
  // (another actor's) most of the core instead of slowing it too.
  std::function<void(double)> compute_burner() override {
    ThreadPool& pool = device_.cpu_stream().pool();
    return [&pool](double cpu_us) {
      const auto share_ns = static_cast<std::int64_t>(cpu_us * 1000 / pool.size());
      pool.run(pool.size(), [&](int) {
        const std::int64_t until = thread_cpu_ns() + share_ns;
        while (thread_cpu_ns() < until)
          for (int i = 0; i < 16; ++i) _mm_pause();
      });
    };
  }

 private:
  CpuDevice device_;
  CpuKernels kernels_;
  ExecContext context_;
};

}  // namespace

Expected<std::unique_ptr<ComputeDevice>> open_cpu_compute_device(const DeviceChoice& choice) {
  if (choice.precision != Precision::fp32)
    return make_error("train.precision = \"", std::string(precision_name(choice.precision)),
                      "\": the CPU backend computes in fp32 only (use precision = \"fp32\", or device = \"cuda\")");
  if (choice.threads < 1) return make_error("cpu: threads must be >= 1, got ", std::to_string(choice.threads));
  // TROUPE_CPU_AS_DEVICE=1: CPU memory treated as a device's (CpuDevice), so
  // a job runs the GPU's staged paths here; for tests and debugging.
  const char* env = std::getenv("TROUPE_CPU_AS_DEVICE");
  const bool as_device = env != nullptr && std::string(env) == "1";
  return std::unique_ptr<ComputeDevice>(new CpuComputeDevice(choice.threads, as_device));
}

}  // namespace troupe
