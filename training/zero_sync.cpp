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
  Communicator* replicas = nullptr;  // the gradients and parameters (device tensors)
  HostCommunicator* norms = nullptr;  // LAMB's norms (host floats)
  const ExecContext* ctx = nullptr;
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
  bool sharded() const { return replicas->shared(); }
  // Bucket b of a flat buffer, as the tensor its collective runs over (the
  // communicator moves device memory as its path does: CM-2).
  Tensor bucket(const Tensor& flat, std::size_t b) const {
    return flat.view(buckets[b].begin, {buckets[b].size()});
  }
};

ZeroChunk::ZeroChunk(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ZeroChunk::~ZeroChunk() = default;

Expected<std::unique_ptr<ZeroChunk>> ZeroChunk::create(const ExecContext& ctx, GptStage& model, Communicator& replicas,
                                                       HostCommunicator& norms, OptimizerConfig optimizer,
                                                       ZeroOptions options) {
  if (options.bucket_elements < 1) return make_error("parallel.bucket_mb must be > 0");
  auto impl = std::make_unique<Impl>();
  impl->model = &model;
  impl->replicas = &replicas;
  impl->norms = &norms;
  impl->ctx = &ctx;
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
  impl->inbox = options.inbox;
  if (!impl->inbox) {
    impl->own_inbox = std::make_unique<FlagInbox>();
    impl->inbox = impl->own_inbox.get();
  }
  // This replica's shard of every bucket, in ascending offset order.
  std::vector<ElementRange> owned;
  const int group = replicas.size(), me = replicas.index();
  for (const auto& b : impl->buckets) {
    auto [lo, hi] = comm_chunk(static_cast<std::size_t>(b.size()), group, me);
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
  m.replicas->reduce_scatter(m.bucket(m.model->flat_grads(), b), m.ctx->stream, m.inbox->expect(m.reduced(b)));
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
      if (z.sharded() && !in_memory) done.synchronize(), in_memory = true;  // the bucket's gradients are final
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
  HostCommunicator* tp = m.options.tensor_parallel_norms;
  if (m.sharded() || tp)
    reduce = [&](std::vector<double>& sums) {
      std::vector<float> f(sums.begin(), sums.end());
      if (m.sharded()) status = wait_for([&](Completion c) { m.norms->all_reduce(f.data(), f.size(), std::move(c)); });
      if (tp && status) {  // the whole tensor's norms: its pieces' summed, a replicated tensor's taken from member 0
        const auto& params = m.model->params();
        for (std::size_t p = 0; p < params.size(); ++p)
          if (params[p].spec.replicated() && tp->index() != 0) f[2 * p] = f[2 * p + 1] = 0.0f;
        status = wait_for([&](Completion c) { tp->all_reduce(f.data(), f.size(), std::move(c)); });
      }
      std::copy(f.begin(), f.end(), sums.begin());
    };
  m.optimizer->step_with_global_norm(*m.model, lr, t, global_sum_squares, ctx, reduce);
  return status;
}

void ZeroChunk::gather_params() {
  Impl& m = *impl_;
  if (!m.sharded()) return;
  for (std::size_t b = 0; b < m.buckets.size(); ++b)
    m.replicas->all_gather(m.bucket(m.model->flat_params(), b), m.ctx->stream, m.inbox->expect(m.gathered(b)));
}

Status ZeroChunk::wait_params() {
  for (std::size_t b = 0; b < impl_->buckets.size(); ++b) TROUPE_TRY(impl_->inbox->wait(impl_->gathered(b)));
  return Status::success();
}

GptStage::ParamsNeeded ZeroChunk::params_needed() {
  return [this](std::int64_t begin, std::int64_t end) {
    Impl& m = *impl_;
    for (std::size_t b = 0; b < m.buckets.size(); ++b)
      if (m.buckets[b].begin < end && begin < m.buckets[b].end)
        (void)m.inbox->wait(m.gathered(b));  // a failed gather is reported by wait_params()
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
