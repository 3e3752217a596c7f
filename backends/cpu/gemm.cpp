// sgemm: partition the output over pool threads; each part is one cblas call.
#include "backends/cpu/gemm.hpp"

#include <cblas.h>

#include <algorithm>

namespace troupe {

void gemm_init() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

const char* gemm_backend_name() { return openblas_get_corename(); }

void sgemm_serial(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                  int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void sgemm(ThreadPool& pool, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
           const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  const int parts = pool.size();
  const double flops = 2.0 * M * N * K;
  if (parts == 1 || flops < 2e6) {
    sgemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Split the longer output dimension in multiples of 16 so each part keeps
  // whole register tiles.
  const bool split_rows = M >= N;
  const int extent = split_rows ? M : N;
  const int unit = 16;
  const int units = (extent + unit - 1) / unit;
  const int used = std::min(parts, units);
  pool.run(used, [&](int p) {
    int b = std::min(extent, units * p / used * unit);
    int e = std::min(extent, units * (p + 1) / used * unit);
    if (b >= e) return;
    if (split_rows) {
      const float* a = trans_a ? A + b : A + static_cast<long>(b) * lda;
      sgemm_serial(trans_a, trans_b, e - b, N, K, alpha, a, lda, B, ldb, beta,
                   C + static_cast<long>(b) * ldc, ldc);
    } else {
      const float* bb = trans_b ? B + static_cast<long>(b) * ldb : B + b;
      sgemm_serial(trans_a, trans_b, M, e - b, K, alpha, A, lda, bb, ldb, beta, C + b, ldc);
    }
  });
}

}  // namespace troupe

#include <chrono>
#include <vector>

namespace troupe {

double measure_sgemm_peak(ThreadPool& pool, int n, int reps) {
  gemm_init();
  const auto elems = static_cast<std::size_t>(n) * n;
  std::vector<float> a(elems, 0.5f), b(elems, 0.25f), c(elems, 0.0f);
  sgemm(pool, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);  // warm-up
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    sgemm(pool, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(2.0 * n * n * static_cast<double>(n) / s / 1e9);
  }
  // The best repetition: a peak, which on shared cores the others underestimate.
  return *std::max_element(rates.begin(), rates.end());
}

}  // namespace troupe
