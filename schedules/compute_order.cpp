// GPipe, 1F1B and interleaved 1F1B follow Megatron-LM's orders; ZB-H1 follows
// the zero-bubble paper's handcrafted H1.
#include "schedules/compute_order.hpp"

#include <algorithm>

namespace troupe::schedules {
namespace {

std::vector<Instruction> gpipe_order(int m) {
  std::vector<Instruction> out;
  for (int mb = 0; mb < m; ++mb) out.push_back({Op::forward, mb, 0});
  for (int mb = 0; mb < m; ++mb) out.push_back({Op::backward, mb, 0});
  return out;
}

std::vector<Instruction> one_f_one_b_order(int p, int m, int s) {
  const int warmup = warmup_forwards(Kind::one_f_one_b, p, m, 1, s);
  std::vector<Instruction> out;
  for (int mb = 0; mb < warmup; ++mb) out.push_back({Op::forward, mb, 0});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({Op::forward, warmup + i, 0});
    out.push_back({Op::backward, i, 0});
  }
  for (int mb = m - warmup; mb < m; ++mb) out.push_back({Op::backward, mb, 0});
  return out;
}

// Megatron: the k-th forward (backward) of a stage works on microbatch
// (k / pv) p + k % p of chunk (k % pv) / p (backward: reversed chunk order).
Instruction interleaved_item(Op op, int k, int p, int v) {
  const int in_group = k % (p * v);
  int chunk = in_group / p;
  if (op == Op::backward) chunk = v - 1 - chunk;
  return {op, (k / (p * v)) * p + k % p, chunk};
}

std::vector<Instruction> interleaved_order(int p, int m, int v, int s) {
  const int total = m * v, warmup = warmup_forwards(Kind::interleaved_1f1b, p, m, v, s);
  std::vector<Instruction> out;
  for (int k = 0; k < warmup; ++k) out.push_back(interleaved_item(Op::forward, k, p, v));
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back(interleaved_item(Op::forward, warmup + i, p, v));
    out.push_back(interleaved_item(Op::backward, i, p, v));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(interleaved_item(Op::backward, k, p, v));
  return out;
}

// ZB-H1 (Qi et al. 2023, handcrafted H1): stage s runs 1F1B's p-s-1 warm-up
// forwards, then s rounds of F,B that leave their W pending, then F,B,W rounds,
// then B,W rounds, then the s deferred W's. Deferring W lets each B, which is
// on the critical path, run a W-length earlier; the deferred W's fill the
// cool-down bubble. At most s W's are pending and activations (F to B) stay
// within 1F1B's p-s.
std::vector<Instruction> zb_h1_order(int p, int m, int s) {
  std::vector<Instruction> out;
  int f = 0, b = 0, w = 0;
  const int warmup = warmup_forwards(Kind::zb_h1, p, m, 1, s);
  while (f < warmup) out.push_back({Op::forward, f++, 0});
  for (int i = 0; i < s && f < m; ++i) {
    out.push_back({Op::forward, f++, 0});
    out.push_back({Op::backward_input, b++, 0});
  }
  while (f < m) {
    out.push_back({Op::forward, f++, 0});
    out.push_back({Op::backward_input, b++, 0});
    out.push_back({Op::backward_weight, w++, 0});
  }
  while (b < m) {
    out.push_back({Op::backward_input, b++, 0});
    out.push_back({Op::backward_weight, w++, 0});
  }
  while (w < m) out.push_back({Op::backward_weight, w++, 0});
  return out;
}

}  // namespace

int warmup_forwards(Kind kind, int p, int m, int v, int s) {
  switch (kind) {
    case Kind::gpipe: return m;
    case Kind::one_f_one_b:
    case Kind::zb_h1: return std::min(p - s - 1, m);
    case Kind::interleaved_1f1b:
      return std::min((p - s - 1) * 2 + (v - 1) * p, m * v);
  }
  return 0;
}

int activation_bound(Kind kind, int p, int m, int v, int s) {
  switch (kind) {
    case Kind::gpipe: return m;
    case Kind::one_f_one_b:
    case Kind::zb_h1: return std::min(p - s, m);
    case Kind::interleaved_1f1b: return std::min(warmup_forwards(kind, p, m, v, s) + 1, m * v);
  }
  return 0;
}

int pending_weight_bound(int p, int m, int s) { return std::min(std::min(s, p - 1) + 1, m); }

std::vector<std::vector<Instruction>> compute_orders(Kind kind, int p, int m, int v) {
  std::vector<std::vector<Instruction>> out;
  for (int s = 0; s < p; ++s) {
    switch (kind) {
      case Kind::gpipe: out.push_back(gpipe_order(m)); break;
      case Kind::one_f_one_b: out.push_back(one_f_one_b_order(p, m, s)); break;
      case Kind::zb_h1: out.push_back(zb_h1_order(p, m, s)); break;
      default: out.push_back(interleaved_order(p, m, v, s));
    }
  }
  return out;
}

}  // namespace troupe::schedules
