// Every CPU kernel, through the kernel table: forward against the naive double reference, backward against
// finite differences of that reference (loss = sum(out * R) for random R).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/cpu_device.hpp"
#include "ops/cpu/cpu_kernels.hpp"
#include "common/child_death.hpp"
#include "ops/cpu/fast_math.hpp"
#include "ops/testing/reference.hpp"

namespace troupe {
namespace ref = reference;

namespace {

struct Fixture {
  CpuDevice cpu{2};
  CpuKernels k{cpu.cpu_stream().pool()};
  std::mt19937 rng{42};
  Tensor random(Shape shape, float lo = -1, float hi = 1) {
    auto t = *Tensor::empty(cpu, std::move(shape));
    ref::fill_uniform(t, rng, lo, hi);
    return t;
  }
  Tensor zeros(Shape shape) { return *Tensor::zeros(cpu, std::move(shape)); }
  void linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                       const Tensor& weight, bool accumulate) {
    k.linear_backward_input(dinp, dout, weight, accumulate);
    k.linear_backward_weight(dweight, dbias, dout, inp);
  }
};

void check_forward(const Tensor& got, const ref::Vec& want, double tol = 1e-5) {
  REQUIRE(static_cast<std::size_t>(got.numel()) == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) REQUIRE(ref::close(got.f32()[i], want[i], tol));
}

// Checks analytic gradient `got` of f with respect to x at `indices` (all if empty).
void check_gradient(const Tensor& got, ref::Vec& x, const std::function<double()>& f,
                    std::vector<std::size_t> indices = {}) {
  if (indices.empty())
    for (std::size_t i = 0; i < x.size(); ++i) indices.push_back(i);
  for (std::size_t i : indices) {
    const double fd = ref::finite_difference(f, x, i);
    INFO("element " << i);
    REQUIRE(ref::close(got.f32()[i], fd, 2e-3, 1e-2));
  }
}

std::vector<std::size_t> sample(std::size_t n, std::size_t k, std::mt19937& rng) {
  std::vector<std::size_t> out;
  std::uniform_int_distribution<std::size_t> u(0, n - 1);
  for (std::size_t i = 0; i < k; ++i) out.push_back(u(rng));
  return out;
}

}  // namespace

TEST_CASE("layernorm forward and backward", "[ops][layernorm]") {
  Fixture fx;
  const int N = 7, C = 19;
  auto x = fx.random({N, C}), w = fx.random({C}), b = fx.random({C});
  auto y = fx.zeros({N, C}), mean = fx.zeros({N}), rstd = fx.zeros({N});
  fx.k.layernorm_forward(y, mean, rstd, x, w, b);
  ref::Vec X = ref::to_vec(x), W = ref::to_vec(w), Bv = ref::to_vec(b);
  check_forward(y, ref::layernorm(X, W, Bv, N, C));

  auto R = fx.random({N, C});
  ref::Vec Rv = ref::to_vec(R);
  auto dx = fx.zeros({N, C}), dw = fx.zeros({C}), db = fx.zeros({C});
  fx.k.layernorm_backward(dx, dw, db, R, x, w, mean, rstd);
  auto f = [&] { return ref::dot(ref::layernorm(X, W, Bv, N, C), Rv); };
  check_gradient(dx, X, f);
  check_gradient(dw, W, f);
  check_gradient(db, Bv, f);
}

TEST_CASE("linear forward and backward, overwriting or accumulating dinp", "[ops][linear]") {
  Fixture fx;
  const int N = 5, C = 7, OC = 11;
  auto x = fx.random({N, C}), w = fx.random({C, OC}), b = fx.random({OC});
  auto y = fx.zeros({N, OC});
  fx.k.linear_forward(y, x, w, b);
  ref::Vec X = ref::to_vec(x), W = ref::to_vec(w), Bv = ref::to_vec(b);
  check_forward(y, ref::linear(X, W, Bv, N, C, OC));

  auto R = fx.random({N, OC});
  ref::Vec Rv = ref::to_vec(R);
  auto dx = fx.random({N, C}), dw = fx.zeros({C, OC}), db = fx.zeros({OC});
  fx.linear_backward(dx, dw, db, R, x, w, false);
  auto f = [&] { return ref::dot(ref::linear(X, W, Bv, N, C, OC), Rv); };
  check_gradient(dx, X, f);
  check_gradient(dw, W, f);
  check_gradient(db, Bv, f);

  SECTION("accumulate adds to what dinp held") {
    auto before = ref::to_vec(dx);
    fx.linear_backward(dx, dw, db, R, x, w, true);
    for (int i = 0; i < N * C; ++i) REQUIRE(dx.f32()[i] == Approx(2 * before[static_cast<std::size_t>(i)]).margin(1e-5));
  }
}

TEST_CASE("a kernel given shapes that do not fit stops the process, naming the op and the shapes", "[ops][checks]") {
  Fixture fx;
  auto x = fx.random({5, 7}), w = fx.random({8, 11}), y = fx.zeros({5, 11});
  auto end = testing::run_in_child([&] { fx.k.linear_forward(y, x, w, Tensor{}); });
  CHECK(end.aborted);
  CHECK(end.err == "kernel linear_forward: inp [5, 7]: last dimension must be 8\n");
  auto tokens = fx.zeros({2, 3});  // f32, not i32 token ids
  auto out = fx.zeros({2, 3, 4}), wte = fx.random({9, 4}), wpe = fx.random({3, 4});
  end = testing::run_in_child([&] { fx.k.encoder_forward(out, tokens, wte, wpe); });
  CHECK(end.aborted);
  CHECK(end.err == "kernel encoder_forward: token ids must be i32, got F32\n");
}

TEST_CASE("sums_into gives each tensor's sum_into total at its index, and refuses indices past the totals",
          "[ops][sums]") {
  Fixture fx;
  const std::vector<Tensor> xs{fx.random({7}), fx.random({0}), fx.random({3, 50}), fx.random({1000})};
  auto many = *Tensor::zeros(fx.cpu, {6}, DType::f64), one = *Tensor::zeros(fx.cpu, {1}, DType::f64);
  fx.k.sums_into(many, 1, xs, /*squares=*/true);
  CHECK(many.data<double>()[0] == 0.0);
  CHECK(many.data<double>()[5] == 0.0);
  for (std::size_t k = 0; k < xs.size(); ++k) {
    fx.k.sum_into(one, 0, xs[k], true);
    CHECK(many.data<double>()[k + 1] == one.data<double>()[0]);
  }
  CHECK(many.data<double>()[3] > 0.0);
  auto end = testing::run_in_child([&] { fx.k.sums_into(many, 3, xs); });
  CHECK(end.aborted);
  CHECK(end.err == "kernel sums_into: indices 3 to 6 outside totals [6]\n");
}

TEST_CASE("gelu forward and backward", "[ops][gelu]") {
  Fixture fx;
  auto x = fx.random({257}, -5, 5);
  auto y = fx.zeros({257});
  fx.k.gelu_forward(y, x);
  ref::Vec X = ref::to_vec(x);
  check_forward(y, ref::gelu(X), 1e-5);
  auto R = fx.random({257});
  ref::Vec Rv = ref::to_vec(R);
  auto dx = fx.zeros({257});
  fx.k.gelu_backward(dx, x, R);
  check_gradient(dx, X, [&] { return ref::dot(ref::gelu(X), Rv); });
}

TEST_CASE("causal attention, full and sliding-window, forward and backward", "[ops][attention]") {
  Fixture fx;
  const int B = 2, T = 70, C = 12, NH = 3;  // T > 64 crosses a row block
  for (int window : {0, 5, 64}) {
    INFO("window " << window);
    auto qkv = fx.random({B, T, 3 * C});
    auto y = fx.zeros({B, T, C}), att = fx.zeros({B, NH, T, T});
    fx.k.attention_forward(y, att, qkv, NH, window);
    ref::Vec Q = ref::to_vec(qkv);
    check_forward(y, ref::attention(Q, B, T, C, NH, window));

    auto R = fx.random({B, T, C});
    ref::Vec Rv = ref::to_vec(R);
    auto dqkv = fx.random({B, T, 3 * C});  // garbage: backward must overwrite
    fx.k.attention_backward(dqkv, R, qkv, y, att, NH, window);
    check_gradient(dqkv, Q, [&] { return ref::dot(ref::attention(Q, B, T, C, NH, window), Rv); },
                   sample(Q.size(), 150, fx.rng));
  }
}

TEST_CASE("a window of 1 makes each query attend only to itself", "[ops][attention]") {
  Fixture fx;
  const int B = 1, T = 9, C = 4, NH = 2;
  auto qkv = fx.random({B, T, 3 * C});
  auto y = fx.zeros({B, T, C}), att = fx.zeros({B, NH, T, T});
  fx.k.attention_forward(y, att, qkv, NH, 1);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) CHECK(y.f32()[t * C + c] == Approx(qkv.f32()[t * 3 * C + 2 * C + c]));
}

TEST_CASE("cross-entropy loss and its fused gradient", "[ops][cross_entropy]") {
  Fixture fx;
  const int N = 6, V = 13;
  auto z = fx.random({N, V}, -3, 3);
  auto tgt = *Tensor::empty(fx.cpu, {N}, DType::i32);
  std::vector<int> T(N);
  for (int i = 0; i < N; ++i) T[static_cast<std::size_t>(i)] = tgt.data<std::int32_t>()[i] = (i * 5) % V;
  ref::Vec Z = ref::to_vec(z);
  auto losses = fx.zeros({N});
  const float scale = 0.25f;
  fx.k.cross_entropy_forward_backward(losses, z, tgt, scale);
  check_forward(losses, ref::cross_entropy(Z, T, N, V));
  // z now holds d(scale * sum losses)/dz.
  check_gradient(z, Z, [&] {
    auto l = ref::cross_entropy(Z, T, N, V);
    double s = 0;
    for (double v : l) s += v;
    return scale * s;
  });
}

TEST_CASE("token and position embedding forward and backward", "[ops][encoder]") {
  Fixture fx;
  const int B = 2, T = 5, C = 4, V = 7;
  auto tok = *Tensor::empty(fx.cpu, {B, T}, DType::i32);
  for (int i = 0; i < B * T; ++i) tok.data<std::int32_t>()[i] = (i * 3) % V;  // token 0 repeats
  auto wte = fx.random({V, C}), wpe = fx.random({T, C});
  auto y = fx.zeros({B, T, C});
  fx.k.encoder_forward(y, tok, wte, wpe);
  for (int bt = 0; bt < B * T; ++bt)
    for (int c = 0; c < C; ++c)
      REQUIRE(y.f32()[bt * C + c] ==
              Approx(wte.f32()[tok.data<std::int32_t>()[bt] * C + c] + wpe.f32()[(bt % T) * C + c]));
  auto R = fx.random({B, T, C});
  auto dwte = fx.zeros({V, C}), dwpe = fx.zeros({T, C});
  fx.k.encoder_backward(dwte, dwpe, R, tok);
  ref::Vec E = ref::to_vec(wte), P = ref::to_vec(wpe), Rv = ref::to_vec(R);
  auto f = [&] {
    double s = 0;
    for (int bt = 0; bt < B * T; ++bt)
      for (int c = 0; c < C; ++c)
        s += (E[tok.data<std::int32_t>()[bt] * C + c] + P[(bt % T) * C + c]) * Rv[bt * C + c];
    return s;
  };
  check_gradient(dwte, E, f);
  check_gradient(dwpe, P, f);
}

TEST_CASE("residual adds two or three tensors, in place", "[ops][residual]") {
  Fixture fx;
  auto a = fx.random({100}), b = fx.random({100}), c = fx.random({100});
  auto out = fx.zeros({100});
  fx.k.residual3_forward(out, a, b, c);
  for (int i = 0; i < 100; ++i) REQUIRE(out.f32()[i] == Approx(a.f32()[i] + b.f32()[i] + c.f32()[i]));
  auto a0 = ref::to_vec(a);
  fx.k.residual_forward(a, a, b);
  for (int i = 0; i < 100; ++i) REQUIRE(a.f32()[i] == Approx(a0[static_cast<std::size_t>(i)] + b.f32()[i]));
}

TEST_CASE("round_to_bf16 rounds to nearest with ties to even, keeps NaN a NaN and overflows to infinity",
          "[ops][bf16]") {
  Fixture fx;
  const std::vector<std::pair<float, std::uint16_t>> cases = {
      {1.0f, 0x3f80},
      {1.0f + 0x1p-8f, 0x3f80},              // halfway to 1 + 2^-7: to the even 1
      {1.0f + 0x3p-8f, 0x3f82},              // halfway between 0x3f81 and 0x3f82: to the even
      {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81},   // past halfway: up
      {-2.5f, 0xc020},
      {std::numeric_limits<float>::infinity(), 0x7f80},
      {std::numeric_limits<float>::max(), 0x7f80},  // rounds past bf16's largest
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
  };
  auto src = fx.zeros({static_cast<std::int64_t>(cases.size()) + 1});
  for (std::size_t i = 0; i < cases.size(); ++i) src.f32()[i] = cases[i].first;
  src.f32()[cases.size()] = std::numeric_limits<float>::quiet_NaN();
  auto dst = *Tensor::zeros(fx.cpu, src.shape(), DType::bf16);
  fx.k.round_to_bf16(dst, src);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i);
    CHECK(dst.data<BFloat16>()[i].bits == cases[i].second);
  }
  CHECK(std::isnan(from_bf16(dst.data<BFloat16>()[cases.size()])));
  // Many elements, over the pool's chunks: each as the scalar rounding gives it.
  auto big = fx.random({20011}, -1e3f, 1e3f);
  auto big16 = *Tensor::zeros(fx.cpu, big.shape(), DType::bf16);
  fx.k.round_to_bf16(big16, big);
  for (std::int64_t i = 0; i < big.numel(); ++i) REQUIRE(big16.data<BFloat16>()[i].bits == to_bf16(big.f32()[i]).bits);
}

}  // namespace troupe

namespace troupe {

TEST_CASE("fast_exp and fast_tanh agree with libm to float precision", "[ops][fast_math]") {
  for (float x = -80.0f; x <= 80.0f; x += 0.01f) {
    const double want = std::exp(static_cast<double>(x));
    REQUIRE(std::abs(fast_exp(x) - want) <= 3e-7 * want);
  }
  for (float y = -12.0f; y <= 12.0f; y += 0.001f) REQUIRE(std::abs(fast_tanh(y) - std::tanh(double(y))) <= 3e-7);
  CHECK(fast_exp(-1000.0f) > 0.0f);  // clamped: never zero or denormal
  CHECK(std::isfinite(fast_exp(1000.0f)));
}

}  // namespace troupe
