// What the CUDA tests share: the skip where no GPU answers, a CUDA device
// context, and tensors made from host values on either device.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "backends/cuda/cuda_device.hpp"
#include "ops/compute_device.hpp"
#include "ops/cuda/cuda_compute_device.hpp"
#include "ops/testing/cpu_context.hpp"
#include "common/test_skip.hpp"

namespace troupe::testing {

/// GPU 0's compute device, or the test ends Skipped with the driver's reason.
/// `graphs`: layers captured as CUDA graphs and replayed (train.cuda_graphs).
inline std::unique_ptr<ComputeDevice> gpu_or_skip(Precision precision = Precision::fp32, bool graphs = true) {
  auto n = CudaDevice::count();
  if (!n) skip("no GPU here (" + n.error().message + ")");
  auto d = open_cuda_compute_device(DeviceChoice{DeviceKind::cuda, 1, 0, precision, graphs});
  REQUIRE(d.ok());
  return std::move(*d);
}

/// `values` as a tensor of `shape` on ctx's device (copied, waited for); in
/// bf16, each value rounded to nearest.
inline Tensor tensor_of(const ExecContext& ctx, const Shape& shape, const std::vector<float>& values,
                        DType dtype = DType::f32) {
  auto host = *Tensor::pinned_host(ctx.device, shape, dtype);
  if (dtype == DType::bf16)
    std::transform(values.begin(), values.end(), host.data<BFloat16>(), [](float x) { return to_bf16(x); });
  else
    std::copy(values.begin(), values.end(), host.f32());
  auto t = *Tensor::empty(ctx.device, shape, dtype);
  REQUIRE(ctx.copy(t, host).ok());
  ctx.stream.synchronize();
  return t;
}

inline Tensor ids_of(const ExecContext& ctx, const Shape& shape, const std::vector<std::int32_t>& values) {
  auto host = *Tensor::pinned_host(ctx.device, shape, DType::i32);
  std::copy(values.begin(), values.end(), host.data<std::int32_t>());
  auto t = *Tensor::empty(ctx.device, shape, DType::i32);
  REQUIRE(ctx.copy(t, host).ok());
  ctx.stream.synchronize();
  return t;
}

/// A tensor's values (f32 or bf16) on the host as floats (waits for ctx's stream).
inline std::vector<float> values_of(const ExecContext& ctx, const Tensor& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  if (t.dtype() == DType::bf16) {
    std::vector<BFloat16> bits(out.size());
    REQUIRE(ctx.device.copy(bits.data(), t.raw(), t.nbytes(), ctx.stream).ok());
    ctx.stream.synchronize();
    std::transform(bits.begin(), bits.end(), out.begin(), from_bf16);
    return out;
  }
  REQUIRE(t.dtype() == DType::f32);
  REQUIRE(ctx.device.copy(out.data(), t.raw(), t.nbytes(), ctx.stream).ok());
  ctx.stream.synchronize();
  return out;
}

inline std::vector<float> uniform(std::size_t n, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

/// Every element of `got` within `rel` of `want` relative to max(|want|, floor).
inline void require_close(const std::vector<float>& got, const std::vector<float>& want, double rel = 1e-5,
                          double floor = 1e-3) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double scale = std::max(std::abs(static_cast<double>(want[i])), floor);
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::abs(static_cast<double>(got[i]) - want[i]) <= rel * scale);
  }
}

}  // namespace troupe::testing
