// CudaComputeDevice: the device, the kernel table (fp32, or bf16 GEMMs), and
// MFU's denominator measured with cuBLASLt on this GPU in that precision.
#include "ops/cuda/cuda_compute_device.hpp"

#include <algorithm>
#include <string>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_device.hpp"
#include "ops/cuda/cuda_kernels.hpp"
#ifdef TROUPE_HAVE_NCCL
#include "ops/cuda/nccl_communicator.hpp"
#endif

namespace troupe {
namespace {

class CudaComputeDevice final : public ComputeDevice {
 public:
  CudaComputeDevice(std::unique_ptr<CudaDevice> device, std::unique_ptr<CudaKernels> kernels, Precision precision,
                    bool graphs)
      : device_(std::move(device)),
        kernels_(std::move(kernels)),
        context_{*device_, device_->default_stream(), *kernels_, precision, graphs} {}

  const ExecContext& context() const override { return context_; }

  std::string describe() const override {
    const CudaDeviceInfo& i = device_->info();
    return i.name + " (cuda:" + std::to_string(device_->index()) + ", sm_" + std::to_string(i.major) +
           std::to_string(i.minor) + ", " + std::to_string(i.sms) + " SMs, " +
           std::to_string(i.memory_bytes >> 30) + " GiB)";
  }

  std::int64_t peak_memory_bytes() const override { return device_->peak_pool_bytes(); }

  std::string hardware_id() const override { return device_->info().uuid; }

#ifdef TROUPE_HAVE_NCCL
  Expected<std::string> nccl_unique_id() override { return troupe::nccl_unique_id(); }
  Expected<std::unique_ptr<Communicator>> nccl_communicator(GroupMembers members, const std::string& unique_id,
                                                            std::chrono::milliseconds bound) override {
    return open_nccl_communicator(*device_, std::move(members), unique_id, bound);
  }
#else
  Expected<std::string> nccl_unique_id() override {
    return make_error("this build of troupe has no NCCL (nccl.h was not found when it was built)");
  }
#endif

  // The best of 5 GEMMs of n^3 in the context's precision on this GPU
  // (fp32: 4096; bf16, which needs a larger problem to reach its rate:
  // 8192), timed by events; the GPU is one, whatever the number of actors
  // sharing it.
  double measure_peak_flops(int) override {
    const bool bf16 = context_.precision == Precision::bf16;
    const int n = bf16 ? 8192 : 4096;
    const std::size_t elems = std::size_t{static_cast<unsigned>(n)} * static_cast<unsigned>(n);
    const std::size_t in_bytes = elems * (bf16 ? sizeof(__nv_bfloat16) : sizeof(float));
    auto a = device_->allocate(in_bytes), b = device_->allocate(in_bytes), c = device_->allocate(elems * sizeof(float));
    if (!a || !b || !c) return 0.0;
    Stream& s = device_->default_stream();
    (void)device_->fill_zero((*a)->data(), in_bytes, s);
    (void)device_->fill_zero((*b)->data(), in_bytes, s);
    (void)device_->fill_zero((*c)->data(), elems * sizeof(float), s);
    auto mm = cuda::Matmul::create(device_->index(), device_->cuda_stream().handle());
    if (!mm) return 0.0;
    const cuda::GemmShape shape{false, false, n, n, n, n, n, n, false, false};
    auto* out = static_cast<float*>((*c)->data());
    auto run = [&] {
      if (bf16)
        (*mm)->gemm(shape, static_cast<const __nv_bfloat16*>((*a)->data()),
                    static_cast<const __nv_bfloat16*>((*b)->data()), out, nullptr);
      else
        (*mm)->gemm(shape, static_cast<const float*>((*a)->data()), static_cast<const float*>((*b)->data()), out,
                    nullptr);
    };
    run();
    run();
    double best_us = 1e300;
    for (int i = 0; i < 5; ++i) {
      auto e0 = s.record();
      run();
      auto e1 = s.record();
      e1->synchronize();
      best_us = std::min(best_us, e1->elapsed_us_since(*e0));
    }
    return 2.0 * n * n * n / (best_us * 1e-6);
  }

 private:
  std::unique_ptr<CudaDevice> device_;
  std::unique_ptr<CudaKernels> kernels_;
  ExecContext context_;
};

}  // namespace

Expected<std::unique_ptr<ComputeDevice>> open_cuda_compute_device(const DeviceChoice& choice) {
  auto n = CudaDevice::count();
  if (!n) return make_error("train.device = \"cuda\": ", n.error().message);
  const int index = std::max(0, choice.local_rank) % *n;
  auto device = CudaDevice::open(index);
  if (!device) return make_error("train.device = \"cuda\": ", device.error().message);
  auto kernels = CudaKernels::create(**device, (*device)->cuda_stream(), choice.precision);
  if (!kernels) return make_error("train.device = \"cuda\": ", kernels.error().message);
  return std::unique_ptr<ComputeDevice>(
      new CudaComputeDevice(std::move(*device), std::move(*kernels), choice.precision, choice.graphs));
}

}  // namespace troupe
