// The execution context handed to every layer, op and optimizer: the device
// that owns the memory, the in-order stream the work runs on, that stream's
// kernel table and the precision policy. Nothing below actors/ names a
// concrete device; a test or a tool gets a context from ComputeDevice::open.
#pragma once

#include <string_view>

#include "backends/device.hpp"
#include "backends/tensor.hpp"
#include "ops/kernels.hpp"

namespace troupe {

/// How the model computes: fp32 throughout, or bf16 GEMM inputs and
/// activations with fp32 accumulation, master weights, moments, reductions,
/// LayerNorm statistics and loss.
enum class Precision { fp32, bf16 };

constexpr std::string_view precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }

struct ExecContext {
  Device& device;
  Stream& stream;
  const Kernels& kernels;
  Precision precision = Precision::fp32;
  /// Capture repeated work once and replay it where the stream can (CUDA
  /// graphs; ReplayCache); off, everything is enqueued call by call.
  bool replay = false;

  /// Enqueues dst = src (equal byte sizes, either on this device or host memory).
  Status copy(const Tensor& dst, const Tensor& src) const {
    if (dst.nbytes() != src.nbytes())
      return make_error("copy: ", shape_string(src.shape()), " into ", shape_string(dst.shape()));
    return device.copy(dst.raw(), src.raw(), src.nbytes(), stream);
  }
  /// Enqueues t = 0.
  Status zero(const Tensor& t) const { return device.fill_zero(t.raw(), t.nbytes(), stream); }
};

}  // namespace troupe
