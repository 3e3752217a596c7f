// Matmul: row-major shapes mapped onto cuBLASLt's column-major ones. A
// row-major X (r x c, row stride ld) is the column-major X^T (c x r, ld), so
// C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T with A and B swapped:
// m = N, n = M, k = K; the bias epilogue then adds per row of C^T, i.e. per
// column of C.
#include "ops/cuda/matmul.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace troupe::cuda {
namespace {

constexpr std::size_t kWorkspaceBytes = 32u << 20;

// The largest power of two, at most 256, that divides the address.
int alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int align = 256;
  while (align > 1 && a % static_cast<std::uintptr_t>(align) != 0) align /= 2;
  return align;
}

[[noreturn]] void fail(const char* call, cublasStatus_t st) {
  std::fprintf(stderr, "cublasLt: %s: status %d\n", call, static_cast<int>(st));
  std::abort();
}

void must(cublasStatus_t st, const char* call) {
  if (st != CUBLAS_STATUS_SUCCESS) fail(call, st);
}

}  // namespace

struct Matmul::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

Expected<std::unique_ptr<Matmul>> Matmul::create(int device, cudaStream_t stream) {
  std::unique_ptr<Matmul> m(new Matmul(device, stream));
  if (cublasStatus_t st = cublasLtCreate(&m->handle_); st != CUBLAS_STATUS_SUCCESS)
    return make_error("cublasLtCreate on device ", std::to_string(device), ": status ",
                      std::to_string(static_cast<int>(st)));
  if (cudaError_t e = cudaMallocAsync(&m->workspace_, kWorkspaceBytes, stream); e != cudaSuccess)
    return make_error("cudaMallocAsync (cuBLASLt workspace) on device ", std::to_string(device), ": ",
                      cudaGetErrorString(e));
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
    return make_error("cudaStreamSynchronize on device ", std::to_string(device), ": ", cudaGetErrorString(e));
  return m;
}

Matmul::Matmul(int device, cudaStream_t stream) : device_(device), stream_(stream) {}

Matmul::~Matmul() {
  plans_.clear();
  if (workspace_) {
    cudaStreamSynchronize(stream_);
    cudaFree(workspace_);
  }
  if (handle_) cublasLtDestroy(handle_);
}

const Matmul::Plan* Matmul::plan(const GemmShape& s) {
  auto it = plans_.find(s);
  if (it != plans_.end()) return it->second.get();
  auto p = std::make_unique<Plan>();
  must(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  // Lt's A is our B, Lt's B is our A (see the file comment).
  const cublasOperation_t op_a = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  must(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a), "TRANSA");
  must(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b), "TRANSB");
  cublasLtEpilogue_t epilogue = s.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (s.gelu == GemmShape::Gelu::forward) epilogue = s.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (s.gelu == GemmShape::Gelu::backward) epilogue = CUBLASLT_EPILOGUE_DGELU;
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    must(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
         "EPILOGUE");
  if (s.gelu != GemmShape::Gelu::none) {  // the pre-activation: C's layout (column-major N x M, ld = ldc) and type
    const std::int64_t ld = s.ldc;
    const std::int32_t type = s.out_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    must(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld), "AUX_LD");
    must(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &type, sizeof type),
         "AUX_DATA_TYPE");
  }
  // Stored (column-major) dimensions before the op: Lt A is (N x K) or (K x N), Lt B (K x M) or (M x K).
  const cudaDataType_t in = s.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  must(cublasLtMatrixLayoutCreate(&p->a, in, s.trans_b ? s.K : s.N, s.trans_b ? s.N : s.K, s.ldb), "layout A");
  must(cublasLtMatrixLayoutCreate(&p->b, in, s.trans_a ? s.M : s.K, s.trans_a ? s.K : s.M, s.lda), "layout B");
  must(cublasLtMatrixLayoutCreate(&p->c, s.out_bf16 ? CUDA_R_16BF : CUDA_R_32F, s.N, s.M, s.ldc), "layout C");
  cublasLtMatmulPreference_t pref = nullptr;
  must(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const std::size_t ws = kWorkspaceBytes;
  must(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
       "PREF_MAX_WORKSPACE_BYTES");
  // No in-place split-K reduction (partial sums added into the output in an
  // order the hardware picks): every algorithm chosen sums in a fixed order.
  const std::uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_INPLACE);
  must(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes),
       "PREF_REDUCTION_SCHEME_MASK");
  // Lt's A is our B and Lt's B our A (see the file comment); C and D are one.
  const std::uint32_t align[] = {static_cast<std::uint32_t>(s.align_b), static_cast<std::uint32_t>(s.align_a),
                                 static_cast<std::uint32_t>(s.align_c)};
  must(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align[0], 4), "ALIGN_A");
  must(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align[1], 4), "ALIGN_B");
  must(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align[2], 4), "ALIGN_C");
  must(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align[2], 4), "ALIGN_D");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  const bool fused = s.gelu != GemmShape::Gelu::none || s.residual;
  if (fused && (st != CUBLAS_STATUS_SUCCESS || found == 0)) p.reset();  // the caller runs it unfused
  else if (st != CUBLAS_STATUS_SUCCESS || found == 0) fail("cublasLtMatmulAlgoGetHeuristic (no algorithm)", st);
  else p->algo = result.algo;
  return plans_.emplace(s, std::move(p)).first->second.get();
}

void Matmul::gemm(GemmShape s, const float* A, const float* B, float* C, const float* bias, float alpha) {
  s.bf16 = false;
  s.out_bf16 = false;
  s.gelu = GemmShape::Gelu::none;
  s.residual = false;
  run(s, A, B, C, bias, alpha);
}

void Matmul::gemm(GemmShape s, const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, const float* bias,
                  float alpha) {
  s.bf16 = true;
  s.out_bf16 = false;
  s.gelu = GemmShape::Gelu::none;
  s.residual = false;
  run(s, A, B, C, bias, alpha);
}

void Matmul::gemm(GemmShape s, const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                  const __nv_bfloat16* bias, float alpha) {
  if (s.accumulate) {
    std::fprintf(stderr, "cublasLt: a bf16 output takes no accumulation\n");
    std::abort();
  }
  s.bf16 = true;
  s.out_bf16 = true;
  s.gelu = GemmShape::Gelu::none;
  s.residual = false;
  run(s, A, B, C, bias, alpha);
}

bool Matmul::gemm_gelu(GemmShape s, const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                       __nv_bfloat16* pre, const __nv_bfloat16* bias) {
  s.bf16 = s.out_bf16 = true;
  s.accumulate = s.residual = false;
  s.gelu = GemmShape::Gelu::forward;
  return s.ldc % 8 == 0 && run(s, A, B, C, bias, 1.0f, pre);  // cuBLASLt: the aux's ld a multiple of 8
}

bool Matmul::gemm_dgelu(GemmShape s, const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                        const __nv_bfloat16* pre) {
  s.bf16 = s.out_bf16 = true;
  s.accumulate = s.residual = s.bias = false;
  s.gelu = GemmShape::Gelu::backward;
  return s.ldc % 8 == 0 && run(s, A, B, C, nullptr, 1.0f, pre);
}

bool Matmul::gemm_residual(GemmShape s, const float* A, const float* B, float* C, const float* bias, const float* R) {
  s.bf16 = s.out_bf16 = false;
  s.accumulate = false;
  s.gelu = GemmShape::Gelu::none;
  s.residual = true;
  return run(s, A, B, C, bias, 1.0f, nullptr, R);
}

bool Matmul::gemm_residual(GemmShape s, const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, const float* bias,
                           const float* R) {
  s.bf16 = true;
  s.out_bf16 = false;
  s.accumulate = false;
  s.gelu = GemmShape::Gelu::none;
  s.residual = true;
  return run(s, A, B, C, bias, 1.0f, nullptr, R);
}

bool Matmul::run(GemmShape s, const void* A, const void* B, void* C, const void* bias, float alpha, const void* aux,
                 const void* Cin) {
  if (s.M == 0 || s.N == 0) return true;
  s.align_a = alignment(A);
  s.align_b = alignment(B);
  s.align_c = s.residual ? std::min(alignment(C), alignment(Cin)) : alignment(C);
  s.align_bias = s.bias ? alignment(bias) : 0;
  s.align_aux = aux ? alignment(aux) : 0;
  const Plan* p = plan(s);
  if (!p) return false;
  if (s.bias)
    must(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "BIAS_POINTER");
  if (aux)
    must(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux),
         "EPILOGUE_AUX_POINTER");
  const float beta = s.accumulate || s.residual ? 1.0f : 0.0f;
  const void* in = s.residual ? Cin : C;
  must(cublasLtMatmul(handle_, p->desc, &alpha, B, p->a, A, p->b, &beta, in, p->c, C, p->c, &p->algo, workspace_,
                      kWorkspaceBytes, stream_),
       "cublasLtMatmul");
  return true;
}

}  // namespace troupe::cuda
