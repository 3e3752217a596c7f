// TensorParallelLink: the group's sums and gathers, waited for in the inbox.
#include "training/tensor_parallel_link.hpp"

#include <algorithm>
#include <chrono>

#include "backends/comm/communicator.hpp"

namespace troupe {

TensorParallelLink::TensorParallelLink(Communicator& group, const ExecContext& ctx, Inbox& inbox)
    : group_(group), ctx_(ctx), inbox_(inbox) {}

TensorParallel TensorParallelLink::ops(bool sequence_parallel, int overlap_chunks) {
  TensorParallel tp;
  tp.sequence_parallel = sequence_parallel;
  tp.overlap_chunks = overlap_chunks;
  tp.start = [this](const Tensor& t, Collective op) { return start(t, op); };
  tp.finish = [this](int ticket) { finish(ticket); };
  tp.shard = TpShard{group_.size(), group_.index()};
  tp.all_reduce = [this](const Tensor& t) { run(t, Collective::all_reduce); };
  tp.all_gather = [this](const Tensor& t) { run(t, Collective::all_gather); };
  tp.reduce_scatter = [this](const Tensor& t) { run(t, Collective::reduce_scatter); };
  return tp;
}

namespace {

const char* name_of(TensorParallel::Op op) {
  switch (op) {
    case TensorParallel::Op::all_reduce: return "all-reduce";
    case TensorParallel::Op::all_gather: return "all-gather";
    case TensorParallel::Op::reduce_scatter: return "reduce-scatter";
  }
  return "collective";
}

}  // namespace

// Issued and waited for at once: all of its time exposed.
void TensorParallelLink::run(const Tensor& t, Collective op) { finish(start(t, op)); }

int TensorParallelLink::start(const Tensor& t, Collective op) {
  const int ticket = static_cast<int>(issued_.size()) + 1;
  issued_.push_back(op);
  if (!failed_) return ticket;  // TL-1: the step is abandoned at the next check
  Completion done = inbox_.expect(EventKey{StageEvent::tensor_parallel_done, 0, ticket});
  switch (op) {
    case Collective::all_reduce: group_.all_reduce(t, ctx_.stream, std::move(done)); break;
    case Collective::all_gather: group_.all_gather(t, ctx_.stream, std::move(done)); break;
    case Collective::reduce_scatter: group_.reduce_scatter(t, ctx_.stream, std::move(done)); break;
  }
  return ticket;
}

void TensorParallelLink::finish(int ticket) {
  if (!failed_) return;
  const EventKey key{StageEvent::tensor_parallel_done, 0, ticket};
  const auto start = std::chrono::steady_clock::now();
  Status st = inbox_.wait(key);
  const auto woke = std::chrono::steady_clock::now();
  auto us = [](auto d) { return std::chrono::duration<double, std::micro>(d).count(); };
  times_.waited_us += us(woke - start);
  const auto [armed, delivered] = inbox_.times(key);  // its issue to its completion, hidden or not
  if (delivered > armed) {
    times_.comm_us += us(delivered - armed);
    // The wait's overlap with that span: a wake-up after the completion is not communication.
    const auto from = std::max(start, armed), to = std::min(woke, delivered);
    if (to > from) times_.exposed_us += us(to - from);
  }
  if (!st) {
    Error e = st.error();  // its origin kept: a peer's failure stays the peer's
    e.message = std::string("the tensor-parallel ") + name_of(issued_[static_cast<std::size_t>(ticket) - 1]) + ": " +
                e.message;
    failed_ = std::move(e);
  }
}

Status TensorParallelLink::check(TpCollectiveTimes& times) {
  issued_.clear();
  times += times_;
  times_ = {};
  Status out = std::move(failed_);
  failed_ = Status::success();
  return out;
}

}  // namespace troupe
