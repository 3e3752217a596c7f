#include "backends/cpu/gemm.hpp"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

namespace troupe {
namespace {

// Naive double-precision reference of the row-major product.
std::vector<double> reference(bool ta, bool tb, int M, int N, int K, const std::vector<float>& A,
                              int lda, const std::vector<float>& B, int ldb) {
  std::vector<double> C(static_cast<std::size_t>(M) * N);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) {
        double a = ta ? A[static_cast<std::size_t>(k) * lda + i] : A[static_cast<std::size_t>(i) * lda + k];
        double b = tb ? B[static_cast<std::size_t>(j) * ldb + k] : B[static_cast<std::size_t>(k) * ldb + j];
        s += a * b;
      }
      C[static_cast<std::size_t>(i) * N + j] = s;
    }
  return C;
}

}  // namespace

TEST_CASE("sgemm matches a naive product for every transpose and split", "[gemm]") {
  gemm_init();
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (auto [M, N, K] : {std::tuple{1, 1, 1}, {37, 300, 65}, {300, 37, 129}, {130, 130, 130}}) {
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1;
          std::vector<float> A(static_cast<std::size_t>(ta ? K : M) * lda), B(static_cast<std::size_t>(tb ? N : K) * ldb);
          for (auto& x : A) x = u(rng);
          for (auto& x : B) x = u(rng);
          std::vector<float> C(static_cast<std::size_t>(M) * N, 1.0f);
          sgemm(pool, ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 2.0f, C.data(), N);
          auto R = reference(ta, tb, M, N, K, A, lda, B, ldb);
          for (std::size_t i = 0; i < C.size(); ++i) REQUIRE(C[i] == Approx(0.5 * R[i] + 2.0).margin(1e-4));
        }
    }
  }
}

}  // namespace troupe
