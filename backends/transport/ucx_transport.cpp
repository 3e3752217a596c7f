// UcxTransport: context/worker/endpoint handles in RAII wrappers, a queue of
// operations posted by whichever thread drives the worker (the progress
// thread, or a caller waiting in drive: WorkerDriving), callbacks into
// completions.
//
// UX-1, UX-2, UX-3 (who drives the worker, and when): worker_driving.hpp.
//       Whatever the worker's holder owns (inflight, the completions' list,
//       the wire tags) is touched under its worker_mutex() alone,
//       as the worker is (UCS_THREAD_MODE_SERIALIZED).
// UX-4, UX-10, UX-11  Every tag carries a check byte of the membership
//       generation and, under the job's key, is masked per pair of ranks
//       (wire_tags.hpp): after begin_generation a message sent in an older
//       generation never matches a receive, nor one sent without the key;
//       both are swept and counted (begin_generation, refuse_unproven).
// UX-5  renew_worker replaces the worker, not only the endpoints: a peer that
//       died in the middle of a rendezvous could leave the survivor's worker
//       unable to complete rendezvous with the process that replaced it (new
//       endpoints did not help: 3 of 1,197 killed-node runs; 0 of 1,900
//       with renewal). No
//       operation outlives its worker: what is in flight fails first, and a
//       request UCX still holds is left to it (leaked) rather than freed.
// UX-6  An operation that fails with a UCX error of its own (not a
//       cancellation, not a peer marked failed: an endpoint timeout, say)
//       marks the transport faulted until its worker is renewed; the node
//       renews a faulted transport's worker in the next recovery (N-9), since
//       an endpoint in error stays in error.
// UX-7  A driver posts what its `start` sends or receives itself, at once
//       (no queue, no lock but the worker's), after whatever is queued (one
//       thread's operations keep their order); a send UCX completes inside
//       the call (eager) needs no request.
// UX-8  Completions never run inside UCX's callbacks or inside a post: UCX
//       calls back into a list (`completed`), and the thread holding the
//       worker runs the list once ucp_worker_progress returns, in order,
//       posting what they send at once (UX-7). A completion that works long
//       (a collective copying or adding 1 MiB it was lent) no longer holds
//       back what the completions before it sent: with posts queued until
//       the whole progress call had returned, two processes' all-gathers
//       after a reduce-scatter ran one after the other in about half the
//       iterations (16 MiB between 2 processes: 480-540 us, not 250-290).
//       A process placed on a shared core (UcxOptions::shares_core) runs
//       completions inside the callbacks as before. 4 processes on 2 cores,
//       the VM's slow state, each op timed by its slowest rank with a
//       barrier after it (4 repetitions, twice each way): deferred,
//       reduce-scatter and all-gather of 4 MiB 13.7-15.5 GB/s, inside
//       16.7-17.7; all-reduce of 1 MiB 12.5-14.2, inside 13.7-14.5; even at
//       16 MiB. (A larger loss measured first, 5 GB/s in some repetitions,
//       was the benchmark's: a rank that finished first wrote its next
//       iteration's data on the core its peer still needed.)
#include "backends/transport/ucx_transport.hpp"

#include "backends/transport/live_pool.hpp"
#include "backends/transport/wire_tags.hpp"
#include "backends/transport/worker_driving.hpp"
#include "common/message_key.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

namespace troupe {
namespace {

// Where UX-11's sweep receives what it drops: at most this much of a
// message (a longer one is truncated; a forger chooses the length it claims).
constexpr std::size_t kTrashBytes = std::size_t{1} << 20;

Error ucx_error(const char* call, int rank, ucs_status_t st) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return make_error(call, " failed on rank ", std::to_string(rank), " (", host, "): ", ucs_status_string(st));
}

struct ContextFree {
  void operator()(ucp_context_h c) const { ucp_cleanup(c); }
};
struct WorkerFree {
  void operator()(ucp_worker_h w) const { ucp_worker_destroy(w); }
};
using ContextPtr = std::unique_ptr<std::remove_pointer_t<ucp_context_h>, ContextFree>;
using WorkerPtr = std::unique_ptr<std::remove_pointer_t<ucp_worker_h>, WorkerFree>;

}  // namespace

// UX-7: the transport whose driver this thread is, while its `start` runs.
thread_local UcxTransport::Impl* t_driving = nullptr;

// UX-7: sets whose driver this thread is for a scope (nullptr: none), then puts back what it was.
class DrivingScope {
 public:
  explicit DrivingScope(UcxTransport::Impl* impl) : outer_(std::exchange(t_driving, impl)) {}
  ~DrivingScope() { t_driving = outer_; }
  DrivingScope(const DrivingScope&) = delete;
  DrivingScope& operator=(const DrivingScope&) = delete;

 private:
  UcxTransport::Impl* outer_;
};

struct UcxTransport::Impl final : WorkerDriving::Worker {
  enum class Kind { send, recv };
  struct Op {
    Kind kind = Kind::send;
    int peer = 0;
    Tag tag = 0;
    void* data = nullptr;
    std::size_t bytes = 0;
    Completion done;
  };
  // Lives from posting until its completion; a node of `inflight`.
  struct Request {
    Impl* impl = nullptr;
    Op op;
    void* ucx_request = nullptr;
  };
  using Requests = LivePool<Request>;
  using Node = Requests::Node;

  int rank = 0, size = 1;
  Requests inflight;  // UX-1; declared before the worker, which it outlives (LP-2)
  ContextPtr context;
  WorkerPtr worker;
  std::string address;
  std::vector<ucp_ep_h> eps;
  std::vector<std::atomic<bool>> failed;
  int worker_fd = -1;
  bool event_mode = false;   // sleep on UCX's event fd (restricts UCX to transports with events)
  bool peer_errors = false;  // UCX-level peer failure detection (restricts UCX to tcp here)
  std::unique_ptr<WorkerDriving> driving;  // UX-1, UX-2, UX-3: its worker_mutex() guards the worker
  std::mutex mu;
  std::atomic<int> queued_ops{0};  // ops or failures waiting in queue / to_fail
  bool placed_on_shared_core = false;    // UcxOptions::shares_core
  std::deque<Op> queue;
  std::deque<int> to_fail;
  std::vector<std::promise<void>> to_abort;  // abort_all() callers waiting for the progress thread
  std::vector<std::pair<std::uint64_t, std::promise<std::uint64_t>>> to_renew;  // begin_generation() callers
  struct Reconnect {
    int peer;
    std::string address;
    std::promise<Status> done;
  };
  std::vector<Reconnect> to_reconnect;  // reconnect() callers
  std::vector<std::promise<Expected<std::string>>> to_replace_worker;  // renew_worker() callers
  std::vector<std::atomic<bool>> talked;  // an operation with the peer was posted in this generation (UX-5)
  std::atomic<bool> faulted{false};        // an operation failed with a UCX error of its own (UX-6)
  std::vector<std::promise<std::uint64_t>> to_sweep;  // refuse_unproven() callers
  WireTags tags;            // UX-4, UX-10: every message's UCX tag (the worker's mutex)
  std::vector<char> trash;  // UX-11: where swept messages are received; never reallocated once sized

  Impl(int r, int n)
      : rank(r), size(n), failed(static_cast<std::size_t>(n)), talked(static_cast<std::size_t>(n)), tags(r, n) {}

  Error peer_error(int peer) const {
    return make_peer_error("transport peer rank ", std::to_string(peer), " failed (seen by rank ", std::to_string(rank), ")");
  }

  // Called after queued_ops was incremented (UX-2).
  void notify() { driving->notify(); }

  // Hands the progress thread (the worker's holder) a request on `queue`
  // and waits for its answer.
  template <class T>
  T ask(std::vector<std::promise<T>>& queue) {
    std::future<T> done;
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.emplace_back();
      done = queue.back().get_future();
      queued_ops.fetch_add(1);
    }
    notify();
    return done.get();
  }

  static void on_send(void* req, ucs_status_t st, void* user) {
    auto* n = static_cast<Node*>(user);
    n->value.impl->finish(*n, req, st, SIZE_MAX);
  }
  static void on_recv(void* req, ucs_status_t st, const ucp_tag_recv_info_t* info, void* user) {
    auto* n = static_cast<Node*>(user);
    n->value.impl->finish(*n, req, st, st == UCS_OK ? info->length : SIZE_MAX);
  }
  // Runs a completion with direct posting off (UX-7).
  static void complete(const Completion& done, const Status& result) {
    DrivingScope off(nullptr);
    done(result);
  }
  // UX-8 (the worker's mutex): what UCX completed, in order, for run_completed.
  std::deque<std::pair<Completion, Status>> completed;
  // UX-8 (the worker's mutex, outside any UCX call): runs what completed, first
  // first, each with direct posting on (this thread holds the worker); what
  // they post and UCX completes at once runs too. A call made inside a
  // completion (drain, before it answers an abort) goes on with the same
  // list, so the order holds and nothing listed is left behind. True if
  // anything ran.
  bool run_all_completed() {
    bool ran = false;
    DrivingScope scope(this);
    while (!completed.empty()) {
      auto [done, result] = std::move(completed.front());
      completed.pop_front();
      done(result);
      ran = true;
    }
    return ran;
  }
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t) {
    auto* self = static_cast<std::pair<Impl*, int>*>(arg);
    // An endpoint that reconnect() closed may still report: only the current one speaks for the peer.
    if (ep != self->first->eps[static_cast<std::size_t>(self->second)]) return;
    self->first->fail_peer(self->second);
  }
  std::vector<std::pair<Impl*, int>> ep_args;

  void finish(Node& n, void* ucx_request, ucs_status_t st, std::size_t received) {
    Request* r = &n.value;
    Status result;
    if (st == UCS_ERR_CANCELED || failed[static_cast<std::size_t>(r->op.peer)]) {
      result = peer_error(r->op.peer);
    } else if (st != UCS_OK) {
      faulted.store(true);
      result = ucx_error(r->op.kind == Kind::send ? "ucp_tag_send_nbx" : "ucp_tag_recv_nbx", rank, st);
    } else if (r->op.kind == Kind::recv && received != r->op.bytes) {
      result = make_error("rank ", std::to_string(r->op.peer), " sent ", std::to_string(received),
                          " bytes to rank ", std::to_string(rank), ", which expected ", std::to_string(r->op.bytes));
    }
    Completion done = std::move(r->op.done);  // empty if fail_peer already reported it
    if (ucx_request) ucp_request_free(ucx_request);
    inflight.release(n);
    if (!done) return;
    if (placed_on_shared_core) complete(done, result);  // UX-8: inside the callback, posting off
    else completed.emplace_back(std::move(done), std::move(result));
  }

  // A caller's operation: posted at once by this worker's driver (UX-7: it
  // holds the worker; after what is queued), else queued for whoever holds it.
  void submit(Op op) {
    if (t_driving == this) {
      if (queued_ops.load(std::memory_order_acquire) != 0) drain();
      return post(std::move(op));
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(std::move(op));
      queued_ops.fetch_add(1);
    }
    notify();
  }

  void post(Op op) {
    // A peer without an endpoint (a renewed worker not yet reconnected to it) counts as failed.
    if (failed[static_cast<std::size_t>(op.peer)] || (op.kind == Kind::send && !eps[static_cast<std::size_t>(op.peer)])) {
      complete(op.done, peer_error(op.peer));
      return;
    }
    talked[static_cast<std::size_t>(op.peer)].store(true, std::memory_order_relaxed);
    Node& n = inflight.acquire(Request{this, std::move(op), nullptr});
    Request* r = &n.value;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.user_data = &n;
    ucs_status_ptr_t sp;
    if (r->op.kind == Kind::send) {
      p.cb.send = &on_send;
      sp = ucp_tag_send_nbx(eps[static_cast<std::size_t>(r->op.peer)], r->op.data, r->op.bytes,
                            tags.send(r->op.peer, r->op.tag), &p);
    } else {
      p.cb.recv = &on_recv;
      // A receive that completes inside the call must say how much arrived:
      // UCX 1.13 left recv_info unset for a message it found already
      // arrived, so receives always get a request (and the callback, with
      // the length, perhaps inside the call).
      p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      sp = ucp_tag_recv_nbx(worker.get(), r->op.data, r->op.bytes, tags.recv(r->op.peer, r->op.tag), ~Tag{0}, &p);
    }
    if (UCS_PTR_IS_ERR(sp)) {
      finish(n, nullptr, UCS_PTR_STATUS(sp), 0);
      return;
    }
    // UCX may run the callback inside the call (it did even when asked not
    // to complete at once): then finish() has freed the UCX request and `n`.
    if (!n.live()) return;
    // A send completed inside the call (UX-7): no request, no callback to come.
    if (sp == nullptr) {
      finish(n, nullptr, UCS_OK, SIZE_MAX);
      return;
    }
    r->ucx_request = sp;
  }

  // Progress thread: a peer is dead. Receives expecting it are cancelled (UCX
  // then calls back with UCS_ERR_CANCELED); sends to it are reported failed at
  // once, since a send over shared memory may never learn of the death. Their
  // UCX requests are freed whenever UCX completes them.
  void fail_peer(int peer) {
    failed[static_cast<std::size_t>(peer)] = true;
    std::vector<void*> cancel;
    std::vector<Completion> report;
    inflight.for_each([&](Node& n) {
      Request& r = n.value;
      if (r.op.peer != peer || !r.ucx_request) return;
      if (r.op.kind == Kind::recv) cancel.push_back(r.ucx_request);
      else if (r.op.done) report.push_back(std::move(r.op.done));
    });
    for (void* req : cancel) ucp_request_cancel(worker.get(), req);
    for (auto& done : report) complete(done, peer_error(peer));
  }

  void drain() {
    std::deque<Op> ops;
    std::deque<int> fails;
    std::vector<std::promise<void>> aborts;
    std::vector<std::pair<std::uint64_t, std::promise<std::uint64_t>>> renewals;
    std::vector<Reconnect> reconnects;
    std::vector<std::promise<Expected<std::string>>> replacements;
    std::vector<std::promise<std::uint64_t>> sweeps;
    {
      std::lock_guard<std::mutex> lock(mu);
      ops.swap(queue);
      fails.swap(to_fail);
      aborts.swap(to_abort);
      renewals.swap(to_renew);
      reconnects.swap(to_reconnect);
      replacements.swap(to_replace_worker);
      sweeps.swap(to_sweep);
      queued_ops.store(0, std::memory_order_release);
    }
    // UX-8: what an action failed has been reported before its caller hears
    // that it is done (an aborted receive's completion may no longer touch
    // the caller's buffers once abort_all returned).
    for (int peer : fails) fail_peer(peer);
    for (auto& promise : replacements) {
      auto address = replace_worker();
      run_all_completed();
      promise.set_value(std::move(address));
    }
    for (auto& r : reconnects) {
      fail_peer(r.peer);
      close_ep(r.peer);
      auto opened = open_ep(r.peer, r.address);
      run_all_completed();
      r.done.set_value(std::move(opened));
    }
    for (auto& [generation, promise] : renewals) {
      const std::uint64_t dropped = renew(generation);
      run_all_completed();
      promise.set_value(dropped);
    }
    for (auto& promise : sweeps) promise.set_value(sweep().forged);
    for (auto& op : ops) post(std::move(op));
    if (aborts.empty()) return;
    fail_everything();
    run_all_completed();
    for (auto& a : aborts) a.set_value();
  }

  // UX-4: everything of the old generation fails, every peer is alive again,
  // and tags carry the new generation's check byte; the old generations'
  // messages that arrived unasked are swept (UX-11) and counted.
  std::uint64_t renew(std::uint64_t generation) {
    fail_everything();
    for (auto& f : failed) f = false;
    for (auto& t : talked) t.store(false, std::memory_order_relaxed);
    tags.begin(generation);
    return sweep().stale;
  }

  struct Swept {
    std::uint64_t stale = 0, forged = 0;
  };
  // UX-11 (the worker's mutex): receives and drops what no receive of this
  // generation can match; what proves no key is also counted as refused
  // (count_unauthenticated, with the control plane's refusals).
  Swept sweep() {
    // What arrived while nothing was posted still sits in the transports: in
    // UCX's unexpected queue only once the worker progressed.
    for (int i = 0; i < 1000 && ucp_worker_progress(worker.get()) != 0; ++i) {
    }
    if (trash.empty()) trash.resize(kTrashBytes);
    Swept out;
    for (const WireTags::Pattern& pattern : tags.sweep_patterns()) {
      ucp_tag_recv_info_t info{};
      while (ucp_tag_message_h m = ucp_tag_probe_nb(worker.get(), pattern.tag, pattern.mask, 1, &info)) {
        ucp_request_param_t p{};
        const std::size_t kept = std::min(info.length, trash.size());
        ucs_status_ptr_t req = ucp_tag_msg_recv_nbx(worker.get(), trash.data(), kept, m, &p);
        if (UCS_PTR_IS_PTR(req)) {
          for (int i = 0; i < 100000 && ucp_request_check_status(req) == UCS_INPROGRESS; ++i)
            ucp_worker_progress(worker.get());
          ucp_request_free(req);
        }
        if (pattern.forged) count_unauthenticated();
        ++(pattern.forged ? out.forged : out.stale);
      }
    }
    return out;
  }

  // Every peer failed: receives cancelled (UCX completes them inside
  // ucp_request_cancel), sends reported. Then progress until no receive can
  // still land in a user buffer.
  void fail_everything() {
    for (int p = 0; p < size; ++p) fail_peer(p);
    for (int i = 0; i < 1000 && has_pending_recv(); ++i) ucp_worker_progress(worker.get());
  }
  bool has_pending_recv() const {
    bool any = false;
    inflight.for_each([&](const Node& n) { any = any || n.value.op.kind == Kind::recv; });
    return any;
  }

  // WorkerDriving::Worker (UX-1: the caller holds the worker's mutex).
  // One round: posts what is queued, progresses until nothing happens, runs
  // what completed (UX-8). True if anything happened.
  bool work() override {
    bool busy = queued_ops.load(std::memory_order_acquire) != 0;
    if (busy) drain();
    while (ucp_worker_progress(worker.get()) != 0) busy = true;
    return run_all_completed() || busy;
  }

  bool in_flight() const override { return !inflight.empty(); }
  // seq_cst: the progress thread's and a leaving driver's Dekker with notify() (UX-2).
  bool queued() const override { return queued_ops.load() != 0; }
  // UX-7: what `start` posts, this thread holding the worker, is posted at
  // once; UX-8: what completed inside those posts (an eager send) runs before
  // the worker is let go.
  void drive_start(const std::function<void()>& start) override {
    if (start) {
      DrivingScope scope(this);
      start();
    }
    run_all_completed();
  }
  void run_completed() override { run_all_completed(); }
  bool arm() override { return ucp_worker_arm(worker.get()) != UCS_ERR_BUSY; }
  int event_fd() const override { return worker_fd; }

  // An endpoint to `peer` at its worker `address` (the worker's mutex, or before the progress thread runs).
  Status open_ep(int peer, const std::string& address) {
    ep_args[static_cast<std::size_t>(peer)] = {this, peer};
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
    ep.err_mode = peer_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    ep.err_handler.cb = &Impl::on_ep_error;
    ep.err_handler.arg = &ep_args[static_cast<std::size_t>(peer)];
    if (auto st = ucp_ep_create(worker.get(), &ep, &eps[static_cast<std::size_t>(peer)]); st != UCS_OK) {
      eps[static_cast<std::size_t>(peer)] = nullptr;
      return ucx_error("ucp_ep_create", rank, st);
    }
    return Status::success();
  }

  // Closes the endpoint to `peer` at once (its operations fail), progressing a bounded while.
  void close_ep(int peer) {
    ucp_ep_h& e = eps[static_cast<std::size_t>(peer)];
    if (!e) return;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t req = ucp_ep_close_nbx(e, &p);
    if (UCS_PTR_IS_PTR(req)) {
      for (int i = 0; i < 100000 && ucp_request_check_status(req) == UCS_INPROGRESS; ++i) ucp_worker_progress(worker.get());
      ucp_request_free(req);
    }
    e = nullptr;
  }

  // A worker from `context`: its address and (event mode) its event fd.
  Status open_worker() {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // UX-1: one thread at a time, not always the same
    ucp_worker_h w = nullptr;
    if (auto st = ucp_worker_create(context.get(), &wp, &w); st != UCS_OK) return ucx_error("ucp_worker_create", rank, st);
    worker.reset(w);
    ucp_address_t* addr = nullptr;
    std::size_t len = 0;
    if (auto st = ucp_worker_get_address(w, &addr, &len); st != UCS_OK) return ucx_error("ucp_worker_get_address", rank, st);
    address.assign(reinterpret_cast<const char*>(addr), len);
    ucp_worker_release_address(w, addr);
    if (event_mode)
      if (auto st = ucp_worker_get_efd(w, &worker_fd); st != UCS_OK) return ucx_error("ucp_worker_get_efd", rank, st);
    return Status::success();
  }

  // UX-5 (the worker's mutex): every operation fails and every endpoint closes, then
  // the worker is destroyed and a new one opened; every peer stays failed.
  Expected<std::string> replace_worker() {
    fail_everything();
    for (int p = 0; p < static_cast<int>(eps.size()); ++p) close_ep(p);
    for (int i = 0; i < 1000 && !inflight.empty(); ++i) ucp_worker_progress(worker.get());
    forget_inflight("the worker of rank " + std::to_string(rank) + " was renewed");
    worker.reset();
    TROUPE_TRY(open_worker());
    faulted.store(false);
    return address;
  }

  // What is still in flight is reported with `why` and forgotten; a request
  // UCX still holds keeps its user_data: leak it rather than free it under UCX.
  void forget_inflight(const std::string& why) {
    inflight.for_each([&](Node& n) {
      if (n.value.op.done) complete(std::exchange(n.value.op.done, nullptr), make_error(why));
    });
    inflight.for_each([&](Node& n) {
      if (n.value.ucx_request) inflight.abandon(n);  // LP-2: valid while the pool lives
      else inflight.release(n);
    });
  }

  void shutdown() {
    driving->stop_progress();
    // Fail whatever is still queued or in flight, then close the endpoints
    // while the requests they may complete still exist (their callbacks read
    // them), and only then forget what is left.
    for (int p = 0; p < size; ++p) failed[static_cast<std::size_t>(p)] = true;
    drain();
    fail_everything();
    for (int p = 0; p < static_cast<int>(eps.size()); ++p) close_ep(p);
    for (int i = 0; i < 100 && !inflight.empty(); ++i) ucp_worker_progress(worker.get());
    run_all_completed();
    forget_inflight("transport of rank " + std::to_string(rank) + " shut down");
  }
};

UcxTransport::UcxTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

UcxTransport::~UcxTransport() {
  if (impl_) impl_->shutdown();
}

namespace {

// The network interface that holds `address` (UCX then opens no lane on any other).
Expected<std::string> device_of(const std::string& address) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return make_error("getifaddrs failed: ", std::strerror(errno));
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> owned(list, ::freeifaddrs);
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw = i->ifa_addr->sa_family == AF_INET
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr);
    if (::inet_ntop(i->ifa_addr->sa_family, raw, text, sizeof text) && address == text) return std::string(i->ifa_name);
  }
  return make_error("--host ", address, " is not an address of this machine");
}

}  // namespace

Expected<std::unique_ptr<UcxTransport>> UcxTransport::create(int rank, int size, UcxOptions options) {
  if (size < 1 || rank < 0 || rank >= size) return make_error("ucx transport: rank ", std::to_string(rank), " of ", std::to_string(size));
  if (size > WireTags::kMaxRanks)
    return make_error("ucx transport: ", std::to_string(size), " ranks; a tag holds at most ",
                      std::to_string(WireTags::kMaxRanks));
  auto impl = std::make_unique<Impl>(rank, size);
  ucp_config_t* config = nullptr;
  if (auto st = ucp_config_read(nullptr, nullptr, &config); st != UCS_OK) return ucx_error("ucp_config_read", rank, st);
  auto device = device_of(options.bind_address);
  if (!device) {
    ucp_config_release(config);
    return device.error();
  }
  ucp_config_modify(config, "NET_DEVICES", device->c_str());
  if (!options.transports.empty()) ucp_config_modify(config, "TLS", options.transports.c_str());
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  // RMA as ucx_perftest asks for it: UCX then moves rendezvous data with
  // zero-copy get/put over TCP too (between two network namespaces, 64-256 KiB
  // messages reached 0.18-0.54 of ucx_perftest's bandwidth without it, 0.83-1.07 with it).
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | (options.event_fd ? UCP_FEATURE_WAKEUP : 0);
  impl->event_mode = options.event_fd;
  impl->peer_errors = options.peer_error_detection;
  impl->placed_on_shared_core = options.shares_core;
  ucp_context_h ctx = nullptr;
  const ucs_status_t init = ucp_init(&params, config, &ctx);
  ucp_config_release(config);
  if (init != UCS_OK) return ucx_error("ucp_init", rank, init);
  impl->context.reset(ctx);
  TROUPE_TRY(impl->open_worker());
  auto driving = WorkerDriving::create(*impl, {options.event_fd, options.shares_core});
  if (!driving) return driving.error();
  impl->driving = std::move(*driving);
  return std::unique_ptr<UcxTransport>(new UcxTransport(std::move(impl)));
}

const std::string& UcxTransport::address() const { return impl_->address; }

Status UcxTransport::connect(const std::vector<std::string>& addresses) {
  Impl& m = *impl_;
  if (static_cast<int>(addresses.size()) != m.size)
    return make_error("ucx transport: ", std::to_string(addresses.size()), " addresses for ", std::to_string(m.size), " ranks");
  m.eps.assign(static_cast<std::size_t>(m.size), nullptr);
  m.ep_args.resize(static_cast<std::size_t>(m.size));
  for (int p = 0; p < m.size; ++p) {
    if (addresses[static_cast<std::size_t>(p)].empty())
      m.failed[static_cast<std::size_t>(p)] = true;  // not known yet: until reconnect()
    else
      TROUPE_TRY(m.open_ep(p, addresses[static_cast<std::size_t>(p)]));
  }
  m.driving->start_progress();
  return Status::success();
}

int UcxTransport::rank() const { return impl_->rank; }
int UcxTransport::size() const { return impl_->size; }

void UcxTransport::send(int peer, Tag tag, const void* data, std::size_t bytes, Completion done) {
  impl_->submit({Impl::Kind::send, peer, tag, const_cast<void*>(data), bytes, std::move(done)});
}

void UcxTransport::recv(int peer, Tag tag, void* data, std::size_t bytes, Completion done) {
  impl_->submit({Impl::Kind::recv, peer, tag, data, bytes, std::move(done)});
}

bool UcxTransport::drive(const std::function<void()>& start, const std::function<bool()>& done,
                         std::chrono::microseconds idle) {
  if (!impl_->driving->progress_started()) return Transport::drive(start, done, idle);  // never connected
  return impl_->driving->drive(start, done, idle);
}

bool UcxTransport::peer_failed(int peer) const { return impl_->failed[static_cast<std::size_t>(peer)]; }

void UcxTransport::abort_all() {
  if (!impl_->driving->progress_started()) return run_abort_listeners();  // never connected: nothing in flight
  impl_->ask(impl_->to_abort);
  run_abort_listeners();
}

std::uint64_t UcxTransport::refuse_unproven() {
  if (!impl_->driving->progress_started()) return 0;  // never connected: nothing was received
  return impl_->ask(impl_->to_sweep);
}

std::uint64_t UcxTransport::begin_generation(std::uint64_t generation) {
  if (!impl_->driving->progress_started()) return 0;  // never connected: nothing old can arrive
  std::future<std::uint64_t> done;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->to_renew.emplace_back(generation, std::promise<std::uint64_t>{});
    done = impl_->to_renew.back().second.get_future();
    impl_->queued_ops.fetch_add(1);
  }
  impl_->notify();
  return done.get();
}

Status UcxTransport::reconnect(int peer, const std::string& address) {
  if (peer < 0 || peer >= impl_->size) return make_error("ucx transport: reconnect to rank ", std::to_string(peer), " of ", std::to_string(impl_->size));
  if (!impl_->driving->progress_started()) return make_error("ucx transport: reconnect before connect");
  std::future<Status> done;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->to_reconnect.push_back({peer, address, {}});
    done = impl_->to_reconnect.back().done.get_future();
    impl_->queued_ops.fetch_add(1);
  }
  impl_->notify();
  return done.get();
}

std::string UcxTransport::describe() const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    out = "rank " + std::to_string(impl_->rank) + ": " + std::to_string(impl_->queue.size()) + " queued, " +
          std::to_string(impl_->driving->drivers()) + " driving, progress thread " +
          (impl_->driving->progress_asleep() ? "asleep" : "awake") + (impl_->driving->core_shared() ? ", core shared" : "");
  }
  std::unique_lock<std::mutex> worker(impl_->driving->worker_mutex(), std::defer_lock);
  for (int i = 0; i < 100 && !worker.try_lock(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
  if (!worker.owns_lock()) return out + "; the worker is busy";
  out += "; generation " + std::to_string(impl_->tags.generation()) + "; " + std::to_string(impl_->inflight.size()) +
         " in flight";
  int shown = 0;
  impl_->inflight.for_each([&](const Impl::Node& n) {
    if (++shown > 8) return;
    const Impl::Op& op = n.value.op;
    char tag[32];
    std::snprintf(tag, sizeof tag, "0x%llx", static_cast<unsigned long long>(op.tag));
    out += std::string(shown == 1 ? ": " : ", ") + (op.kind == Impl::Kind::send ? "send to " : "recv from ") +
           std::to_string(op.peer) + " tag " + tag + " (" + std::to_string(op.bytes) + " B" +
           (op.done ? "" : ", reported") + (impl_->failed[static_cast<std::size_t>(op.peer)] ? ", peer failed" : "") + ")";
  });
  return out;
}

bool UcxTransport::faulted() const { return impl_->faulted.load(); }

bool UcxTransport::core_shared() const { return impl_->driving->core_shared(); }

bool UcxTransport::talked_to(int peer) const {
  return peer >= 0 && peer < impl_->size && impl_->talked[static_cast<std::size_t>(peer)].load(std::memory_order_relaxed);
}

Expected<std::string> UcxTransport::renew_worker() {
  if (!impl_->driving->progress_started()) return make_error("ucx transport: renew_worker before connect");
  return impl_->ask(impl_->to_replace_worker);
}

void UcxTransport::mark_failed(int peer) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->to_fail.push_back(peer);
    impl_->queued_ops.fetch_add(1);
  }
  impl_->notify();
}

}  // namespace troupe
