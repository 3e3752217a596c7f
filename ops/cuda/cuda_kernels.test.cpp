// Every CUDA kernel, forward and backward, against the CPU kernel on the same
// inputs, odd sizes and sliding windows included. fp32 tolerance: 1e-5 of
// each element's magnitude, or of the tensor's RMS where the element is
// smaller: a sum that cancels to near zero keeps the rounding of its terms,
// which another summation order moves by a few ulp of them (measured on an
// H100: 4.7e-7 on a tied-head gradient element of 7.1e-5 in a tensor of RMS
// 0.42, 2.5e-7 on an attention gradient element of 8e-3, RMS 0.08).
// Backward kernels run twice on the GPU and must give the same bits.
#include <cmath>
#include <cstring>
#include <functional>

#include "ops/cuda/cuda_test_support.hpp"
#include "ops/testing/reference.hpp"

namespace troupe {
namespace {

using testing::require_close;
using testing::uniform;

// The same values on the CPU and the GPU.
struct Pair {
  Tensor cpu, gpu;
};

struct Both {
  explicit Both(Precision precision = Precision::fp32) : gpu(testing::gpu_or_skip(precision)) {}
  testing::CpuContext cpu{2};
  std::unique_ptr<ComputeDevice> gpu;
  std::mt19937 rng{7};
  const ExecContext& g() const { return gpu->context(); }

  Pair of(const Shape& shape, const std::vector<float>& v) {
    auto c = *Tensor::empty(cpu.device, shape);
    std::copy(v.begin(), v.end(), c.f32());
    return {c, testing::tensor_of(g(), shape, v)};
  }
  Pair random(const Shape& shape, float lo = -1, float hi = 1) {
    return of(shape, uniform(static_cast<std::size_t>(shape_numel(shape)), rng, lo, hi));
  }
  Pair ids(const Shape& shape, const std::vector<std::int32_t>& v) {
    auto c = *Tensor::empty(cpu.device, shape, DType::i32);
    std::copy(v.begin(), v.end(), c.data<std::int32_t>());
    return {c, testing::ids_of(g(), shape, v)};
  }
  std::vector<float> host(const Tensor& cpu_tensor) const {
    return std::vector<float>(cpu_tensor.f32(), cpu_tensor.f32() + cpu_tensor.numel());
  }
  std::vector<float> host_gpu(const Tensor& t) const { return testing::values_of(g(), t); }
  // The GPU's values within tolerance of the CPU's.
  void agree(const Pair& p, double rel = 1e-5) const {
    const auto want = host(p.cpu);
    const double floor = reference::rms(want);
    require_close(host_gpu(p.gpu), want, rel, std::max(floor, 1e-12));
  }
};

}  // namespace

TEST_CASE("CUDA layernorm forward and backward equal the CPU's", "[cuda][kernels][racecheck]") {
  Both b;
  // The forward with the row in registers up to C = 1024 (19, 768, 1024),
  // read from memory past it. The backward in one kernel: C = 19, 1024; 768
  // and 1600, whose per-warp column sums take 48 KB and 100 KB of shared
  // memory (allowed past the default 48 KB); partial last chunks of 32 rows.
  // C = 4000 (256 KB) in two kernels.
  for (auto [N, C] : {std::pair{37, 19}, std::pair{130, 768}, std::pair{9, 1024}, std::pair{33, 1600},
                      std::pair{65, 4000}}) {
    INFO("N " << N << " C " << C);
    auto x = b.random({N, C}, -2, 2), w = b.random({C}), bias = b.random({C});
    auto y = b.random({N, C}), mean = b.random({N}), rstd = b.random({N});
    b.cpu.kernels.layernorm_forward(y.cpu, mean.cpu, rstd.cpu, x.cpu, w.cpu, bias.cpu);
    b.g().kernels.layernorm_forward(y.gpu, mean.gpu, rstd.gpu, x.gpu, w.gpu, bias.gpu);
    b.agree(y);
    b.agree(mean);
    b.agree(rstd);
    auto dy = b.random({N, C}), dx = b.random({N, C}), dw = b.random({C}), db = b.random({C});
    b.cpu.kernels.layernorm_backward(dx.cpu, dw.cpu, db.cpu, dy.cpu, x.cpu, w.cpu, mean.cpu, rstd.cpu);
    const auto dw0 = b.host_gpu(dw.gpu), dx0 = b.host_gpu(dx.gpu), db0 = b.host_gpu(db.gpu);
    b.g().kernels.layernorm_backward(dx.gpu, dw.gpu, db.gpu, dy.gpu, x.gpu, w.gpu, mean.gpu, rstd.gpu);
    b.agree(dx);
    b.agree(dw);
    b.agree(db);
    // Replayed from the same state: the same bits.
    const auto dw1 = b.host_gpu(dw.gpu);
    auto again = b.of({C}, dw0);
    auto dx_again = b.of({N, C}, dx0);
    auto db_again = b.of({C}, db0);
    b.g().kernels.layernorm_backward(dx_again.gpu, again.gpu, db_again.gpu, dy.gpu, x.gpu, w.gpu, mean.gpu, rstd.gpu);
    CHECK(b.host_gpu(again.gpu) == dw1);
  }
}

TEST_CASE("CUDA linear layers (cuBLASLt, bias epilogue) equal the CPU's", "[cuda][kernels]") {
  Both b;
  const int N = 33, C = 17, OC = 29;
  auto x = b.random({N, C}), w = b.random({C, OC}), bias = b.random({OC}), wider = b.random({OC + 1});
  // A bias view one float in (as parameters lie in one flat buffer): too
  // misaligned for cuBLASLt's bias epilogue, added before the product instead.
  const Pair misaligned{wider.cpu.view(1, {OC}), wider.gpu.view(1, {OC})};
  for (const Pair* with : std::initializer_list<const Pair*>{&bias, &misaligned, nullptr}) {
    INFO("bias " << (with == &bias ? "aligned" : with ? "misaligned" : "none"));
    auto y = b.random({N, OC});
    b.cpu.kernels.linear_forward(y.cpu, x.cpu, w.cpu, with ? with->cpu : Tensor{});
    b.g().kernels.linear_forward(y.gpu, x.gpu, w.gpu, with ? with->gpu : Tensor{});
    b.agree(y);
  }
  auto dy = b.random({N, OC});
  for (bool accumulate : {false, true}) {
    INFO("accumulate " << accumulate);
    auto dx = b.random({N, C});
    b.cpu.kernels.linear_backward_input(dx.cpu, dy.cpu, w.cpu, accumulate);
    b.g().kernels.linear_backward_input(dx.gpu, dy.gpu, w.gpu, accumulate);
    b.agree(dx);
  }
  auto dw = b.random({C, OC}), db = b.random({OC});
  b.cpu.kernels.linear_backward_weight(dw.cpu, db.cpu, dy.cpu, x.cpu);
  b.g().kernels.linear_backward_weight(dw.gpu, db.gpu, dy.gpu, x.gpu);
  b.agree(dw);
  b.agree(db);
}

TEST_CASE("CUDA tied LM head equals the CPU's", "[cuda][kernels]") {
  Both b;
  const int N = 33, C = 24, V = 57;
  auto x = b.random({N, C}), wte = b.random({V, C}), logits = b.random({N, V});
  b.cpu.kernels.tied_head_forward(logits.cpu, x.cpu, wte.cpu);
  b.g().kernels.tied_head_forward(logits.gpu, x.gpu, wte.gpu);
  b.agree(logits);
  auto dlogits = b.random({N, V}), dx = b.random({N, C}), dwte = b.random({V, C});
  b.cpu.kernels.tied_head_backward_input(dx.cpu, dlogits.cpu, wte.cpu);
  b.g().kernels.tied_head_backward_input(dx.gpu, dlogits.gpu, wte.gpu);
  b.agree(dx);
  b.cpu.kernels.tied_head_backward_weight(dwte.cpu, dlogits.cpu, x.cpu);
  b.g().kernels.tied_head_backward_weight(dwte.gpu, dlogits.gpu, x.gpu);
  b.agree(dwte);
}

namespace {

// The CPU's copy of p with every value's magnitude: products over it give
// sum_k |a_k| |b_k| per element, the scale of a GEMM's rounding error.
Tensor magnitudes(const Both& b, const Pair& p) {
  auto t = *Tensor::empty(b.cpu.device, p.cpu.shape());
  for (std::int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std::abs(p.cpu.f32()[i]);
  return t;
}

// A bf16 GEMM's result against the CPU's fp32 one. Each input rounded to bf16
// (8 significant bits, round to nearest: a relative error of at most 2^-8)
// makes each product's relative error at most 2^-7 + 2^-16; fp32 accumulation
// over K terms adds at most K 2^-24 on either side. So per element
// |gpu - cpu| <= (2^-7 + 2^-16 + 2 K 2^-24) sum_k |a_k b_k| (`bound`), plus
// the fp32 rounding of an accumulated or added value (2^-23 |cpu|).
// A result stored in bf16 (out_bf16) is rounded once more: 2^-8 of its value (8 significant bits, to nearest),
// which is within the bound above of the CPU's.
void within_bf16_rounding(const Both& b, const Pair& got, const Tensor& bound, std::int64_t K, bool out_bf16 = false) {
  const auto gpu = b.host_gpu(got.gpu), cpu = b.host(got.cpu), scale = b.host(bound);
  const double per_product = std::ldexp(1.0, -7) + std::ldexp(1.0, -16) + 2.0 * K * std::ldexp(1.0, -24);
  const double out = out_bf16 ? std::ldexp(1.0, -8) : 0.0;
  double worst = 0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const double limit =
        (1 + out) * per_product * scale[i] + (out + std::ldexp(1.0, -23)) * std::abs(cpu[i]) + 1e-30;
    INFO("element " << i << ": gpu " << gpu[i] << ", cpu " << cpu[i] << ", bound " << limit);
    REQUIRE(std::abs(static_cast<double>(gpu[i]) - cpu[i]) <= limit);
    worst = std::max(worst, std::abs(static_cast<double>(gpu[i]) - cpu[i]) / std::max(limit, 1e-30));
  }
  // And not fp32 by mistake: rounded inputs move some results by more than fp32 would.
  CHECK(worst > 1e-3);
}

}  // namespace

TEST_CASE("CUDA bf16 GEMMs (linear, tied head) are within bf16 rounding of the CPU's fp32", "[cuda][kernels][bf16]") {
  Both b(Precision::bf16);
  const int N = 70, C = 96, OC = 136, V = 57;
  auto x = b.random({N, C}), w = b.random({C, OC}), bias = b.random({OC});
  const auto ax = magnitudes(b, x), aw = magnitudes(b, w);
  auto bound = [&](const Shape& shape) { return *Tensor::zeros(b.cpu.device, shape); };

  auto y = b.random({N, OC});
  b.cpu.kernels.linear_forward(y.cpu, x.cpu, w.cpu, bias.cpu);
  b.g().kernels.linear_forward(y.gpu, x.gpu, w.gpu, bias.gpu);
  auto y_bound = bound({N, OC});
  b.cpu.kernels.linear_forward(y_bound, ax, aw, Tensor{});
  within_bf16_rounding(b, y, y_bound, C);
  // Into a bf16 output (bf16 activations), with a bias that bf16 holds
  // exactly (a bf16 output's bias is rounded to bf16, as autocast's is).
  std::vector<float> bias_values = b.host(bias.cpu);
  for (float& v : bias_values) v = from_bf16(to_bf16(v));
  auto bias16 = b.of({OC}, bias_values);
  Pair y16{*Tensor::empty(b.cpu.device, {N, OC}), *Tensor::empty(b.g().device, {N, OC}, DType::bf16)};
  b.cpu.kernels.linear_forward(y16.cpu, x.cpu, w.cpu, bias16.cpu);
  b.g().kernels.linear_forward(y16.gpu, x.gpu, w.gpu, bias16.gpu);
  within_bf16_rounding(b, y16, y_bound, C, true);

  auto dy = b.random({N, OC}), dx = b.random({N, C});
  const auto ady = magnitudes(b, dy);
  b.cpu.kernels.linear_backward_input(dx.cpu, dy.cpu, w.cpu, true);
  b.g().kernels.linear_backward_input(dx.gpu, dy.gpu, w.gpu, true);
  auto dx_bound = bound({N, C});
  b.cpu.kernels.linear_backward_input(dx_bound, ady, aw, false);
  within_bf16_rounding(b, dx, dx_bound, OC);

  auto dw = b.random({C, OC}), db = b.random({OC});
  b.cpu.kernels.linear_backward_weight(dw.cpu, db.cpu, dy.cpu, x.cpu);
  b.g().kernels.linear_backward_weight(dw.gpu, db.gpu, dy.gpu, x.gpu);
  auto dw_bound = bound({C, OC}), unused_db = bound({OC});
  b.cpu.kernels.linear_backward_weight(dw_bound, unused_db, ady, ax);
  within_bf16_rounding(b, dw, dw_bound, N);
  b.agree(db);  // the bias gradient is a sum in fp32, not a GEMM

  // A bf16 output gradient (the gradients that only feed GEMMs): read as it
  // is; the bias gradient sums its values in fp32 as the CPU sums the same.
  auto dy16 = testing::tensor_of(b.g(), {N, OC}, b.host(dy.cpu), DType::bf16);
  const auto dy16_values = b.host_gpu(dy16);
  auto dy_rounded = b.of({N, OC}, dy16_values);
  auto dw16 = b.random({C, OC}), db16 = b.random({OC});
  b.cpu.kernels.linear_backward_weight(dw16.cpu, db16.cpu, dy_rounded.cpu, x.cpu);
  b.g().kernels.linear_backward_weight(dw16.gpu, db16.gpu, dy16, x.gpu);
  auto dw16_bound = bound({C, OC}), unused_db16 = bound({OC});
  b.cpu.kernels.linear_backward_weight(dw16_bound, unused_db16, magnitudes(b, dy_rounded), ax);
  within_bf16_rounding(b, dw16, dw16_bound, N);
  b.agree(db16);

  // Both halves in one call (one rounded copy of dy for both GEMMs) give the
  // bits of the two calls.
  auto zeros = [&](const Shape& shape) { return *Tensor::zeros(b.g().device, shape); };
  Tensor dx1 = zeros({N, C}), dw1 = zeros({C, OC}), db1 = zeros({OC});
  Tensor dx2 = zeros({N, C}), dw2 = zeros({C, OC}), db2 = zeros({OC});
  b.g().kernels.linear_backward_input(dx1, dy.gpu, w.gpu, false);
  b.g().kernels.linear_backward_weight(dw1, db1, dy.gpu, x.gpu);
  b.g().kernels.linear_backward(dx2, dw2, db2, dy.gpu, x.gpu, w.gpu, false);
  CHECK(b.host_gpu(dx1) == b.host_gpu(dx2));
  CHECK(b.host_gpu(dw1) == b.host_gpu(dw2));
  CHECK(b.host_gpu(db1) == b.host_gpu(db2));

  auto wte = b.random({V, C}), logits = b.random({N, V});
  const auto awte = magnitudes(b, wte);
  b.cpu.kernels.tied_head_forward(logits.cpu, x.cpu, wte.cpu);
  b.g().kernels.tied_head_forward(logits.gpu, x.gpu, wte.gpu);
  auto logits_bound = bound({N, V});
  b.cpu.kernels.tied_head_forward(logits_bound, ax, awte);
  within_bf16_rounding(b, logits, logits_bound, C);

  auto dlogits = b.random({N, V}), hx = b.random({N, C}), dwte = b.random({V, C});
  const auto adl = magnitudes(b, dlogits);
  b.cpu.kernels.tied_head_backward_input(hx.cpu, dlogits.cpu, wte.cpu);
  b.g().kernels.tied_head_backward_input(hx.gpu, dlogits.gpu, wte.gpu);
  auto hx_bound = bound({N, C});
  b.cpu.kernels.tied_head_backward_input(hx_bound, adl, awte);
  within_bf16_rounding(b, hx, hx_bound, V);
  b.cpu.kernels.tied_head_backward_weight(dwte.cpu, dlogits.cpu, x.cpu);
  b.g().kernels.tied_head_backward_weight(dwte.gpu, dlogits.gpu, x.gpu);
  auto dwte_bound = bound({V, C});
  b.cpu.kernels.tied_head_backward_weight(dwte_bound, adl, ax);
  within_bf16_rounding(b, dwte, dwte_bound, N);

  // A replayed bf16 GEMM gives the same bits.
  const auto first = b.host_gpu(y.gpu);
  b.g().kernels.linear_forward(y.gpu, x.gpu, w.gpu, bias.gpu);
  CHECK(b.host_gpu(y.gpu) == first);
}

// A bf16 activation against the CPU's fp32 one: the GPU's fp32 value rounded
// once (at most 2^-8 of it, 8 significant bits to nearest) beside fp32's own
// differences (1e-5 of the tensor's RMS, as Both::agree allows). Returns the
// largest error as a share of its bound.
double rounded_once(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  const double rms = reference::rms(want);
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double limit = std::ldexp(1.0, -8) * (std::abs(want[i]) + 1e-5 * rms) + 1e-5 * rms + 1e-30;
    INFO("element " << i << ": got " << got[i] << ", want " << want[i] << ", bound " << limit);
    REQUIRE(std::abs(static_cast<double>(got[i]) - want[i]) <= limit);
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) / limit);
  }
  return worst;
}

// In bf16 the GEMMs' inputs are stored in bf16 by the kernels that make them:
// LayerNorm and GELU round their fp32 results once as they write them (the
// statistics stay fp32).
TEST_CASE("CUDA LayerNorm and GELU write bf16 activations rounded once", "[cuda][kernels][bf16]") {
  Both b(Precision::bf16);
  const int N = 37, C = 200;
  auto x = b.random({N, C}, -2, 2), w = b.random({C}), bias = b.random({C});
  Pair y{*Tensor::empty(b.cpu.device, {N, C}), *Tensor::empty(b.g().device, {N, C}, DType::bf16)};
  auto mean = b.random({N}), rstd = b.random({N});
  b.cpu.kernels.layernorm_forward(y.cpu, mean.cpu, rstd.cpu, x.cpu, w.cpu, bias.cpu);
  b.g().kernels.layernorm_forward(y.gpu, mean.gpu, rstd.gpu, x.gpu, w.gpu, bias.gpu);
  CHECK(rounded_once(b.host_gpu(y.gpu), b.host(y.cpu)) > 0.05);
  b.agree(mean);
  b.agree(rstd);
  auto h = b.random({N, C}, -5, 5);
  Pair g{*Tensor::empty(b.cpu.device, {N, C}), *Tensor::empty(b.g().device, {N, C}, DType::bf16)};
  b.cpu.kernels.gelu_forward(g.cpu, h.cpu);
  b.g().kernels.gelu_forward(g.gpu, h.gpu);
  CHECK(rounded_once(b.host_gpu(g.gpu), b.host(g.cpu)) > 0.05);
  // GELU's backward on bf16 gradients (in place, as a layer runs it): the
  // CPU's on the same values, rounded once.
  auto dh = *Tensor::empty(b.cpu.device, {N, C});
  auto dh16 = testing::tensor_of(b.g(), {N, C}, uniform(static_cast<std::size_t>(N * C), b.rng), DType::bf16);
  const auto dh_values = b.host_gpu(dh16);
  std::copy(dh_values.begin(), dh_values.end(), dh.f32());
  b.cpu.kernels.gelu_backward(dh, h.cpu, dh);
  b.g().kernels.gelu_backward(dh16, h.gpu, dh16);
  CHECK(rounded_once(b.host_gpu(dh16), b.host(dh)) > 0.05);
  // From a bf16 input (the MLP's pre-activation in bf16): the CPU's on the same values.
  auto h16 = testing::tensor_of(b.g(), {N, C}, b.host(h.cpu), DType::bf16);
  const auto h16_values = b.host_gpu(h16);
  std::copy(h16_values.begin(), h16_values.end(), h.cpu.f32());
  b.cpu.kernels.gelu_forward(g.cpu, h.cpu);
  b.g().kernels.gelu_forward(g.gpu, h16);
  CHECK(rounded_once(b.host_gpu(g.gpu), b.host(g.cpu)) > 0.05);
  std::copy(dh_values.begin(), dh_values.end(), dh.f32());
  auto dh16b = testing::tensor_of(b.g(), {N, C}, dh_values, DType::bf16);
  b.cpu.kernels.gelu_backward(dh, h.cpu, dh);
  b.g().kernels.gelu_backward(dh16b, h16, dh16b);
  CHECK(rounded_once(b.host_gpu(dh16b), b.host(dh)) > 0.05);
}

// In bf16 the logits are bf16: the tied head rounds its fp32 sums into them,
// the cross-entropy reads them and writes their gradient over them in bf16
// (the loss and its sums in fp32), and the head's backward GEMMs read that
// gradient as it is.
TEST_CASE("CUDA bf16 logits: tied head, cross-entropy and the head's backward", "[cuda][kernels][bf16]") {
  Both b(Precision::bf16);
  const int N = 37, C = 64, V = 1000;  // V a multiple of 8 (16-byte rows) ...
  auto x = b.random({N, C}), wte = b.random({V, C});
  const auto ax = magnitudes(b, x), awte = magnitudes(b, wte);
  Pair logits{*Tensor::empty(b.cpu.device, {N, V}), *Tensor::empty(b.g().device, {N, V}, DType::bf16)};
  b.cpu.kernels.tied_head_forward(logits.cpu, x.cpu, wte.cpu);
  b.g().kernels.tied_head_forward(logits.gpu, x.gpu, wte.gpu);
  auto logits_bound = *Tensor::zeros(b.cpu.device, {N, V});
  b.cpu.kernels.tied_head_forward(logits_bound, ax, awte);
  within_bf16_rounding(b, logits, logits_bound, C, true);

  std::vector<std::int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[static_cast<std::size_t>(i)] = (i * 337) % V;
  auto targets = b.ids({N}, tgt);
  // The CPU's cross-entropy on the GPU's bf16 logits, exactly.
  const auto rounded = b.host_gpu(logits.gpu);
  std::copy(rounded.begin(), rounded.end(), logits.cpu.f32());
  auto losses = b.random({N});
  const float scale = 0.5f;
  b.cpu.kernels.cross_entropy_forward_backward(losses.cpu, logits.cpu, targets.cpu, scale);
  b.g().kernels.cross_entropy_forward_backward(losses.gpu, logits.gpu, targets.gpu, scale);
  b.agree(losses);
  // The gradient rounded to bf16 once (2^-8 of it) beside fp32's own differences.
  const auto got = b.host_gpu(logits.gpu), want = b.host(logits.cpu);
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double limit = (std::ldexp(1.0, -8) + 1e-5) * std::abs(want[i]) + 1e-9;
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::abs(static_cast<double>(got[i]) - want[i]) <= limit);
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) / limit);
  }
  CHECK(worst > 0.05);  // really rounded to bf16

  // The head's backward from the bf16 gradient; the CPU's from the same values.
  std::copy(got.begin(), got.end(), logits.cpu.f32());
  const auto adl = magnitudes(b, logits);
  auto hx = b.random({N, C}), dwte = b.random({V, C});
  b.cpu.kernels.tied_head_backward_input(hx.cpu, logits.cpu, wte.cpu);
  b.g().kernels.tied_head_backward_input(hx.gpu, logits.gpu, wte.gpu);
  auto hx_bound = *Tensor::zeros(b.cpu.device, {N, C});
  b.cpu.kernels.tied_head_backward_input(hx_bound, adl, awte);
  within_bf16_rounding(b, hx, hx_bound, V);
  b.cpu.kernels.tied_head_backward_weight(dwte.cpu, logits.cpu, x.cpu);
  b.g().kernels.tied_head_backward_weight(dwte.gpu, logits.gpu, x.gpu);
  auto dwte_bound = *Tensor::zeros(b.cpu.device, {V, C});
  b.cpu.kernels.tied_head_backward_weight(dwte_bound, adl, ax);
  within_bf16_rounding(b, dwte, dwte_bound, N);
}

// ... and a vocabulary that is not (element by element, the scalar path).
TEST_CASE("CUDA bf16 cross-entropy on rows that are not 16-byte aligned", "[cuda][kernels][bf16]") {
  Both b(Precision::bf16);
  const int N = 5, V = 997;
  std::vector<float> v(static_cast<std::size_t>(N) * V);
  for (auto& z : v) z = from_bf16(to_bf16(std::uniform_real_distribution<float>(-4, 4)(b.rng)));
  Pair logits{*Tensor::empty(b.cpu.device, {N, V}), testing::tensor_of(b.g(), {N, V}, v, DType::bf16)};
  std::copy(v.begin(), v.end(), logits.cpu.f32());
  std::vector<std::int32_t> tgt{0, 996, 500, 3, 77};
  auto targets = b.ids({N}, tgt);
  auto losses = b.random({N});
  b.cpu.kernels.cross_entropy_forward_backward(losses.cpu, logits.cpu, targets.cpu, 1.0f);
  b.g().kernels.cross_entropy_forward_backward(losses.gpu, logits.gpu, targets.gpu, 1.0f);
  b.agree(losses);
  const auto got = b.host_gpu(logits.gpu), want = b.host(logits.cpu);
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::abs(static_cast<double>(got[i]) - want[i]) <= (std::ldexp(1.0, -8) + 1e-5) * std::abs(want[i]) + 1e-9);
  }
}

// The fused epilogues against the same GPU's unfused kernels (which the
// tests above hold to the CPU's): the GEMM's sums may run in another order
// and the fused GELU rounds once where the unfused one rounds its input to
// bf16 first. Bounds per element, from the values: two roundings to bf16 of
// nearby values differ by at most one bf16 step (2^-7 of the value), a
// rounding moves a value by at most half a step (2^-8), and GELU's slope
// (tanh approximation) lies within [-0.13, 1.13], so an input moved by d
// moves its output by at most 1.2 d. fp32 sums of K products in another
// order differ by at most 2 K 2^-24 of the sum of the products' magnitudes.
TEST_CASE("CUDA fused epilogues (linear + GELU, its backward, linear + residual) agree with the unfused kernels",
          "[cuda][kernels][bf16]") {
  Both b(Precision::bf16);
  const int N = 70, C = 96, OC = 136;  // C and OC multiples of 8 (the aux's row stride)
  const Kernels& k = b.g().kernels;
  auto bf16 = [&](const Shape& shape, float lo = -1, float hi = 1) {
    return testing::tensor_of(b.g(), shape, uniform(static_cast<std::size_t>(shape_numel(shape)), b.rng, lo, hi),
                              DType::bf16);
  };
  auto empty16 = [&](const Shape& shape) { return *Tensor::empty(b.g().device, shape, DType::bf16); };
  auto zeros = [&](const Shape& shape) { return *Tensor::zeros(b.g().device, shape); };
  auto within = [&](const std::vector<float>& got, const std::vector<float>& want,
                    const std::function<double(std::size_t)>& limit) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("element " << i << ": fused " << got[i] << ", unfused " << want[i] << ", bound " << limit(i));
      REQUIRE(std::abs(static_cast<double>(got[i]) - want[i]) <= limit(i));
    }
  };

  // Forward: pre = x w + bias, out = gelu(pre).
  Tensor x = bf16({N, C});
  auto w = b.random({C, OC}), bias = b.random({OC});
  Tensor pre_u = empty16({N, OC}), out_u = empty16({N, OC}), pre_f = empty16({N, OC}), out_f = empty16({N, OC});
  k.linear_forward(pre_u, x, w.gpu, bias.gpu);
  k.gelu_forward(out_u, pre_u);
  k.linear_gelu_forward(pre_f, out_f, x, w.gpu, bias.gpu);
  const auto pu = b.host_gpu(pre_u), pf = b.host_gpu(pre_f), ou = b.host_gpu(out_u), of = b.host_gpu(out_f);
  const double pre_floor = 1e-5 * reference::rms(pu), out_floor = 1e-5 * reference::rms(ou);
  within(pf, pu, [&](std::size_t i) { return std::ldexp(1.0, -7) * std::abs(pu[i]) + pre_floor; });
  within(of, ou, [&](std::size_t i) {
    return std::ldexp(1.0, -8) * (std::abs(of[i]) + std::abs(ou[i])) + 1.2 * std::ldexp(1.0, -7) * std::abs(pu[i]) +
           out_floor;
  });

  // Backward of the layer after the GELU (inputs C2 = OC wide, outputs C):
  // dinp = (dout w2^T) * gelu'(pre); the weight and bias gradients as linear_backward's.
  auto w2 = b.random({OC, C}), dout = b.random({N, C});
  Tensor z = empty16({N, OC});  // dout w2^T, rounded: the scale of the GELU's input error
  k.linear_backward_input(z, dout.gpu, w2.gpu, false);
  Tensor dinp_u = empty16({N, OC}), dinp_f = empty16({N, OC}), dinp_s = empty16({N, OC});
  Tensor dw_u = zeros({OC, C}), db_u = zeros({C}), dw_f = zeros({OC, C}), db_f = zeros({C});
  k.linear_backward(dinp_u, dw_u, db_u, dout.gpu, out_u, w2.gpu, false);
  k.gelu_backward(dinp_u, pre_u, dinp_u);
  k.linear_backward_gelu(dinp_f, dw_f, db_f, dout.gpu, out_u, w2.gpu, pre_u);
  const auto du = b.host_gpu(dinp_u), df = b.host_gpu(dinp_f), zs = b.host_gpu(z);
  const double d_floor = 1e-5 * reference::rms(du);
  within(df, du, [&](std::size_t i) {
    return std::ldexp(1.0, -8) * (std::abs(df[i]) + std::abs(du[i])) + 1.2 * std::ldexp(1.0, -7) * std::abs(zs[i]) +
           d_floor;
  });
  CHECK(b.host_gpu(dw_f) == b.host_gpu(dw_u));  // the same rounded dout, the same GEMM
  CHECK(b.host_gpu(db_f) == b.host_gpu(db_u));
  // The split backward's input half gives the joined one's bits (the zero-bubble schedules equal 1F1B).
  k.linear_backward_input_gelu(dinp_s, dout.gpu, w2.gpu, pre_u);
  CHECK(b.host_gpu(dinp_s) == df);

  // Residual: out = x w + bias + r, in both precisions (fp32: fp32 operands).
  for (Precision precision : {Precision::bf16, Precision::fp32}) {
    Both p(precision);
    const Kernels& pk = p.g().kernels;
    auto xr = p.random({N, C}), wr = p.random({C, OC}), br = p.random({OC}), r = p.random({N, OC}, -4, 4);
    if (precision == Precision::bf16) {  // operands bf16 holds exactly: the CPU's magnitudes then bound the sums
      for (Pair* t : {&xr, &wr}) {
        std::vector<float> v = p.host(t->cpu);
        for (float& e : v) e = from_bf16(to_bf16(e));
        *t = p.of(t->cpu.shape(), v);
      }
    }
    Tensor ru = *Tensor::empty(p.g().device, {N, OC}), rf = *Tensor::empty(p.g().device, {N, OC});
    pk.linear_forward(ru, xr.gpu, wr.gpu, br.gpu);
    pk.residual_forward(ru, ru, r.gpu);
    pk.linear_residual_forward(rf, xr.gpu, wr.gpu, br.gpu, r.gpu);
    auto mag = *Tensor::empty(p.cpu.device, {N, OC});
    p.cpu.kernels.linear_forward(mag, magnitudes(p, xr), magnitudes(p, wr), Tensor{});
    const auto u = p.host_gpu(ru), f = p.host_gpu(rf), m = p.host(mag), rv = p.host(r.cpu), bv = p.host(br.cpu);
    within(f, u, [&](std::size_t i) {
      return 2.0 * C * std::ldexp(1.0, -24) * m[i] +
             std::ldexp(1.0, -22) * (std::abs(u[i]) + std::abs(rv[i]) + std::abs(bv[i % OC])) + 1e-30;
    });
  }
}

TEST_CASE("CUDA GELU and residual additions equal the CPU's", "[cuda][kernels]") {
  Both b;
  const int n = 1001;
  auto x = b.random({n}, -5, 5), y = b.random({n});
  b.cpu.kernels.gelu_forward(y.cpu, x.cpu);
  b.g().kernels.gelu_forward(y.gpu, x.gpu);
  b.agree(y);
  auto dy = b.random({n}), dx = b.random({n});
  b.cpu.kernels.gelu_backward(dx.cpu, x.cpu, dy.cpu);
  b.g().kernels.gelu_backward(dx.gpu, x.gpu, dy.gpu);
  b.agree(dx);
  auto a = b.random({n}), c = b.random({n}), out = b.random({n});
  b.cpu.kernels.residual_forward(out.cpu, a.cpu, c.cpu);
  b.g().kernels.residual_forward(out.gpu, a.gpu, c.gpu);
  b.agree(out);
  b.cpu.kernels.residual3_forward(a.cpu, a.cpu, c.cpu, x.cpu);  // in place
  b.g().kernels.residual3_forward(a.gpu, a.gpu, c.gpu, x.gpu);
  b.agree(a);
}

TEST_CASE("CUDA round_to_bf16 gives the CPU's bits, aligned for vectors or not", "[cuda][kernels][bf16]") {
  Both b;
  const int n = 4099;  // four per thread, then the rest one by one
  std::vector<float> v = uniform(n, b.rng, -3e3f, 3e3f);
  v[0] = 1.0f + 0x1p-8f, v[1] = 1.0f + 0x3p-8f, v[2] = -0.0f, v[3] = 3.4e38f;  // ties to even, a sign, overflow
  auto x = b.of({n}, v);
  for (std::int64_t offset : {0, 1, 3}) {  // views at offsets 1 and 3 are not 16-byte aligned
    INFO("offset " << offset);
    const std::int64_t m = n - offset;
    auto want = *Tensor::zeros(b.cpu.device, {m}, DType::bf16);
    auto got = *Tensor::zeros(b.g().device, {m}, DType::bf16);
    b.cpu.kernels.round_to_bf16(want, x.cpu.view(offset, {m}));
    b.g().kernels.round_to_bf16(got, x.gpu.view(offset, {m}));
    std::vector<BFloat16> bits(static_cast<std::size_t>(m));
    REQUIRE(b.g().device.copy(bits.data(), got.raw(), got.nbytes(), b.g().stream).ok());
    b.g().stream.synchronize();
    for (std::int64_t i = 0; i < m; ++i)
      REQUIRE(bits[static_cast<std::size_t>(i)].bits == want.data<BFloat16>()[i].bits);
  }
}

TEST_CASE("CUDA token and position embedding, forward and backward, equal the CPU's", "[cuda][kernels]") {
  Both b;
  const int B = 3, T = 11, C = 13, V = 17;
  std::vector<std::int32_t> tok(B * T);
  for (int i = 0; i < B * T; ++i) tok[static_cast<std::size_t>(i)] = (i * 7) % 5 == 0 ? 3 : (i * 5) % V;  // repeats
  auto tokens = b.ids({B, T}, tok);
  auto wte = b.random({V, C}), wpe = b.random({T + 4, C}), y = b.random({B, T, C});
  b.cpu.kernels.encoder_forward(y.cpu, tokens.cpu, wte.cpu, wpe.cpu);
  b.g().kernels.encoder_forward(y.gpu, tokens.gpu, wte.gpu, wpe.gpu);
  b.agree(y);
  auto dy = b.random({B, T, C}), dwte = b.random({V, C}), dwpe = b.random({T + 4, C});
  const auto dwte0 = b.host_gpu(dwte.gpu);
  b.cpu.kernels.encoder_backward(dwte.cpu, dwpe.cpu, dy.cpu, tokens.cpu);
  b.g().kernels.encoder_backward(dwte.gpu, dwpe.gpu, dy.gpu, tokens.gpu);
  b.agree(dwte);
  b.agree(dwpe);
  auto again = b.of({V, C}, dwte0);
  auto dwpe_again = b.random({T + 4, C});
  b.g().kernels.encoder_backward(again.gpu, dwpe_again.gpu, dy.gpu, tokens.gpu);
  CHECK(b.host_gpu(again.gpu) == b.host_gpu(dwte.gpu));
}

// Tensor parallelism's vocabulary-parallel ops: each member's rows, on both
// devices; the members' stats gathered by hand (as the group's all-gather does).
TEST_CASE("CUDA vocabulary-parallel embedding and cross-entropy equal the CPU's", "[cuda][kernels][tp]") {
  Both b;
  const int B = 3, T = 11, C = 13, V = 24, P = 2, Vl = V / P, N = B * T;
  std::vector<std::int32_t> tok(N), tgt(N);
  for (int i = 0; i < N; ++i) {
    tok[static_cast<std::size_t>(i)] = (i * 7) % 5 == 0 ? 3 : (i * 5) % V;  // repeats, both members' rows
    tgt[static_cast<std::size_t>(i)] = (i * 11) % V;
  }
  auto tokens = b.ids({B, T}, tok);
  auto targets = b.ids({N}, tgt);
  auto wpe = b.random({T + 4, C});
  auto stats_all = b.random({P, N, 3});
  std::vector<Pair> logits;
  for (int r = 0; r < P; ++r) {
    INFO("member " << r);
    auto wte = b.random({Vl, C}), y = b.random({B, T, C});
    const Tensor positions_cpu = r == 0 ? wpe.cpu : Tensor{}, positions_gpu = r == 0 ? wpe.gpu : Tensor{};
    b.cpu.kernels.vocab_embedding_forward(y.cpu, tokens.cpu, wte.cpu, r * Vl, positions_cpu);
    b.g().kernels.vocab_embedding_forward(y.gpu, tokens.gpu, wte.gpu, r * Vl, positions_gpu);
    b.agree(y);
    auto dy = b.random({B, T, C}), dwte = b.random({Vl, C}), dwpe = b.random({T + 4, C});
    b.cpu.kernels.vocab_embedding_backward(dwte.cpu, dwpe.cpu, dy.cpu, tokens.cpu, r * Vl);
    b.g().kernels.vocab_embedding_backward(dwte.gpu, dwpe.gpu, dy.gpu, tokens.gpu, r * Vl);
    b.agree(dwte);
    b.agree(dwpe);
    // This member's statistics into its chunk of the gathered tensor.
    logits.push_back(b.random({N, Vl}, -4, 4));
    Pair mine{stats_all.cpu.view(static_cast<std::int64_t>(r) * N * 3, {N, 3}),
              stats_all.gpu.view(static_cast<std::int64_t>(r) * N * 3, {N, 3})};
    b.cpu.kernels.vocab_cross_entropy_stats(mine.cpu, logits.back().cpu, targets.cpu, r * Vl);
    b.g().kernels.vocab_cross_entropy_stats(mine.gpu, logits.back().gpu, targets.gpu, r * Vl);
    b.agree(mine);
  }
  for (int r = 0; r < P; ++r) {
    auto losses = b.random({N});
    b.cpu.kernels.vocab_cross_entropy_finish(losses.cpu, logits[static_cast<std::size_t>(r)].cpu, targets.cpu,
                                             stats_all.cpu, r * Vl, 0.5f);
    b.g().kernels.vocab_cross_entropy_finish(losses.gpu, logits[static_cast<std::size_t>(r)].gpu, targets.gpu,
                                             stats_all.gpu, r * Vl, 0.5f);
    b.agree(losses);
    b.agree(logits[static_cast<std::size_t>(r)]);
  }
}

namespace {

struct AttentionCase {
  int B, T, C, NH, window;
};

// Forward and backward against the CPU's; the backward replayed gives the same bits.
void check_attention(Both& b, const AttentionCase& a) {
  const auto [B, T, C, NH, window] = a;
  INFO("B " << B << " T " << T << " C " << C << " NH " << NH << " window " << window);
  auto qkv = b.random({B, T, 3 * C});
  auto y = b.random({B, T, C});
  auto att_cpu = *Tensor::empty(b.cpu.device, b.cpu.kernels.attention_saved_shape(B, NH, T));
  auto att_gpu = *Tensor::empty(b.g().device, b.g().kernels.attention_saved_shape(B, NH, T));
  CHECK(att_gpu.numel() == static_cast<std::int64_t>(B) * NH * T);  // no T x T matrix
  b.cpu.kernels.attention_forward(y.cpu, att_cpu, qkv.cpu, NH, window);
  b.g().kernels.attention_forward(y.gpu, att_gpu, qkv.gpu, NH, window);
  b.agree(y);
  auto dy = b.random({B, T, C}), dqkv = b.random({B, T, 3 * C});
  b.cpu.kernels.attention_backward(dqkv.cpu, dy.cpu, qkv.cpu, y.cpu, att_cpu, NH, window);
  b.g().kernels.attention_backward(dqkv.gpu, dy.gpu, qkv.gpu, y.gpu, att_gpu, NH, window);
  b.agree(dqkv, 2e-5);
  const auto first = b.host_gpu(dqkv.gpu);
  b.g().kernels.attention_backward(dqkv.gpu, dy.gpu, qkv.gpu, y.gpu, att_gpu, NH, window);
  CHECK(b.host_gpu(dqkv.gpu) == first);
}

}  // namespace

TEST_CASE("CUDA flash attention, causal and sliding-window, forward and backward, equals the CPU's",
          "[cuda][kernels][attention]") {
  Both b;
  // Head sizes 4, 64, 96 and 128 run the tiled kernels (64-row tiles: T = 300
  // is five, the last partial); 160 runs the warp-per-row kernels.
  struct Shape4 {
    int B, T, C, NH;
  };
  for (auto [B, T, C, NH] : {Shape4{2, 70, 12, 3}, Shape4{1, 130, 128, 2}, Shape4{2, 33, 96, 1},
                             Shape4{1, 300, 256, 2}, Shape4{1, 90, 160, 1}})
    for (int window : {0, 5, 64, 100}) check_attention(b, {B, T, C, NH, window});
}

namespace {

// x rounded to bf16 as the GPU rounds (to nearest, ties to even).
float round_to_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&x, &u, sizeof u);
  return x;
}

// Uniform values already representable in bf16: the GPU's rounding of them
// is exact, so the CPU's fp32 attention on the same values is the reference
// and what remains is the rounding of P and dS before their products.
Pair bf16_values(Both& b, const Shape& shape) {
  auto v = uniform(static_cast<std::size_t>(shape_numel(shape)), b.rng);
  for (auto& x : v) x = round_to_bf16(x);
  return b.of(shape, v);
}

double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

// Per element of dqkv (B,T,3C): how far the tensor-core backward may be from
// the CPU's fp32 backward on the same bf16 values. Each term of
// dV_j = sum_i P_ij dO_i, dK_j = scale sum_i dS_ij q_i and
// dQ_i = scale sum_j dS_ij k_j is exact but for P_ij or dS_ij rounded to bf16
// (relative error <= 2^-8); and dS_ij = P_ij (dO_i . v_j - delta_i) takes
// delta_i = dO_i . out_i from the GPU's out, within 2^-7 of the CPU's (the
// forward's bound), so dS_ij may be off by P_ij 2^-7 sum_d |dO_id| more.
// Computed from scratch in double, softmax and all.
std::vector<double> backward_error_bounds(const std::vector<float>& qkv, const std::vector<float>& dout,
                                          const AttentionCase& a) {
  const auto [B, T, C, NH, window] = a;
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs)), u = std::ldexp(1.0, -8);
  std::vector<double> bound(qkv.size(), 0.0);
  auto in = [&](int b, int t, int part, int h) { return (static_cast<std::size_t>(b) * T + t) * 3 * C + part * C + h * hs; };
  auto dy = [&](int b, int t, int h) { return (static_cast<std::size_t>(b) * T + t) * C + h * hs; };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const int first = window > 0 ? std::max(0, i - window + 1) : 0;
        std::vector<double> p(static_cast<std::size_t>(i - first + 1));
        double mx = -INFINITY, sum = 0;
        for (int j = first; j <= i; ++j) {
          double s = 0;
          for (int d = 0; d < hs; ++d) s += static_cast<double>(qkv[in(b, i, 0, h) + d]) * qkv[in(b, j, 1, h) + d];
          p[static_cast<std::size_t>(j - first)] = s * scale;
          mx = std::max(mx, s * scale);
        }
        for (auto& x : p) sum += (x = std::exp(x - mx));
        for (auto& x : p) x /= sum;
        double delta = 0, dout_abs = 0;
        for (int d = 0; d < hs; ++d) {
          double out = 0;
          for (int j = first; j <= i; ++j) out += p[static_cast<std::size_t>(j - first)] * qkv[in(b, j, 2, h) + d];
          delta += dout[dy(b, i, h) + d] * out;
          dout_abs += std::abs(dout[dy(b, i, h) + d]);
        }
        for (int j = first; j <= i; ++j) {
          const double pij = p[static_cast<std::size_t>(j - first)];
          double dp = 0;
          for (int d = 0; d < hs; ++d) dp += static_cast<double>(dout[dy(b, i, h) + d]) * qkv[in(b, j, 2, h) + d];
          const double delta_error = pij * std::ldexp(1.0, -7) * dout_abs;  // also rounded with dS
          const double ds_error = u * std::abs(pij * (dp - delta)) + (1 + u) * delta_error;
          for (int d = 0; d < hs; ++d) {
            bound[in(b, i, 0, h) + d] += scale * ds_error * std::abs(qkv[in(b, j, 1, h) + d]);
            bound[in(b, j, 1, h) + d] += scale * ds_error * std::abs(qkv[in(b, i, 0, h) + d]);
            bound[in(b, j, 2, h) + d] += u * pij * std::abs(dout[dy(b, i, h) + d]);
          }
        }
      }
  return bound;
}

// Forward and backward on the tensor cores against the CPU's fp32 on the same
// bf16 values. Forward: out = sum_j p_j v_j / l with each p_j rounded to bf16
// (relative error <= 2^-8) while l sums the unrounded p_j, so |error| <=
// 2 * 2^-8 * max |v| = 2^-7 (|v| <= 1). Backward: backward_error_bounds, plus
// fp32's own rounding (1e-5 of the value).
void check_attention_bf16(Both& b, const AttentionCase& a) {
  const auto [B, T, C, NH, window] = a;
  INFO("B " << B << " T " << T << " C " << C << " NH " << NH << " window " << window);
  auto qkv = bf16_values(b, {B, T, 3 * C});
  auto y = b.random({B, T, C});
  auto att_cpu = *Tensor::empty(b.cpu.device, b.cpu.kernels.attention_saved_shape(B, NH, T));
  auto att_gpu = *Tensor::empty(b.g().device, b.g().kernels.attention_saved_shape(B, NH, T));
  b.cpu.kernels.attention_forward(y.cpu, att_cpu, qkv.cpu, NH, window);
  b.g().kernels.attention_forward(y.gpu, att_gpu, qkv.gpu, NH, window);
  const auto y_gpu = b.host_gpu(y.gpu), y_cpu = b.host(y.cpu);
  const double forward_error = largest_difference(y_gpu, y_cpu);
  CHECK(forward_error <= std::ldexp(1.0, -7));
  CHECK(forward_error > 1e-6);  // P really was rounded: the tensor cores ran, not fp32
  auto dy = bf16_values(b, {B, T, C}), dqkv = b.random({B, T, 3 * C});
  b.cpu.kernels.attention_backward(dqkv.cpu, dy.cpu, qkv.cpu, y.cpu, att_cpu, NH, window);
  b.g().kernels.attention_backward(dqkv.gpu, dy.gpu, qkv.gpu, y.gpu, att_gpu, NH, window);
  const auto bound = backward_error_bounds(b.host(qkv.cpu), b.host(dy.cpu), a);
  const auto got = b.host_gpu(dqkv.gpu), want = b.host(dqkv.cpu);
  double closest = 0;  // the largest error as a share of its bound
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double limit = bound[i] + 1e-5 * std::abs(want[i]) + 1e-7;
    INFO("element " << i << ": got " << got[i] << ", want " << want[i] << ", bound " << limit);
    REQUIRE(std::abs(static_cast<double>(got[i]) - want[i]) <= limit);
    closest = std::max(closest, std::abs(static_cast<double>(got[i]) - want[i]) / limit);
  }
  CHECK(closest > 1e-4);  // dS and P really were rounded
  const auto first = b.host_gpu(dqkv.gpu);
  b.g().kernels.attention_backward(dqkv.gpu, dy.gpu, qkv.gpu, y.gpu, att_gpu, NH, window);
  CHECK(b.host_gpu(dqkv.gpu) == first);

  // A bf16 output (bf16 activations): the fp32 one rounded once, within the
  // forward's bound plus that rounding (2^-8 of |out| <= 1) ...
  auto y16 = *Tensor::empty(b.g().device, {B, T, C}, DType::bf16);
  b.g().kernels.attention_forward(y16, att_gpu, qkv.gpu, NH, window);
  const auto y16_host = b.host_gpu(y16);
  CHECK(largest_difference(y16_host, y_cpu) <= std::ldexp(1.0, -7) + std::ldexp(1.0, -8));
  // ... and the backward from it equals the CPU's from the same values, within
  // the same bounds (delta = rowsum(dout * out) sees the values the CPU sees).
  std::copy(y16_host.begin(), y16_host.end(), y.cpu.f32());
  b.cpu.kernels.attention_backward(dqkv.cpu, dy.cpu, qkv.cpu, y.cpu, att_cpu, NH, window);
  b.g().kernels.attention_backward(dqkv.gpu, dy.gpu, qkv.gpu, y16, att_gpu, NH, window);
  const auto got16 = b.host_gpu(dqkv.gpu), want16 = b.host(dqkv.cpu);
  for (std::size_t i = 0; i < got16.size(); ++i) {
    const double limit = bound[i] + 1e-5 * std::abs(want16[i]) + 1e-7;
    INFO("bf16 out, element " << i << ": got " << got16[i] << ", want " << want16[i] << ", bound " << limit);
    REQUIRE(std::abs(static_cast<double>(got16[i]) - want16[i]) <= limit);
  }
  // A bf16 gradient (bf16 gradients feed the qkv GEMMs): the same, rounded once more.
  auto dqkv16 = *Tensor::empty(b.g().device, {B, T, 3 * C}, DType::bf16);
  b.g().kernels.attention_backward(dqkv16, dy.gpu, qkv.gpu, y16, att_gpu, NH, window);
  const auto got_g16 = b.host_gpu(dqkv16);
  for (std::size_t i = 0; i < got_g16.size(); ++i) {
    const double limit = (1 + std::ldexp(1.0, -8)) * (bound[i] + 1e-5 * std::abs(want16[i]) + 1e-7) +
                         std::ldexp(1.0, -8) * std::abs(want16[i]);
    INFO("bf16 dqkv, element " << i << ": got " << got_g16[i] << ", want " << want16[i] << ", bound " << limit);
    REQUIRE(std::abs(static_cast<double>(got_g16[i]) - want16[i]) <= limit);
  }
  // A bf16 qkv holding the same values (bf16 activations): the very bits of
  // the fp32 one, forward and backward. The fp32 qkv is rounded as it is
  // packed; a bf16 one with hs = 64 and T a multiple of 64 is read in place,
  // so those shapes compare the two layouts.
  auto qkv16 = testing::tensor_of(b.g(), {B, T, 3 * C}, b.host(qkv.cpu), DType::bf16);
  auto y16b = *Tensor::empty(b.g().device, {B, T, C}, DType::bf16);
  b.g().kernels.attention_forward(y16b, att_gpu, qkv16, NH, window);
  CHECK(b.host_gpu(y16b) == y16_host);
  auto dqkv16b = *Tensor::empty(b.g().device, {B, T, 3 * C}, DType::bf16);
  b.g().kernels.attention_backward(dqkv16b, dy.gpu, qkv16, y16b, att_gpu, NH, window);
  CHECK(b.host_gpu(dqkv16b) == got_g16);
}

}  // namespace

TEST_CASE("CUDA bf16 attention on the tensor cores is within bf16 rounding of the CPU's", "[cuda][kernels][bf16]") {
  Both b(Precision::bf16);
  struct Shape4 {
    int B, T, C, NH;
  };
  // Head sizes 4, 32 and 64 (the tensor-core kernels' limit); 64-row tiles;
  // hs = 64 with T = 128 and 192: a bf16 qkv read in place.
  for (auto [B, T, C, NH] : {Shape4{2, 70, 12, 3}, Shape4{2, 33, 64, 2}, Shape4{1, 130, 128, 2}, Shape4{1, 300, 64, 1},
                             Shape4{2, 128, 128, 2}, Shape4{1, 192, 64, 1}})
    for (int window : {0, 5, 64, 100}) check_attention_bf16(b, {B, T, C, NH, window});
}

// A few shapes of each kernel family, small enough for compute-sanitizer's
// racecheck (the shared-memory tiles) within the GPU check's time.
TEST_CASE("CUDA attention on small shapes, tiled and by rows", "[cuda][attention_small][racecheck]") {
  Both b;
  for (const auto& a : {AttentionCase{1, 130, 128, 2, 0}, AttentionCase{1, 70, 128, 1, 5},
                        AttentionCase{1, 40, 160, 1, 0}})
    check_attention(b, a);
  Both tensor_cores(Precision::bf16);
  for (const auto& a :
       {AttentionCase{1, 130, 128, 2, 0}, AttentionCase{1, 70, 64, 1, 5}, AttentionCase{1, 128, 128, 2, 5}})
    check_attention_bf16(tensor_cores, a);
}

TEST_CASE("CUDA fused cross-entropy and its gradient equal the CPU's", "[cuda][kernels]") {
  Both b;
  const int N = 9, V = 1000;
  std::vector<std::int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[static_cast<std::size_t>(i)] = (i * 337) % V;
  auto targets = b.ids({N}, tgt);
  for (float scale : {0.25f, 0.0f}) {
    INFO("scale " << scale);
    auto z = b.random({N, V}, -4, 4), losses = b.random({N});
    b.cpu.kernels.cross_entropy_forward_backward(losses.cpu, z.cpu, targets.cpu, scale);
    b.g().kernels.cross_entropy_forward_backward(losses.gpu, z.gpu, targets.gpu, scale);
    b.agree(losses);
    if (scale != 0.0f) b.agree(z);
  }
}

TEST_CASE("CUDA sums and the optimizers equal the CPU's", "[cuda][kernels][optim]") {
  Both b;
  const int n = 100003;
  auto x = b.random({n});
  CHECK(b.g().kernels.sum(x.gpu) == Approx(b.cpu.kernels.sum(x.cpu)).epsilon(1e-12).margin(1e-9));
  CHECK(b.g().kernels.sum_squares(x.gpu) == Approx(b.cpu.kernels.sum_squares(x.cpu)).epsilon(1e-12));
  CHECK(b.g().kernels.sum(x.gpu) == b.g().kernels.sum(x.gpu));  // same bits, run to run
  auto totals = *Tensor::zeros(b.g().device, {3}, DType::f64);
  b.g().kernels.sum_into(totals, 1, x.gpu);  // enqueued; read below
  std::vector<double> host(3, -1.0);
  REQUIRE(b.g().device.copy(host.data(), totals.raw(), totals.nbytes(), b.g().stream).ok());
  b.g().stream.synchronize();
  CHECK(host[0] == 0.0);
  CHECK(host[1] == b.g().kernels.sum(x.gpu));  // the same order as sum()
  CHECK(host[2] == 0.0);
  // Many sums at once (a gradient norm's parts): 150 spans, more than one
  // launch's 64, of sizes around a block's 256 elements and past sum_into's
  // 1024 blocks, each with the very bits of its own sum_into.
  const std::vector<std::int64_t> sizes{0, 1, 255, 256, 257, 768, 3000, 300000};
  auto big = b.random({301000});
  std::vector<Tensor> spans;
  for (int k = 0; k < 150; ++k)
    spans.push_back(big.gpu.view(k * 7 % 1000, {sizes[static_cast<std::size_t>(k) % sizes.size()]}));
  for (bool squares : {false, true}) {
    auto together = *Tensor::zeros(b.g().device, {152}, DType::f64);
    auto apart = *Tensor::zeros(b.g().device, {152}, DType::f64);
    b.g().kernels.sums_into(together, 1, spans, squares);
    for (std::size_t k = 0; k < spans.size(); ++k)
      b.g().kernels.sum_into(apart, static_cast<std::int64_t>(k) + 1, spans[k], squares);
    std::vector<double> t(152), a(152);
    REQUIRE(b.g().device.copy(t.data(), together.raw(), together.nbytes(), b.g().stream).ok());
    REQUIRE(b.g().device.copy(a.data(), apart.raw(), apart.nbytes(), b.g().stream).ok());
    b.g().stream.synchronize();
    CHECK(t == a);
    CHECK(t[0] == 0.0);
    CHECK(t[151] == 0.0);
    CHECK(t[8] != 0.0);  // a span of 300000
  }
  AdamHyper h{0.01f, 0.9f, 0.95f, 1e-8f, 0.1f};
  auto w = b.random({n}), g = b.random({n}), m = b.of({n}, std::vector<float>(n, 0.0f)),
       v = b.of({n}, std::vector<float>(n, 0.0f));
  for (int t = 1; t <= 3; ++t) {
    b.cpu.kernels.adamw_update(w.cpu, g.cpu, m.cpu, v.cpu, h, t, t != 2, 0.5f);
    b.g().kernels.adamw_update(w.gpu, g.gpu, m.gpu, v.gpu, h, t, t != 2, 0.5f);
  }
  b.agree(w);
  b.agree(m);
  b.agree(v);
  // The multi-tensor AdamW: parts at scattered offsets, with and without
  // decay, their moments packed in another order; one launch on the GPU,
  // whose threads pass from part to part within a chunk (the small ones last).
  const std::vector<AdamPart> parts{{10, 500, 0, true},          {700, 33, 500, false},     {2000, 90000, 533, true},
                                    {95000, 3, 90533, true},     {96000, 0, 90536, true},   {96500, 1, 90536, false},
                                    {97000, 2000, 90537, false}};
  for (int t = 4; t <= 5; ++t) {
    b.cpu.kernels.adamw_update_parts(w.cpu, g.cpu, m.cpu, v.cpu, parts, h, t, 0.75f);
    b.g().kernels.adamw_update_parts(w.gpu, g.gpu, m.gpu, v.gpu, parts, h, t, 0.75f);
  }
  b.agree(w);
  b.agree(m);
  b.agree(v);
  const LambNorms nc = b.cpu.kernels.lamb_direction(g.cpu, m.cpu, v.cpu, w.cpu, h, 6, true, 1.0f);
  const LambNorms ng = b.g().kernels.lamb_direction(g.gpu, m.gpu, v.gpu, w.gpu, h, 6, true, 1.0f);
  b.agree(g);
  CHECK(ng.param_sq == Approx(nc.param_sq).epsilon(1e-9));
  CHECK(ng.update_sq == Approx(nc.update_sq).epsilon(1e-6));
  b.cpu.kernels.lamb_apply(w.cpu, g.cpu, h.lr, 0.7f);
  b.g().kernels.lamb_apply(w.gpu, g.gpu, h.lr, 0.7f);
  b.agree(w);
}

}  // namespace troupe
