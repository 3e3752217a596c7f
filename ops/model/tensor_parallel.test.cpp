// Tensor parallelism as the model sees it: the members' pieces tile every
// tensor (TP-1), runs ascend (TP-2), a member's initial weights are its slice
// of the whole model's, and tp members running a stage together (their sums
// and gathers over an in-process group) compute the whole model's loss and
// gradients: each member's gradient pieces are slices of tp = 1's.
#include "ops/model/tensor_parallel.hpp"

#include <catch2/catch.hpp>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "ops/model/gpt_stage.hpp"
#include "backends/host_memory.hpp"
#include "ops/model/init.hpp"
#include "ops/testing/cpu_context.hpp"
#include "ops/testing/reference.hpp"

namespace troupe {
namespace {

// TP-1, TP-2 for one tensor: every whole element is visited once over the
// members, and each member's runs ascend in local and whole order.
void check_tiling(const Shape& full, TpSplit split, int size) {
  REQUIRE(divisible(full, split, size));
  const std::int64_t n = shape_numel(full);
  std::vector<int> seen(static_cast<std::size_t>(n), 0);
  for (int r = 0; r < size; ++r) {
    const Shape local = local_shape(full, split, TpShard{size, r});
    const std::int64_t m = shape_numel(local);
    if (!split.replicated()) CHECK(m * size == n);
    std::int64_t next_local = 0, last_whole = -1;
    for (const TpRun& run : tp_runs(full, split, TpShard{size, r}, 0, m)) {
      CHECK(run.local == next_local);  // TP-2
      CHECK(run.whole > last_whole);
      next_local += run.count;
      last_whole = run.whole;
      for (std::int64_t k = 0; k < run.count; ++k) ++seen[static_cast<std::size_t>(run.whole + k)];
    }
    CHECK(next_local == m);
  }
  const int want = split.replicated() ? size : 1;  // TP-1
  for (std::int64_t i = 0; i < n; ++i) REQUIRE(seen[static_cast<std::size_t>(i)] == want);
}

TEST_CASE("TP-1, TP-2: the members' pieces tile every tensor, in ascending runs", "[tp]") {
  for (int size : {1, 2, 4}) {
    check_tiling({8, 24}, TpSplit{1, 3}, size);  // qkv's columns
    check_tiling({24}, TpSplit{0, 3}, size);     // qkv's bias
    check_tiling({8, 32}, TpSplit{1, 1}, size);  // c_fc's columns
    check_tiling({32, 8}, TpSplit{0, 1}, size);  // projections' rows, wte's vocabulary
    check_tiling({8}, TpSplit{}, size);          // replicated
  }
  // A partial range of a piece: its runs are the full list clipped.
  const auto all = tp_runs({8, 24}, TpSplit{1, 3}, TpShard{2, 1}, 0, 96);
  const auto some = tp_runs({8, 24}, TpSplit{1, 3}, TpShard{2, 1}, 5, 30);
  REQUIRE(some.size() == 7);
  CHECK(some.front().local == 5);
  CHECK(some.front().whole == all[1].whole + 1);
  CHECK(some.back().local + some.back().count == 30);
  CHECK_FALSE(divisible({8, 24}, TpSplit{1, 3}, 3));
}

GptConfig small_config() {
  GptConfig cfg;
  cfg.layers = 2;
  cfg.heads = 4;
  cfg.dim = 16;
  cfg.ctx = 12;
  cfg.vocab = 20;
  return cfg;
}

TEST_CASE("a member's initial weights are its slice of the whole model's", "[tp]") {
  const GptConfig cfg = small_config();
  for (int size : {2, 4}) {
    const auto whole = stage_param_specs(cfg, whole_model(cfg));
    for (int r = 0; r < size; ++r) {
      const auto mine = stage_param_specs(cfg, whole_model(cfg), TpShard{size, r});
      REQUIRE(mine.size() == whole.size());
      for (std::size_t i = 0; i < mine.size(); ++i) {
        Tensor w = *Tensor::zeros(host_memory(), whole[i].shape);
        Tensor p = *Tensor::zeros(host_memory(), mine[i].shape);
        init_parameter(w, whole[i], cfg, 5);
        init_parameter(p, mine[i], cfg, 5, TpShard{size, r});
        for (const TpRun& run : tp_runs(mine[i].full, mine[i].split, TpShard{size, r}, 0, p.numel()))
          REQUIRE(std::memcmp(p.f32() + run.local, w.f32() + run.whole,
                              static_cast<std::size_t>(run.count) * sizeof(float)) == 0);
      }
    }
  }
}

// An in-process tensor-parallel group: members on threads meet at a barrier.
class LocalGroup {
 public:
  explicit LocalGroup(int n)
      : n_(n), barrier_(n), slots_(static_cast<std::size_t>(n)), pending_(static_cast<std::size_t>(n)),
        issued_(static_cast<std::size_t>(n), 0) {}
  TensorParallel member(int r, bool sequence_parallel, int overlap_chunks = 1) {
    TensorParallel tp;
    tp.shard = TpShard{n_, r};
    tp.sequence_parallel = sequence_parallel;
    tp.overlap_chunks = overlap_chunks;
    // A started collective runs when it is finished (every member finishes
    // them in the same order), not before: a result read before its finish,
    // or an input changed after its start, gives the wrong numbers.
    tp.start = [this, r](const Tensor& t, TensorParallel::Op op) {
      const int ticket = ++issued_[static_cast<std::size_t>(r)];
      pending_[static_cast<std::size_t>(r)][ticket] = {t, op};
      return ticket;
    };
    tp.finish = [this, r](int ticket) {
      auto& mine = pending_[static_cast<std::size_t>(r)];
      const auto it = mine.find(ticket);
      if (it == mine.end()) {  // (Catch's assertions are not for other threads)
        std::fprintf(stderr, "member %d finished ticket %d, never started or finished twice\n", r, ticket);
        std::abort();
      }
      const auto [t, op] = it->second;
      mine.erase(it);
      auto tp = member(r, false);
      if (op == TensorParallel::Op::all_gather) tp.all_gather(t);
      if (op == TensorParallel::Op::reduce_scatter) tp.reduce_scatter(t);
      if (op == TensorParallel::Op::all_reduce) tp.all_reduce(t);
    };
    tp.reduce_scatter = [this, r](const Tensor& t) {
      slots_[static_cast<std::size_t>(r)] = &t;
      barrier_.arrive_and_wait();
      const std::int64_t chunk = t.numel() / n_;
      std::vector<float> sum(static_cast<std::size_t>(chunk), 0.0f);
      for (const Tensor* s : slots_)
        for (std::int64_t i = 0; i < chunk; ++i) sum[static_cast<std::size_t>(i)] += s->f32()[r * chunk + i];
      barrier_.arrive_and_wait();
      std::memcpy(const_cast<float*>(t.f32()) + r * chunk, sum.data(), sum.size() * sizeof(float));
    };
    tp.all_reduce = [this, r](const Tensor& t) {
      slots_[static_cast<std::size_t>(r)] = &t;
      barrier_.arrive_and_wait();
      std::vector<float> sum(static_cast<std::size_t>(t.numel()), 0.0f);
      for (const Tensor* s : slots_)  // member order, as a communicator's sum is the same on every member
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += s->f32()[i];
      barrier_.arrive_and_wait();
      std::memcpy(const_cast<float*>(t.f32()), sum.data(), sum.size() * sizeof(float));
    };
    tp.all_gather = [this, r](const Tensor& t) {
      slots_[static_cast<std::size_t>(r)] = &t;
      barrier_.arrive_and_wait();
      const std::int64_t chunk = t.numel() / n_;
      for (int j = 0; j < n_; ++j)
        if (j != r)
          std::memcpy(const_cast<float*>(t.f32()) + j * chunk, slots_[static_cast<std::size_t>(j)]->f32() + j * chunk,
                      static_cast<std::size_t>(chunk) * sizeof(float));
      barrier_.arrive_and_wait();
    };
    return tp;
  }

 private:
  int n_;
  std::barrier<> barrier_;
  std::vector<const Tensor*> slots_;
  std::vector<std::map<int, std::pair<Tensor, TensorParallel::Op>>> pending_;  // started, not yet run, per member
  std::vector<int> issued_;  // tickets handed out, per member
};

// Deterministic non-trivial values (biases and norms too), by whole index.
void perturb(GptStage& stage) {
  for (auto& p : stage.params()) {
    const float salt = static_cast<float>(p.spec.name.size());
    for (const TpRun& run : tp_runs(p.spec.full, p.spec.split, stage.tp_shard(), 0, p.value.numel()))
      for (std::int64_t k = 0; k < run.count; ++k)
        p.value.f32()[run.local + k] += 0.2f * std::sin(0.37f * static_cast<float>(run.whole + k) + salt);
  }
}

struct Run {
  float loss = 0;
  std::vector<std::vector<float>> grads;  // per parameter
  std::vector<float> input_grad;
};

// One forward and backward of a stage (whole model, or the last layers
// without the embedding when `from_activations`), two microbatches
// accumulated, on member `shard` of `group` (null: tp = 1).
Run run_member(const GptConfig& cfg, LocalGroup* group, TpShard shard, bool split_backward, bool from_activations,
               bool sequence_parallel, int overlap_chunks = 1) {
  testing::CpuContext cpu(1);
  const ExecContext& ctx = cpu;
  const int B = 2, T = 10;
  const StageSpec spec = from_activations ? StageSpec{1, cfg.layers, false, true} : whole_model(cfg);
  auto made = GptStage::create(ctx, cfg, spec, B, T, 2, split_backward,
                               group ? group->member(shard.rank, sequence_parallel, overlap_chunks) : TensorParallel{});
  REQUIRE(made);
  GptStage& stage = **made;
  stage.init_weights(3);
  perturb(stage);
  stage.zero_grads(ctx);
  Run out;
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> tok(0, cfg.vocab - 1);
  std::normal_distribution<float> act(0.0f, 1.0f);
  std::vector<Tensor> inputs, targets;
  for (int slot = 0; slot < 2; ++slot) {
    Tensor in = from_activations ? *Tensor::empty(host_memory(), {B, T, cfg.dim}) : *Tensor::empty(host_memory(), {B, T}, DType::i32);
    Tensor tg = *Tensor::empty(host_memory(), {B, T}, DType::i32);
    for (std::int64_t i = 0; i < in.numel(); ++i) {
      if (from_activations) in.f32()[i] = act(rng);
      else in.data<std::int32_t>()[i] = tok(rng);
    }
    for (std::int64_t i = 0; i < tg.numel(); ++i) tg.data<std::int32_t>()[i] = tok(rng);
    // Sequence parallelism: a stage takes this member's tokens of the activations.
    const std::int64_t tokens = static_cast<std::int64_t>(B) * T / shard.size;
    if (from_activations && sequence_parallel) in = in.view(tokens * cfg.dim * shard.rank, {tokens, cfg.dim});
    inputs.push_back(in);
    targets.push_back(tg);
  }
  for (int slot = 0; slot < 2; ++slot)
    out.loss += stage.forward(slot, inputs[static_cast<std::size_t>(slot)], &targets[static_cast<std::size_t>(slot)],
                              1.0f / (2 * B * T), ctx) / 2;
  for (int slot = 1; slot >= 0; --slot) {
    if (split_backward) {
      stage.backward_input(slot, Tensor{}, ctx);
      stage.backward_weight(slot, ctx);
    } else {
      stage.backward(slot, Tensor{}, ctx);
    }
    if (from_activations && slot == 0)
      out.input_grad.assign(stage.input_grad().f32(), stage.input_grad().f32() + stage.input_grad().numel());
  }
  for (auto& p : stage.params()) out.grads.emplace_back(p.grad.f32(), p.grad.f32() + p.grad.numel());
  return out;
}

void check_against_whole(const GptConfig& cfg, int size, bool split_backward = false, bool from_activations = false,
                         bool sequence_parallel = false, int overlap_chunks = 1) {
  const Run whole = run_member(cfg, nullptr, {}, split_backward, from_activations, false);
  LocalGroup group(size);
  std::vector<Run> members(static_cast<std::size_t>(size));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        members[static_cast<std::size_t>(r)] =
            run_member(cfg, &group, TpShard{size, r}, split_backward, from_activations, sequence_parallel, overlap_chunks);
      });
  }
  const StageSpec spec = from_activations ? StageSpec{1, cfg.layers, false, true} : whole_model(cfg);
  const auto specs = stage_param_specs(cfg, spec);
  for (int r = 0; r < size; ++r) {
    const Run& m = members[static_cast<std::size_t>(r)];
    INFO("member " << r << " of " << size);
    CHECK(m.loss == Approx(whole.loss).epsilon(1e-5));
    // Each element within 1e-3 of the larger of itself and its tensor's RMS
    // (reference::close): summed in another order, an element that is a
    // small difference of large terms keeps the terms' rounding (on an
    // AVX-512 OpenBLAS, wte's gradient element 13, -0.00727, moved by
    // 1.3e-5: 4e-5 of the tensor's RMS), while a missing or doubled piece
    // moves elements by about the RMS.
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const double scale = reference::rms(whole.grads[i]);
      const ParamSpec mine = stage_param_specs(cfg, spec, TpShard{size, r})[i];
      for (const TpRun& run : tp_runs(mine.full, mine.split, TpShard{size, r}, 0, shape_numel(mine.shape)))
        for (std::int64_t k = 0; k < run.count; ++k) {
          const float got = m.grads[i][static_cast<std::size_t>(run.local + k)];
          const float want = whole.grads[i][static_cast<std::size_t>(run.whole + k)];
          INFO(specs[i].name << "[" << run.whole + k << "]");
          INFO(got << " against " << want << ", the tensor's RMS " << scale);
          REQUIRE(reference::close(got, want, 1e-3, scale));
        }
    }
    // The input gradient: whole, or with sequence parallelism this member's tokens of it.
    const std::size_t first = sequence_parallel ? m.input_grad.size() * static_cast<std::size_t>(r) : 0;
    const double input_scale = reference::rms(whole.input_grad);
    for (std::size_t i = 0; i < m.input_grad.size(); ++i)
      REQUIRE(reference::close(m.input_grad[i], whole.input_grad[first + i], 1e-3, input_scale));
  }
  // Replicated tensors' gradients: the same bits on every member.
  for (int r = 1; r < size; ++r)
    for (std::size_t i = 0; i < specs.size(); ++i)
      if (specs[i].replicated()) CHECK(members[static_cast<std::size_t>(r)].grads[i] == members[0].grads[i]);
}

}  // namespace

TEST_CASE("tp = 2 and 4 members compute the whole model's loss and gradient pieces", "[tp]") {
  for (int size : {2, 4}) check_against_whole(small_config(), size);
}

TEST_CASE("tensor parallelism: the parallel block (one sum for attention and MLP)", "[tp]") {
  GptConfig cfg = small_config();
  cfg.parallel_block = true;
  check_against_whole(cfg, 2);
}

TEST_CASE("tensor parallelism: sliding window, split backward, a stage fed activations", "[tp]") {
  GptConfig cfg = small_config();
  cfg.window = 4;
  check_against_whole(cfg, 2);
  check_against_whole(small_config(), 2, /*split_backward=*/true);
  check_against_whole(small_config(), 4, false, /*from_activations=*/true);
}

TEST_CASE("sequence parallelism: tp = 2 and 4, sequential and parallel block, a stage fed activations", "[tp]") {
  for (int size : {2, 4}) check_against_whole(small_config(), size, false, false, /*sequence_parallel=*/true);
  GptConfig cfg = small_config();
  cfg.parallel_block = true;
  cfg.window = 4;
  check_against_whole(cfg, 2, false, false, true);
  check_against_whole(small_config(), 2, false, /*from_activations=*/true, true);
}

TEST_CASE("chunked overlap of sequence parallelism's gathers and reduce-scatters computes the same", "[tp]") {
  // Each member's 10 tokens in 2 and in 5 chunks; the sequential and the parallel block.
  check_against_whole(small_config(), 2, false, false, true, 2);
  check_against_whole(small_config(), 2, false, false, true, 5);
  GptConfig cfg = small_config();
  cfg.parallel_block = true;
  check_against_whole(cfg, 2, false, false, true, 2);
  check_against_whole(small_config(), 4, false, true, true, 5);
}

TEST_CASE("train.recompute = gelu under tensor and sequence parallelism, chunked or not, both blocks", "[tp][recompute]") {
  GptConfig cfg = small_config();
  cfg.recompute_gelu = true;
  check_against_whole(cfg, 2);
  check_against_whole(cfg, 2, /*split_backward=*/true);
  check_against_whole(cfg, 2, false, false, /*sequence_parallel=*/true);
  check_against_whole(cfg, 2, false, false, true, /*overlap_chunks=*/2);
  cfg.parallel_block = true;
  check_against_whole(cfg, 2, false, false, true);
  check_against_whole(cfg, 2, false, false, true, 5);
}

TEST_CASE("sequence parallelism stores the residual stream and LayerNorms 1/tp per member", "[tp]") {
  testing::CpuContext cpu(1);
  const GptConfig cfg = small_config();
  LocalGroup group(2);
  auto whole = *GptStage::create(cpu, cfg, whole_model(cfg), 2, 10, 1, false);
  auto tp = *GptStage::create(cpu, cfg, whole_model(cfg), 2, 10, 1, false, group.member(0, false));
  auto sp = *GptStage::create(cpu, cfg, whole_model(cfg), 2, 10, 1, false, group.member(0, true));
  CHECK(sp->activation_shape() == Shape{10, cfg.dim});
  CHECK(tp->activation_shape() == Shape{2, 10, cfg.dim});
  // tp alone splits attention's and the MLP's activations; the residual
  // stream, LayerNorms and logits' shares stay whole until sequence parallelism.
  CHECK(tp->memory_use().activations < whole->memory_use().activations);
  CHECK(sp->memory_use().activations < tp->memory_use().activations);
  // Odd token counts cannot be split; a split backward is not built with it.
  CHECK_FALSE(GptStage::create(cpu, cfg, whole_model(cfg), 1, 5, 1, false, group.member(0, true)));
  auto zb = GptStage::create(cpu, cfg, whole_model(cfg), 2, 10, 1, true, group.member(0, true));
  REQUIRE_FALSE(zb);
  CHECK(zb.error().message.find("parallel.sequence_parallel") != std::string::npos);
}

TEST_CASE("tensor parallelism refuses a model it cannot cut, naming the key", "[tp]") {
  GptConfig cfg = small_config();
  cfg.vocab = 21;
  auto st = validate_tensor_parallel(cfg, 2);
  REQUIRE_FALSE(st);
  CHECK(st.error().message.find("model.vocab") != std::string::npos);
  cfg.vocab = 20;
  st = validate_tensor_parallel(cfg, 8);
  REQUIRE_FALSE(st);
  CHECK(st.error().message.find("model.heads") != std::string::npos);
}

}  // namespace troupe
