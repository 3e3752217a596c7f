// NcclCommunicator: a non-blocking NCCL communicator, its stream and its watcher.
#include "ops/cuda/nccl_communicator.hpp"

#include <nccl.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

Error nccl_error(ncclResult_t r, const char* call, const std::string& group) {
  return make_error("nccl: ", call, " (", group, " group): ", ncclGetErrorString(r));
}

// Polls a non-blocking communicator until its last call has settled, at most
// until `deadline`: ncclSuccess, an error, or ncclInProgress past the bound.
ncclResult_t settle(ncclComm_t comm, Clock::time_point deadline) {
  for (;;) {
    ncclResult_t state = ncclInProgress;
    if (ncclResult_t q = ncclCommGetAsyncError(comm, &state); q != ncclSuccess) return q;
    if (state != ncclInProgress || Clock::now() > deadline) return state;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(GroupMembers members, CudaDevice& device, ncclComm_t comm, std::unique_ptr<CudaStream> stream,
                   std::chrono::milliseconds bound)
      : Communicator(std::move(members)),
        device_(device),
        comm_(comm),
        stream_(std::move(stream)),
        bound_(bound),
        watcher_([this] { watch(); }) {}

  ~NcclCommunicator() override {
    abort();
    {
      std::lock_guard<std::mutex> lock(wmu_);
      stopping_ = true;
    }
    wcv_.notify_one();
    watcher_.join();
  }

  CommPath path() const override { return CommPath::nccl; }

  void all_reduce(const Tensor& t, Stream& s, Completion done) override {
    if (Status st = check(t, "all-reduce"); !st) return done(st);
    const auto n = static_cast<std::size_t>(t.numel());
    launch("all-reduce", s, std::move(done), [&](cudaStream_t cs) {
      return ncclAllReduce(t.raw(), t.raw(), n, ncclFloat, ncclSum, comm_, cs);
    });
  }

  void reduce_scatter(const Tensor& t, Stream& s, Completion done) override {
    if (Status st = check(t, "reduce-scatter"); !st) return done(st);
    const auto n = static_cast<std::size_t>(t.numel());
    float* p = t.f32();
    launch("reduce-scatter", s, std::move(done), [&](cudaStream_t cs) {
      const std::size_t members = static_cast<std::size_t>(size());
      if (n % members == 0) {  // in place: this member's chunk is where it lies
        const std::size_t chunk = n / members;
        return ncclReduceScatter(p, p + chunk * static_cast<std::size_t>(index()), chunk, ncclFloat, ncclSum, comm_, cs);
      }
      for (int i = 0; i < size(); ++i) {  // NC-1
        const auto [lo, hi] = comm_chunk(n, size(), i);
        if (hi == lo) continue;
        if (ncclResult_t r = ncclReduce(p + lo, p + lo, hi - lo, ncclFloat, ncclSum, i, comm_, cs); r != ncclSuccess)
          return r;
      }
      return ncclSuccess;
    });
  }

  void all_gather(const Tensor& t, Stream& s, Completion done) override {
    if (Status st = check(t, "all-gather"); !st) return done(st);
    const auto n = static_cast<std::size_t>(t.numel());
    float* p = t.f32();
    launch("all-gather", s, std::move(done), [&](cudaStream_t cs) {
      const std::size_t members = static_cast<std::size_t>(size());
      if (n % members == 0) {
        const std::size_t chunk = n / members;
        return ncclAllGather(p + chunk * static_cast<std::size_t>(index()), p, chunk, ncclFloat, comm_, cs);
      }
      for (int i = 0; i < size(); ++i) {  // NC-1
        const auto [lo, hi] = comm_chunk(n, size(), i);
        if (hi == lo) continue;
        if (ncclResult_t r = ncclBroadcast(p + lo, p + lo, hi - lo, ncclFloat, i, comm_, cs); r != ncclSuccess) return r;
      }
      return ncclSuccess;
    });
  }

  void broadcast(const Tensor& t, int root, Stream& s, Completion done) override {
    if (Status st = check(t, "broadcast"); !st) return done(st);
    if (root < 0 || root >= size()) return done(make_error(name(), " broadcast: no member ", std::to_string(root)));
    const auto n = static_cast<std::size_t>(t.numel());
    launch("broadcast", s, std::move(done), [&](cudaStream_t cs) {
      return ncclBroadcast(t.raw(), t.raw(), n, ncclFloat, root, comm_, cs);
    });
  }

  void send(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) override {  // NC-2: tag unused
    if (Status st = check_peer(peer, tag, "send"); !st) return done(st);
    if (Status st = check_memory(t, "send"); !st) return done(st);
    launch("send", s, std::move(done), [&](cudaStream_t cs) { return ncclSend(t.raw(), t.nbytes(), ncclInt8, peer, comm_, cs); });
  }

  void recv(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) override {
    if (Status st = check_peer(peer, tag, "recv"); !st) return done(st);
    if (Status st = check_memory(t, "recv"); !st) return done(st);
    launch("recv", s, std::move(done), [&](cudaStream_t cs) { return ncclRecv(t.raw(), t.nbytes(), ncclInt8, peer, comm_, cs); });
  }

  // CM-3: the communicator is aborted (its kernels leave), its stream
  // drained, and every completion still waiting fails; NC-3: for good.
  void abort() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (comm_) {
        device_.activate();
        ncclCommAbort(comm_);
        comm_ = nullptr;
        (void)cudaStreamSynchronize(stream_->handle());  // an aborted kernel has left; its error is the abort's
      }
    }
    fail_pending("the NCCL communicator was aborted");
  }

 private:
  struct Pending {
    std::unique_ptr<Event> passed;
    Completion done;
  };

  Status check_memory(const Tensor& t, const char* op) const {
    if (!t.defined() || &t.device() != &device_ || t.memory() != Memory::device)
      return make_error(name(), " ", op, ": NCCL moves memory of ", device_.name(), " only, not host memory");
    return Status::success();
  }
  Status check(const Tensor& t, const char* op) const {
    TROUPE_TRY(check_collective(t, op, false));
    return check_memory(t, op);
  }

  // Enqueues `issue`'s NCCL calls, as one group, on the communication stream
  // after the caller's work (CM-2); the watcher completes them.
  void launch(const char* op, Stream& s, Completion done, const std::function<ncclResult_t(cudaStream_t)>& issue) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!comm_) {
      lock.unlock();
      return done(make_error(name(), " ", op, ": the NCCL communicator was aborted"));
    }
    device_.activate();
    stream_->wait(*s.record());
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess) r = issue(stream_->handle());
    const ncclResult_t ended = ncclGroupEnd();
    if (r == ncclSuccess) r = ended;
    if (r == ncclInProgress) r = settle(comm_, Clock::now() + bound_);
    if (r != ncclSuccess) {
      Error e = r == ncclInProgress ? make_error(name(), " ", op, ": NCCL did not take the operation within ",
                                                 std::to_string(bound_.count()), " ms")
                                    : nccl_error(r, op, name());
      lock.unlock();
      abort();
      return done(std::move(e));
    }
    auto passed = stream_->record();
    lock.unlock();
    {
      std::lock_guard<std::mutex> w(wmu_);
      pending_.push_back(Pending{std::move(passed), std::move(done)});
    }
    wcv_.notify_one();
  }

  void fail_pending(const std::string& why) {
    std::deque<Pending> failed;
    {
      std::lock_guard<std::mutex> w(wmu_);
      failed.swap(pending_);
    }
    for (auto& p : failed) p.done(make_error(name(), ": ", why));
  }

  // The watcher: completes operations in order as their events pass; an
  // asynchronous NCCL error (a peer gone, a network failure) aborts all.
  void watch() {
    pthread_setname_np(pthread_self(), "troupe.nccl");
    for (;;) {
      Completion done;
      {
        std::unique_lock<std::mutex> w(wmu_);
        wcv_.wait(w, [&] { return stopping_ || !pending_.empty(); });
        if (pending_.empty()) return;
        if (pending_.front().passed->query()) {
          done = std::move(pending_.front().done);
          pending_.pop_front();
        }
      }
      if (done) {
        done(Status::success());
        continue;
      }
      ncclResult_t state = ncclSuccess;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (comm_ && ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
      }
      if (state != ncclSuccess && state != ncclInProgress) {
        std::string why = std::string("NCCL failed: ") + ncclGetErrorString(state);
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (comm_) {
            device_.activate();
            ncclCommAbort(comm_);
            comm_ = nullptr;
          }
        }
        fail_pending(why);
        continue;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  CudaDevice& device_;
  std::mutex mu_;  // the communicator's calls
  ncclComm_t comm_;
  std::unique_ptr<CudaStream> stream_;
  const std::chrono::milliseconds bound_;
  std::mutex wmu_;
  std::condition_variable wcv_;
  std::deque<Pending> pending_;
  bool stopping_ = false;
  std::thread watcher_;
};

Expected<std::string> nccl_unique_id() {
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
    return make_error("nccl: ncclGetUniqueId: ", ncclGetErrorString(r));
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

Expected<std::unique_ptr<Communicator>> open_nccl_communicator(CudaDevice& device, GroupMembers members,
                                                               const std::string& unique_id,
                                                               std::chrono::milliseconds bound) {
  TROUPE_TRY(validate(members));
  if (unique_id.size() != sizeof(ncclUniqueId))
    return make_error("nccl: the ", members.name, " group's unique id has ", std::to_string(unique_id.size()),
                      " bytes, not ", std::to_string(sizeof(ncclUniqueId)));
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof id);
  device.activate();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, static_cast<int>(members.ranks.size()), id, members.me, &config);
  if (r == ncclInProgress) r = settle(comm, Clock::now() + bound);
  if (r != ncclSuccess) {
    if (comm) ncclCommAbort(comm);
    if (r == ncclInProgress)
      return make_error("nccl: the ", members.name, " group did not start within ", std::to_string(bound.count()), " ms");
    return nccl_error(r, "ncclCommInitRankConfig", members.name);
  }
  auto stream = std::make_unique<CudaStream>(device);
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(std::move(members), device, comm, std::move(stream), bound));
}

std::string nccl_version() {
  int v = 0;
  if (ncclResult_t r = ncclGetVersion(&v); r != ncclSuccess) return std::string("unknown: ") + ncclGetErrorString(r);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace troupe
