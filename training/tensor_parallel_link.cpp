// TensorParallelLink: the group's sums and gathers, waited for in the inbox.
#include "training/tensor_parallel_link.hpp"

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
  tp.all_reduce = [this](const Tensor& t) { run("all-reduce", t, Collective::all_reduce); };
  tp.all_gather = [this](const Tensor& t) { run("all-gather", t, Collective::all_gather); };
  tp.reduce_scatter = [this](const Tensor& t) { run("reduce-scatter", t, Collective::reduce_scatter); };
  return tp;
}

void TensorParallelLink::run(const char* what, const Tensor& t, Collective op) {
  if (!failed_) return;  // TL-1: the step is abandoned at the next check
  const auto start = std::chrono::steady_clock::now();
  // One collective at a time: each is waited for before the next is issued.
  const EventKey key{StageEvent::tensor_parallel_done, 0, 0};
  Completion done = inbox_.expect(key);
  switch (op) {
    case Collective::all_reduce: group_.all_reduce(t, ctx_.stream, std::move(done)); break;
    case Collective::all_gather: group_.all_gather(t, ctx_.stream, std::move(done)); break;
    case Collective::reduce_scatter: group_.reduce_scatter(t, ctx_.stream, std::move(done)); break;
  }
  Status st = inbox_.wait(key);
  // Issued and waited for at once: all of it exposed (its issue to its completion, as the inbox saw them).
  const double waited = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  waited_us_ += waited;
  comm_us_ += waited;
  if (!st) {
    Error e = st.error();  // its origin kept: a peer's failure stays the peer's
    e.message = std::string("the tensor-parallel ") + what + ": " + e.message;
    failed_ = std::move(e);
  }
}

int TensorParallelLink::start(const Tensor& t, Collective op) {
  const int ticket = next_ticket_++;
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
  waited_us_ += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const auto [armed, delivered] = inbox_.times(key);  // its issue to its completion, hidden or not
  if (delivered > armed) comm_us_ += std::chrono::duration<double, std::micro>(delivered - armed).count();
  if (!st) {
    Error e = st.error();
    e.message = "the tensor-parallel collective " + std::to_string(ticket) + " of this instruction: " + e.message;
    failed_ = std::move(e);
  }
}

Status TensorParallelLink::check(double& waited_us, double& comm_us) {
  next_ticket_ = 1;
  waited_us += waited_us_;
  comm_us += comm_us_;
  waited_us_ = comm_us_ = 0;
  Status out = std::move(failed_);
  failed_ = Status::success();
  return out;
}

}  // namespace troupe
