// ZeroChunk: buckets, readiness counting, sharded optimizer, gathers.
#include "training/zero_sync.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>

namespace troupe {

std::vector<ElementRange> make_buckets(const GptStage& model, std::int64_t bucket_elements, const std::string& alone) {
  std::vector<ElementRange> out;
  const auto& params = model.params();
  std::int64_t end = model.params().empty() ? 0 : params.back().offset + params.back().value.numel();
  std::int64_t begin = end;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const bool single = !alone.empty() && it->spec.name == alone;
    if (single && begin < end) {  // close what is open before the lone tensor
      out.push_back({begin, end});
      end = begin;
    }
    begin = it->offset;
    if (single || end - begin >= bucket_elements) {
      out.push_back({begin, end});
      end = begin;
    }
  }
  if (begin < end) out.push_back({begin, end});
  return out;
}

struct ZeroChunk::Impl {
  GptStage* model = nullptr;
  Collectives* coll = nullptr;
  std::vector<int> replicas;
  int me = 0;
  ZeroOptions options;
  std::vector<ElementRange> buckets;
  std::vector<std::int64_t> remaining;  // gradient elements not yet final, per bucket
  std::size_t deferred = SIZE_MAX;      // index of the deferred bucket
  std::unique_ptr<Inbox> own_inbox;
  Inbox* inbox = nullptr;
  EventKey reduced(std::size_t b) const { return {StageEvent::bucket_reduced, options.chunk, static_cast<int>(b)}; }
  EventKey gathered(std::size_t b) const { return {StageEvent::params_gathered, options.chunk, static_cast<int>(b)}; }
  std::vector<bool> launched;
  std::optional<StageOptimizer> optimizer;
  bool sharded() const { return replicas.size() > 1; }

  // Where the device's memory is not the host's (staged): the collectives run
  // over pinned host mirrors of the flat gradients and parameters. A bucket's
  // gradients go down before its reduce-scatter and this replica's shard comes
  // back up before the update; the shard goes down after the update and the
  // gathered bucket comes back up before a forward reads it.
  const ExecContext* ctx = nullptr;
  bool staged = false;
  Tensor grads_host, params_host;
  std::vector<bool> uploaded;  // per bucket: gathered parameters copied back this step
  ElementRange owned(std::size_t b) const {
    auto [lo, hi] = Collectives::chunk(static_cast<std::size_t>(buckets[b].size()), static_cast<int>(replicas.size()), me);
    return {buckets[b].begin + static_cast<std::int64_t>(lo), buckets[b].begin + static_cast<std::int64_t>(hi)};
  }
  // Enqueues dst[r] = src[r] over element range r of two flat f32 tensors.
  Status copy_range(Tensor& dst, const Tensor& src, ElementRange r) const {
    if (r.size() <= 0) return Status::success();
    return ctx->copy(dst.view(r.begin, {r.size()}), src.view(r.begin, {r.size()}));
  }
  float* grads_for_collectives() { return staged ? grads_host.f32() : model->flat_grads().f32(); }
  float* params_for_collectives() { return staged ? params_host.f32() : model->flat_params().f32(); }
  // Copies gathered bucket b back to the device once per step (enqueued).
  Status upload(std::size_t b) {
    if (!staged || uploaded[b]) return Status::success();
    uploaded[b] = true;
    return copy_range(model->flat_params(), params_host, buckets[b]);
  }
};

ZeroChunk::ZeroChunk(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ZeroChunk::~ZeroChunk() = default;

Expected<std::unique_ptr<ZeroChunk>> ZeroChunk::create(const ExecContext& ctx, GptStage& model, Collectives& collectives,
                                                       std::vector<int> replicas, int me, OptimizerConfig optimizer,
                                                       ZeroOptions options) {
  if (options.bucket_elements < 1) return make_error("parallel.bucket_mb must be > 0");
  auto impl = std::make_unique<Impl>();
  impl->model = &model;
  impl->coll = &collectives;
  impl->replicas = std::move(replicas);
  impl->me = me;
  impl->options = options;
  impl->buckets = make_buckets(model, options.bucket_elements, options.deferred_param);
  if (!options.deferred_param.empty()) {
    const StageParam* p = model.find(options.deferred_param);
    if (!p) return make_error("zero: no parameter ", options.deferred_param, " on this stage");
    for (std::size_t b = 0; b < impl->buckets.size(); ++b)
      if (impl->buckets[b].begin == p->offset) impl->deferred = b;
  }
  const std::size_t n = impl->buckets.size();
  impl->remaining.assign(n, 0);
  impl->launched.assign(n, false);
  impl->uploaded.assign(n, true);
  impl->ctx = &ctx;
  impl->staged = !ctx.device.host_accessible() && impl->sharded();
  if (impl->staged) {
    auto g = Tensor::pinned_host(ctx.device, model.flat_grads().shape());
    auto p = Tensor::pinned_host(ctx.device, model.flat_params().shape());
    if (!g) return g.error();
    if (!p) return p.error();
    impl->grads_host = *g;
    impl->params_host = *p;
  }
  impl->inbox = options.inbox;
  if (!impl->inbox) {
    impl->own_inbox = std::make_unique<FlagInbox>();
    impl->inbox = impl->own_inbox.get();
  }
  // This replica's shard of every bucket, in ascending offset order.
  std::vector<ElementRange> owned;
  const int group = static_cast<int>(impl->replicas.size());
  for (const auto& b : impl->buckets) {
    auto [lo, hi] = Collectives::chunk(static_cast<std::size_t>(b.size()), group, me);
    if (hi > lo) owned.push_back({b.begin + static_cast<std::int64_t>(lo), b.begin + static_cast<std::int64_t>(hi)});
  }
  std::sort(owned.begin(), owned.end(), [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
  auto opt = StageOptimizer::create(ctx, model, optimizer, owned);
  if (!opt) return opt.error();
  impl->optimizer.emplace(std::move(*opt));
  return std::unique_ptr<ZeroChunk>(new ZeroChunk(std::move(impl)));
}

int ZeroChunk::bucket_count() const { return static_cast<int>(impl_->buckets.size()); }
const std::vector<ElementRange>& ZeroChunk::buckets() const { return impl_->buckets; }
const StageOptimizer& ZeroChunk::optimizer() const { return *impl_->optimizer; }
StageOptimizer& ZeroChunk::optimizer() { return *impl_->optimizer; }

void ZeroChunk::start_reduce(std::size_t b) {
  Impl& m = *impl_;
  m.launched[b] = true;
  if (!m.sharded()) return;
  const ElementRange r = m.buckets[b];
  if (m.staged) {
    if (Status st = m.copy_range(m.grads_host, m.model->flat_grads(), r); !st) {
      m.inbox->expect(m.reduced(b))(st);  // the wait for this bucket reports it
      return;
    }
    m.ctx->stream.synchronize();
  }
  m.coll->reduce_scatter(m.replicas, m.grads_for_collectives() + r.begin, static_cast<std::size_t>(r.size()),
                         m.inbox->expect(m.reduced(b)));
}

GptStage::GradsReady ZeroChunk::grads_ready() {
  Impl& m = *impl_;
  for (std::size_t b = 0; b < m.buckets.size(); ++b) {
    m.remaining[b] = m.buckets[b].size();
    m.launched[b] = false;
  }
  return [this](std::int64_t begin, std::int64_t end, const Event& done) {
    Impl& z = *impl_;
    bool in_memory = false;  // waited for once, and only when a bucket starts
    for (std::size_t b = 0; b < z.buckets.size(); ++b) {
      const std::int64_t lo = std::max(begin, z.buckets[b].begin), hi = std::min(end, z.buckets[b].end);
      if (hi <= lo) continue;
      z.remaining[b] -= hi - lo;
      if (z.remaining[b] != 0 || b == z.deferred) continue;
      if (z.sharded() && !in_memory) done.synchronize(), in_memory = true;  // a reduction reads them
      start_reduce(b);
    }
  };
}

void ZeroChunk::reduce_deferred() {
  if (impl_->deferred != SIZE_MAX) start_reduce(impl_->deferred);
}

int ZeroChunk::finished_buckets() const {
  int n = 0;
  for (std::size_t b = 0; b < impl_->buckets.size(); ++b)
    if (impl_->launched[b] && impl_->inbox->arrived(impl_->reduced(b))) ++n;
  return n;
}

Status ZeroChunk::wait_grads() {
  Impl& m = *impl_;
  for (std::size_t b = 0; b < m.buckets.size(); ++b) {
    if (!m.launched[b]) return make_error("zero: bucket ", std::to_string(b), " was never reduced this step");
    TROUPE_TRY(m.inbox->wait(m.reduced(b)));
    if (m.staged) TROUPE_TRY(m.copy_range(m.model->flat_grads(), m.grads_host, m.owned(b)));  // this shard's sum
  }
  return Status::success();
}

double ZeroChunk::owned_sum_squares(const ExecContext& ctx, bool skip_deferred) const {
  return impl_->optimizer->owned_sum_squares(*impl_->model, ctx, skip_deferred ? impl_->options.deferred_param : "");
}

Status ZeroChunk::step(float lr, int t, double global_sum_squares, const ExecContext& ctx) {
  Impl& m = *impl_;
  Status status;
  NormReducer reduce;
  if (m.sharded())
    reduce = [&](std::vector<double>& sums) {
      std::vector<float> f(sums.begin(), sums.end());
      status = wait_for([&](Completion c) { m.coll->all_reduce(m.replicas, f.data(), f.size(), std::move(c)); });
      std::copy(f.begin(), f.end(), sums.begin());
    };
  m.optimizer->step_with_global_norm(*m.model, lr, t, global_sum_squares, ctx, reduce);
  return status;
}

void ZeroChunk::gather_params() {
  Impl& m = *impl_;
  if (!m.sharded()) return;
  if (m.staged) {
    Status st;
    for (std::size_t b = 0; b < m.buckets.size() && st; ++b) st = m.copy_range(m.params_host, m.model->flat_params(), m.owned(b));
    m.ctx->stream.synchronize();  // the updated shards are in the mirror before the peers read them
    m.uploaded.assign(m.buckets.size(), false);
    if (!st) {
      for (std::size_t b = 0; b < m.buckets.size(); ++b) m.inbox->expect(m.gathered(b))(st);
      return;
    }
  }
  for (std::size_t b = 0; b < m.buckets.size(); ++b)
    m.coll->all_gather(m.replicas, m.params_for_collectives() + m.buckets[b].begin,
                       static_cast<std::size_t>(m.buckets[b].size()), m.inbox->expect(m.gathered(b)));
}

Status ZeroChunk::wait_params() {
  for (std::size_t b = 0; b < impl_->buckets.size(); ++b) {
    TROUPE_TRY(impl_->inbox->wait(impl_->gathered(b)));
    TROUPE_TRY(impl_->upload(b));
  }
  return Status::success();
}

GptStage::ParamsNeeded ZeroChunk::params_needed() {
  return [this](std::int64_t begin, std::int64_t end) {
    Impl& m = *impl_;
    for (std::size_t b = 0; b < m.buckets.size(); ++b)
      if (m.buckets[b].begin < end && begin < m.buckets[b].end && m.inbox->wait(m.gathered(b)))  // errors: wait_params()
        (void)m.upload(b);
  };
}

namespace {

void record(Inbox& inbox, const std::vector<ElementRange>& buckets, EventKey key, const char* what,
            const char* category, TraceWriter& trace, int track, int step) {
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    key.index = static_cast<int>(b);
    const auto [armed, done] = inbox.times(key);
    if (done < armed) continue;  // not delivered (yet)
    trace.span(track, what + std::to_string(b), category, trace.at_us(armed), trace.at_us(done) - trace.at_us(armed),
               {{"step", step}, {"chunk", key.chunk}, {"bytes", buckets[b].size() * 4}});
  }
}

}  // namespace

void ZeroChunk::record_reduces(TraceWriter& trace, int track, int step) const {
  if (impl_->sharded())
    record(*impl_->inbox, impl_->buckets, impl_->reduced(0), "reduce-scatter b", "reduce_scatter", trace, track, step);
}

void ZeroChunk::record_gathers(TraceWriter& trace, int track, int step) const {
  if (impl_->sharded())
    record(*impl_->inbox, impl_->buckets, impl_->gathered(0), "all-gather b", "all_gather", trace, track, step);
}

}  // namespace troupe
