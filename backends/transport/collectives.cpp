// Ring algorithms as small state machines advanced by transport completions.
//   reduce-scatter step k: member i sends chunk (i-k-1) to the next member and
//   adds chunk (i-k-2) received from the previous one; after n-1 steps it holds
//   the sum of chunk i. all-gather step k: send chunk (i-k), receive (i-k-1).
#include "backends/transport/collectives.hpp"

#include "common/hash.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <stdexcept>

namespace troupe {
namespace {

constexpr int kStepBits = 16;

int index_in(const std::vector<int>& group, int rank) {
  return static_cast<int>(std::find(group.begin(), group.end(), rank) - group.begin());
}

int mod(int a, int n) { return ((a % n) + n) % n; }

struct RingOp : std::enable_shared_from_this<RingOp> {
  enum class Phase { reduce_scatter, all_gather, done };
  Transport* t;
  std::vector<int> group;
  float* data;
  std::size_t count;
  int n, me, next, prev;
  Tag tag_base;
  Phase phase;
  bool gather_after_reduce;
  int step = 0;
  std::vector<float> scratch;
  Completion done;
  std::mutex mu;
  int pending = 0;
  Status error;

  std::pair<std::size_t, std::size_t> chunk(int i) const { return Collectives::chunk(count, n, mod(i, n)); }

  void start() {
    if (n == 1 || count == 0) return finish(Status::success());
    run_step();
  }

  void finish(Status st) {
    phase = Phase::done;
    Completion d = std::move(done);
    d(st);
  }

  void run_step() {
    const int k = step;
    int send_chunk, recv_chunk;
    if (phase == Phase::reduce_scatter) {
      send_chunk = me - k - 1;
      recv_chunk = me - k - 2;
    } else {
      send_chunk = me - k;
      recv_chunk = me - k - 1;
    }
    const auto [sb, se] = chunk(send_chunk);
    const auto [rb, re] = chunk(recv_chunk);
    const Tag tag = tag_base | static_cast<Tag>((phase == Phase::all_gather ? n : 0) + k);
    float* recv_into = phase == Phase::reduce_scatter ? scratch.data() : data + rb;
    pending = 2;
    auto self = shared_from_this();
    auto on_done = [self, rb = rb, re = re](Status st) { self->part_done(std::move(st), rb, re); };
    t->recv(prev, tag, recv_into, (re - rb) * sizeof(float), on_done);
    t->send(next, tag, data + sb, (se - sb) * sizeof(float), on_done);
  }

  void part_done(Status st, std::size_t rb, std::size_t re) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!st && error.ok()) error = st;
      if (--pending > 0) return;
    }
    if (!error.ok()) return finish(error);
    if (phase == Phase::reduce_scatter)
      for (std::size_t i = rb; i < re; ++i) data[i] += scratch[i - rb];
    if (++step < n - 1) return run_step();
    if (phase == Phase::reduce_scatter && gather_after_reduce) {
      phase = Phase::all_gather;
      step = 0;
      return run_step();
    }
    finish(Status::success());
  }
};

// Chain broadcast from the root, in segments so that hops overlap.
struct ChainBroadcast : std::enable_shared_from_this<ChainBroadcast> {
  static constexpr std::size_t kSegment = 1 << 18;  // floats (1 MiB)
  Transport* t;
  float* data;
  std::size_t count;
  int prev = -1, next = -1;  // -1: none (root has no prev, last has no next)
  Tag tag_base;
  std::size_t segment = 0, segments = 0;
  Completion done;
  std::mutex mu;
  Status error;

  void start() {
    segments = (count + kSegment - 1) / kSegment;
    if (segments == 0 || (prev < 0 && next < 0)) return done(Status::success());
    run_segment();
  }
  void run_segment() {
    const std::size_t b = segment * kSegment, e = std::min(count, b + kSegment);
    auto self = shared_from_this();
    const Tag tag = tag_base | static_cast<Tag>(segment & 0xffff);
    if (prev >= 0) {
      // Receive this segment, then forward it.
      t->recv(prev, tag, data + b, (e - b) * sizeof(float), [self, b, e, tag](Status st) {
        if (!st) return self->fail(st);
        if (self->next >= 0) self->t->send(self->next, tag, self->data + b, (e - b) * sizeof(float), [self](Status s2) { self->sent(s2); });
        else self->sent(Status::success());
      });
    } else {
      t->send(next, tag, data + b, (e - b) * sizeof(float), [self](Status st) { self->sent(st); });
    }
  }
  void fail(Status st) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.ok()) {
      error = st;
      Completion d = std::move(done);
      d(st);
    }
  }
  void sent(Status st) {
    if (!st) return fail(st);
    if (++segment < segments) return run_segment();
    done(Status::success());
  }
};

}  // namespace

std::pair<std::size_t, std::size_t> Collectives::chunk(std::size_t count, int n, int i) {
  const auto un = static_cast<std::size_t>(n), ui = static_cast<std::size_t>(i);
  return {count * ui / un, count * (ui + 1) / un};
}

// Collective tags have bit 39 set; point-to-point users keep to bits 0-38.
// The group's hash in the middle bits keeps different groups' tags apart even
// between the same pair of ranks.
Tag Collectives::next_tag_base(const std::vector<int>& group) {
  std::uint64_t op;
  {
    std::lock_guard<std::mutex> lock(mu_);
    op = next_op_[group]++;
  }
  std::uint64_t h = kFnvOffset;
  for (int r : group) h = (h ^ static_cast<std::uint64_t>(r)) * kFnvPrime;
  const std::uint64_t group_bits = (h >> 40) & 0xfff;                      // 12 bits
  const std::uint64_t op_bits = op & ((std::uint64_t{1} << (39 - 12 - kStepBits)) - 1);  // 11 bits
  return kCollectiveTagBit | (group_bits << (39 - 12)) | (op_bits << kStepBits);
}

namespace {

void start_ring(Transport& t, const std::vector<int>& group, float* data, std::size_t count, Tag tag_base,
                RingOp::Phase phase, bool gather_after, Completion done) {
  auto op = std::make_shared<RingOp>();
  op->t = &t;
  op->group = group;
  op->data = data;
  op->count = count;
  op->n = static_cast<int>(group.size());
  op->me = index_in(group, t.rank());
  if (op->me == op->n) {
    done(make_error("collective: rank ", std::to_string(t.rank()), " is not in the group"));
    return;
  }
  op->next = group[static_cast<std::size_t>(mod(op->me + 1, op->n))];
  op->prev = group[static_cast<std::size_t>(mod(op->me - 1, op->n))];
  op->tag_base = tag_base;
  op->phase = phase;
  op->gather_after_reduce = gather_after;
  std::size_t largest = 0;
  for (int i = 0; i < op->n; ++i) {
    auto [b, e] = Collectives::chunk(count, op->n, i);
    largest = std::max(largest, e - b);
  }
  if (phase == RingOp::Phase::reduce_scatter) op->scratch.resize(largest);
  op->done = std::move(done);
  op->start();
}

}  // namespace

void Collectives::all_reduce(const std::vector<int>& group, float* data, std::size_t count, Completion done) {
  start_ring(t_, group, data, count, next_tag_base(group), RingOp::Phase::reduce_scatter, true, std::move(done));
}

void Collectives::reduce_scatter(const std::vector<int>& group, float* data, std::size_t count, Completion done) {
  start_ring(t_, group, data, count, next_tag_base(group), RingOp::Phase::reduce_scatter, false, std::move(done));
}

void Collectives::all_gather(const std::vector<int>& group, float* data, std::size_t count, Completion done) {
  start_ring(t_, group, data, count, next_tag_base(group), RingOp::Phase::all_gather, false, std::move(done));
}

void Collectives::broadcast(const std::vector<int>& group, int root, float* data, std::size_t count, Completion done) {
  const Tag tag = next_tag_base(group);
  const int n = static_cast<int>(group.size());
  const int me = index_in(group, t_.rank());
  if (me == n || root < 0 || root >= n) {
    done(make_error("broadcast: rank ", std::to_string(t_.rank()), " is not in the group or the root is out of range"));
    return;
  }
  auto op = std::make_shared<ChainBroadcast>();
  op->t = &t_;
  op->data = data;
  op->count = count;
  const int pos = mod(me - root, n);  // position along the chain from the root
  if (pos > 0) op->prev = group[static_cast<std::size_t>(mod(me - 1, n))];
  if (pos < n - 1) op->next = group[static_cast<std::size_t>(mod(me + 1, n))];
  op->tag_base = tag;
  op->done = std::move(done);
  op->start();
}

}  // namespace troupe
