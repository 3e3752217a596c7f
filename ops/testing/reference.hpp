// Naive double-precision reference implementations of every op, for tests only:
// forwards are checked against these and backwards against their finite
// differences. Written for clarity, not speed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "backends/tensor.hpp"

namespace troupe::reference {

using Vec = std::vector<double>;

inline Vec to_vec(const Tensor& t) {
  Vec v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = t.f32()[i];
  return v;
}

inline void fill_uniform(Tensor& t, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> u(lo, hi);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(rng);
}

/// (N,C) rows.
inline Vec layernorm(const Vec& x, const Vec& w, const Vec& b, int N, int C) {
  Vec y(x.size());
  for (int r = 0; r < N; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[r * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[r * C + c] - m) * (x[r * C + c] - m);
    v /= C;
    double rs = 1.0 / std::sqrt(v + 1e-5);
    for (int c = 0; c < C; ++c) y[r * C + c] = (x[r * C + c] - m) * rs * w[c] + b[c];
  }
  return y;
}

/// (N,C) @ (C,OC) + (OC).
inline Vec linear(const Vec& x, const Vec& w, const Vec& b, int N, int C, int OC) {
  Vec y(static_cast<std::size_t>(N) * OC);
  for (int r = 0; r < N; ++r)
    for (int o = 0; o < OC; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int c = 0; c < C; ++c) s += x[r * C + c] * w[c * OC + o];
      y[r * OC + o] = s;
    }
  return y;
}

inline Vec gelu(const Vec& x) {
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    double v = x[i];
    y[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  return y;
}

/// qkv (B,T,3C) -> (B,T,C); window 0 = full causal.
inline Vec attention(const Vec& qkv, int B, int T, int C, int NH, int window) {
  const int hs = C / NH;
  Vec y(static_cast<std::size_t>(B) * T * C, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const int lo = window > 0 ? std::max(0, i - window + 1) : 0;
        Vec p(static_cast<std::size_t>(T), 0.0);
        double mx = -1e300;
        for (int j = lo; j <= i; ++j) {
          double s = 0;
          for (int d = 0; d < hs; ++d)
            s += qkv[(b * T + i) * 3 * C + h * hs + d] * qkv[(b * T + j) * 3 * C + C + h * hs + d];
          p[j] = s / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int j = lo; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int j = lo; j <= i; ++j)
          for (int d = 0; d < hs; ++d)
            y[(b * T + i) * C + h * hs + d] += p[j] / sum * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + d];
      }
  return y;
}

/// Per-row cross-entropy of logits (N,V) against targets.
inline Vec cross_entropy(const Vec& z, const std::vector<int>& tgt, int N, int V) {
  Vec out(static_cast<std::size_t>(N));
  for (int r = 0; r < N; ++r) {
    double mx = -1e300, s = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, z[r * V + v]);
    for (int v = 0; v < V; ++v) s += std::exp(z[r * V + v] - mx);
    out[r] = mx + std::log(s) - z[r * V + tgt[r]];
  }
  return out;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

/// Central finite difference of f with respect to x[i] (x restored afterwards).
inline double finite_difference(const std::function<double()>& f, Vec& x, std::size_t i, double h = 1e-5) {
  const double keep = x[i];
  x[i] = keep + h;
  double up = f();
  x[i] = keep - h;
  double down = f();
  x[i] = keep;
  return (up - down) / (2 * h);
}

/// The root mean square of `values` (0 when there are none): the scale a
/// tensor's elements are compared on where some are small differences of
/// large terms.
inline double rms(const float* values, std::size_t n) {
  double sq = 0;
  for (std::size_t i = 0; i < n; ++i) sq += static_cast<double>(values[i]) * values[i];
  return n == 0 ? 0.0 : std::sqrt(sq / static_cast<double>(n));
}
inline double rms(const std::vector<float>& values) { return rms(values.data(), values.size()); }

/// Relative agreement used throughout: |a-b| <= tol * max(1, |a|, |b|) scaled by `scale`.
inline bool close(double a, double b, double tol, double scale = 1.0) {
  return std::abs(a - b) <= tol * std::max({scale, std::abs(a), std::abs(b)});
}

}  // namespace troupe::reference
