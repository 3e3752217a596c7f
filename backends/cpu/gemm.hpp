// Row-major single-precision GEMM on the CPU, split over a ThreadPool with each
// part run by single-threaded OpenBLAS (so BLAS threads never spin against ours).
#pragma once

#include "backends/cpu/thread_pool.hpp"

namespace troupe {

/// Sets the BLAS library's own threading to one thread; idempotent.
void gemm_init();

/// Name of the BLAS core in use (e.g. "SkylakeX"), for benchmark reports.
const char* gemm_backend_name();

/// C (M x N) = alpha * op(A) (M x K) * op(B) (K x N) + beta * C, row-major,
/// op(X) = X^T when trans_x. Leading dimensions are row strides in elements.
void sgemm(ThreadPool& pool, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
           const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc);

/// The same product on the calling thread only (for callers already parallel).
void sgemm_serial(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                  int lda, const float* B, int ldb, float beta, float* C, int ldc);

}  // namespace troupe

namespace troupe {

/// The machine's sgemm rate through sgemm() on `pool`, in GFLOP/s: the best
/// of `reps` square products of size n (the MFU denominator of benchmarks).
double measure_sgemm_peak(ThreadPool& pool, int n = 1536, int reps = 5);

}  // namespace troupe
