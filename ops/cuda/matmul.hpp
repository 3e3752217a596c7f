// Row-major GEMMs on cuBLASLt: C = alpha op(A) op(B) + beta C (+ a bias per
// column of C, fused as cuBLASLt's bias epilogue), A and B in fp32 or bf16,
// C in fp32 or (from bf16 inputs, without accumulation) bf16; the bias in
// C's type; the accumulation always fp32. One handle and one
// workspace per stream; the algorithm of each shape is chosen once and kept,
// so a shape always runs the same kernel (a replayed step gives the same bits).
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>

#include "common/expected.hpp"

namespace troupe::cuda {

/// The bias epilogue's alignment requirement, in bytes.
constexpr int kBiasAlignment = 16;

struct GemmShape {
  bool trans_a = false, trans_b = false;
  int M = 0, N = 0, K = 0;   ///< C: (M,N); op(A): (M,K); op(B): (K,N)
  int lda = 0, ldb = 0, ldc = 0;  ///< row strides in elements
  bool bias = false;
  bool accumulate = false;   ///< beta = 1 (else 0)
  /// A GELU fused into the epilogue (bf16 in and out): the forward's
  /// C = gelu(op(A) op(B) + bias) with the pre-activation stored in `aux`, or
  /// the backward's C = (op(A) op(B)) * gelu'(aux). cuBLASLt's GELU is the
  /// tanh approximation, as Kernels::gelu_forward.
  enum class Gelu { none, forward, backward } gelu = Gelu::none;
  /// C = op(A) op(B) (+ bias) + R, R read from a tensor of its own (the
  /// residual stream; cuBLASLt's C input, its D output): beta = 1.
  bool residual = false;
  bool bf16 = false;         ///< A and B in bf16 (set by the gemm overload)
  bool out_bf16 = false;     ///< C in bf16 (set by the gemm overload)
  /// Alignment in bytes (a power of two, at most 256) of A, B, C and the bias:
  /// set by gemm from the pointers, so the algorithm chosen suits them
  /// (parameters are views at any element offset of one flat buffer).
  int align_a = 0, align_b = 0, align_c = 0, align_bias = 0, align_aux = 0;
  auto key() const {
    return std::tie(trans_a, trans_b, M, N, K, lda, ldb, ldc, bias, accumulate, gelu, residual, bf16, out_bf16, align_a,
                    align_b, align_c, align_bias, align_aux);
  }
  bool operator<(const GemmShape& o) const { return key() < o.key(); }
};

class Matmul {
 public:
  /// A handle and workspace for GEMMs on `stream` of GPU `device`.
  static Expected<std::unique_ptr<Matmul>> create(int device, cudaStream_t stream);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  /// fp32 in, fp32 accumulate (no TF32: results within float rounding of the
  /// CPU's). `bias` (N) is added to every row of C when shape.bias; it must
  /// be aligned to kBiasAlignment bytes (the epilogue's requirement).
  void gemm(GemmShape shape, const float* A, const float* B, float* C, const float* bias, float alpha = 1.0f);
  /// bf16 in (on the tensor cores), fp32 accumulate and out.
  void gemm(GemmShape shape, const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, const float* bias,
            float alpha = 1.0f);
  /// bf16 in, fp32 accumulate, C rounded to bf16; a bias (when shape.bias)
  /// is bf16 too (cuBLASLt's bias takes the output's type); no accumulation.
  void gemm(GemmShape shape, const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
            const __nv_bfloat16* bias, float alpha = 1.0f);

  // Fused epilogues. Each returns false, having enqueued nothing, where
  // cuBLASLt has no algorithm for the shape with that epilogue: the caller
  // then runs the GEMM and the elementwise kernel apart.
  /// C = gelu(op(A) op(B) + bias), bf16; `pre` (C's layout) = the bf16 pre-activation.
  bool gemm_gelu(GemmShape shape, const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                 __nv_bfloat16* pre, const __nv_bfloat16* bias);
  /// C = (op(A) op(B)) * gelu'(pre), bf16 (pre as gemm_gelu stored it).
  bool gemm_dgelu(GemmShape shape, const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                  const __nv_bfloat16* pre);
  /// C = op(A) op(B) + bias + R, fp32 out (R: C's layout, may be C itself).
  bool gemm_residual(GemmShape shape, const float* A, const float* B, float* C, const float* bias, const float* R);
  bool gemm_residual(GemmShape shape, const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, const float* bias,
                     const float* R);

 private:
  struct Plan;
  Matmul(int device, cudaStream_t stream);
  // The shape's plan, chosen once; null where a fused epilogue has no algorithm.
  const Plan* plan(const GemmShape& shape);
  // D = alpha op(A) op(B) + beta Cin (+ the epilogue) into C; Cin is C unless
  // shape.residual. False (nothing enqueued) where the shape has no plan.
  bool run(GemmShape shape, const void* A, const void* B, void* C, const void* bias, float alpha,
           const void* aux = nullptr, const void* Cin = nullptr);

  int device_;
  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<GemmShape, std::unique_ptr<Plan>> plans_;
};

}  // namespace troupe::cuda
