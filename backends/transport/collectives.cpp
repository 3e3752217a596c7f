// Ring algorithms as small state machines advanced by transport completions.
//   reduce-scatter step k: member i sends chunk (i-k-1) to the next member and
//   adds chunk (i-k-2) received from the previous one; after n-1 steps it holds
//   the sum of chunk i. all-gather step k: send chunk (i-k), receive (i-k-1).
//   Chunks move in segments (CL-1); each is added where it arrived (CL-2),
//   out of a few scratch slots that stay in cache (CL-3), or, between
//   processes of one host, straight out of the sender's shared memory: a
//   staging slot it copied the segment into (CL-4), or the data itself when
//   it lies in host-shared memory (CL-5); to another host, sent unasked once
//   the sender knows (CL-6).
#include "backends/transport/collectives.hpp"

#include "backends/comm/communicator.hpp"

#include "backends/transport/add_into.hpp"
#include "backends/shared_bytes.hpp"
#include "backends/transport/shm_staging.hpp"
#include "common/hash.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>

namespace troupe {
namespace {

// Below the op number a collective's tag holds its step (10 bits: both
// phases of a ring of up to kMaxRing members) and the segment (6 bits).
constexpr int kStepBits = 16;
constexpr int kSegmentBits = 6;
static_assert(CollectiveOptions{}.max_segments <= (1 << kSegmentBits));
constexpr int kMaxRing = (1 << (kStepBits - kSegmentBits)) / 2;
// Above it, two flags of CL-4's staged segments: a receiver's reply, and the
// bytes a receiver asked for. The op number takes the 9 bits above them.
constexpr Tag kReplyBit = Tag{1} << (kStepBits + 10);
constexpr Tag kBytesBit = Tag{1} << (kStepBits + 9);
constexpr int kOpBits = 39 - 12 - kStepBits - 2;

int index_in(const std::vector<int>& group, int rank) {
  return static_cast<int>(std::find(group.begin(), group.end(), rank) - group.begin());
}

}  // namespace

// Scratch buffers kept between a Collectives' operations (a fresh buffer costs
// a page fault per 4 KiB); shared with the operations, which may outlive it.
struct ScratchPool {
  std::mutex mu;
  std::vector<std::vector<float>> spare;

  std::vector<float> take(std::size_t floats) {
    std::vector<float> v;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!spare.empty()) {
        v = std::move(spare.back());
        spare.pop_back();
      }
    }
    if (v.size() < floats) v.resize(floats);
    return v;
  }
  void give_back(std::vector<float> v) {
    if (v.empty()) return;
    std::lock_guard<std::mutex> lock(mu);
    if (spare.size() < 4) spare.push_back(std::move(v));
  }
};

// CL-6: the ranks that asked this member for a staged segment's bytes (they
// cannot map its memory: another host), so that its next operations send them
// at once.
struct RemotePeers {
  std::mutex mu;
  std::set<int> unmappable;

  bool may_map(int rank) {
    std::lock_guard<std::mutex> lock(mu);
    return !unmappable.count(rank);
  }
  void cannot_map(int rank) {
    std::lock_guard<std::mutex> lock(mu);
    unmappable.insert(rank);
  }
  void forget_all() {
    std::lock_guard<std::mutex> lock(mu);
    unmappable.clear();
  }
};

namespace {

// The ring's data moves in segments (CL-1): each chunk is cut into `segs`
// slices, and slice j of ring step k+1 leaves as soon as slice j of step k has
// arrived (and, in reduce-scatter, been added), so sending, receiving and
// adding overlap along the ring instead of taking turns per whole chunk.
// Per element the sums happen in the same order as without segments (bit for
// bit the same result for any segment size).
//
// CL-3: reduce-scatter receives land in reduce_window scratch slots of one
// segment each, not in a scratch as large as a chunk: the segment is still in
// cache when it is added, and the slot is reused while it is (a chunk-sized
// scratch wrote and read back every received byte through memory). Receives
// are posted in (step, slice) order as slots free up, so the ring's earliest
// unfinished receive is always posted, and the send it waits for depends only
// on earlier ones: no member can wait for a slot that never frees.
//
// CL-4: a staged segment is copied into one of the operation's shared-memory
// slots, and its descriptor sent; the slot is reused once the descriptor went
// and the receiver replied (it added or copied the segment out of it, or asked
// for the bytes). Receivers post every descriptor receive of a phase at once
// and serve each as it arrives, needing nothing else, so a send waiting for a
// slot waits only for its receiver to run: no cycle. Sums keep the ring's
// order, as in CL-1. Replies count towards the phase (transfer_done): a member
// that ended its part may exit, and a reply still queued would never reach its
// sender.
//
// CL-5: data in host-shared memory (a findable SharedBytes region, as the
// trainer's flat parameters and gradients are) is lent, not staged: each
// segment's descriptor names the data itself and goes as soon as the segment
// is final, with no slot to wait for. The receiver adds or copies straight out
// of the sender's data. A lent range is never written while a receiver may
// read it: the ring writes a range only in a later step than the one that
// lends it (reduce-scatter adds into chunk me-k-2 at step k, lends chunk
// me-k-1; all-gather writes chunk me-k-1, lends chunk me-k), and a phase ends
// only once every reply is in. Measured between two processes on 2 cores,
// data freshly written before each operation, all-reduce against staged
// (medians): 1.6x at 1 MiB, 1.8-2.6x at 4-16 MiB, 1.5-1.6x at 64-256 MiB
// (10.6 GB/s against 6.6); while the VM's cores were slow to share lines
// (a cache line's round trip 400 ns, not 80), 2-3x at 4-64 MiB and 3.2-5x at
// 256 MiB (10.9-17.3 GB/s against 3.3-3.4).
//
// CL-6: a receiver on another host cannot map the sender's memory and
// replies so; the sender then sends the bytes, a round trip per segment
// later. It also remembers the receiver (RemotePeers): from its next
// operation on, each descriptor says the bytes follow and the segment goes
// right after it, straight from data (no slot, no copy, no reply). Forgotten
// at a recovery (restart_sequences): a replacement may run elsewhere.
struct RingOp : std::enable_shared_from_this<RingOp> {
  Transport* t;
  std::shared_ptr<ScratchPool> pool;  // scratch comes from and returns to it
  float* data;
  std::size_t count;
  int n, me, next, prev;
  int segs = 1;
  std::size_t slot = 0;  // scratch floats per segment (reduce-scatter)
  std::vector<int> free_slots;  // CL-3: scratch slots no receive or sum uses
  int next_receive = 0;         // CL-3: the next reduce receive to post, k * segs + j
  Tag tag_base;
  bool reduce_phase, gather_phase;
  std::vector<float> scratch;
  Completion done;
  std::mutex mu;
  int left = 0;      // transfers and sums the current phase still waits for
  int reducing = 0;  // sums and staging copies running: they touch data
  bool reported = false;
  Status error;

  // How this member's segments leave when staged: through shared-memory slots
  // (CL-4, `arena`), lent in place (CL-5: data lies in a findable region,
  // which `lent_region` describes from data[0]), or sent at once after their
  // descriptor (CL-6: the next member is known to be unable to map them).
  enum class Outgoing { unstaged, slots, lent, sent };
  Outgoing outgoing = Outgoing::unstaged;
  std::shared_ptr<StagingPool> staging_pool;
  std::shared_ptr<PeerArenas> peers;
  std::shared_ptr<RemotePeers> remote;
  std::unique_ptr<StagingArena> arena;
  StagingDescriptor lent_region;
  std::vector<int> free_send_slots;
  // Per outgoing record: a slot, or (lent, sent) a send, phase_step * segs + j.
  std::vector<int> slot_events;                     // completions it still waits for
  std::vector<StagingDescriptor> sent_descriptors;
  std::vector<StagingReply> replies;
  std::vector<StagingDescriptor> arrived;       // per receive of a phase, k * segs + j
  struct WaitingSend {
    int phase_step, j;
    std::size_t begin, end;
  };
  std::deque<WaitingSend> waiting_sends;  // for a free slot, in order
  // Reduce-scatter's segments that come as bytes (CL-6): received into
  // `window` slots of scratch, or waiting in order for one.
  int window = 2;
  struct BytesReceive {
    int k, j;
    std::size_t begin, end;
    Tag tg;
  };
  std::deque<BytesReceive> waiting_bytes;

  ~RingOp() {
    pool->give_back(std::move(scratch));
    if (arena) staging_pool->give_back(std::move(arena));
  }

  std::pair<std::size_t, std::size_t> chunk(int i) const { return Collectives::chunk(count, n, Collectives::ring_position(i, n)); }
  std::pair<std::size_t, std::size_t> segment(int c, int j) const {
    const auto [b, e] = chunk(c);
    const std::size_t len = e - b, uj = static_cast<std::size_t>(j), us = static_cast<std::size_t>(segs);
    return {b + len * uj / us, b + len * (uj + 1) / us};
  }
  Tag tag(int phase_step, int j) const {
    return tag_base | (static_cast<Tag>(phase_step) << kSegmentBits) | static_cast<Tag>(j);
  }

  void start() {
    if (n == 1 || count == 0) return report(Status::success());
    if (reduce_phase) start_reduce_scatter();
    else start_all_gather();
  }

  // Reduce-scatter step k: send chunk me-k-1, receive chunk me-k-2 and add it.
  // Step 0's sends leave at once; step k+1's slice j once step k's slice j was added.
  void start_reduce_scatter() {
    left = (staged() ? 3 : 2) * (n - 1) * segs;  // CL-4: and each reply's send
    if (staged()) {
      for (int k = 0; k < n - 1; ++k)
        for (int j = 0; j < segs; ++j) receive_staged(k, k, j);
    } else {
      post_receives();
    }
    for (int j = 0; j < segs; ++j) post_reduce_send(0, j);
  }
  void post_reduce_send(int k, int j) {
    const auto [sb, se] = segment(me - k - 1, j);
    if (staged()) return send_staged(k, j, sb, se);
    auto self = shared_from_this();
    t->send(next, tag(k, j), data + sb, (se - sb) * sizeof(float), [self](Status st) { self->transfer_done(std::move(st)); });
  }
  // CL-3: receives in (step, slice) order, each into a free scratch slot.
  void post_receives() {
    for (;;) {
      int i = 0, s = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (free_slots.empty() || next_receive == (n - 1) * segs || !error.ok()) return;
        i = next_receive++;
        s = free_slots.back();
        free_slots.pop_back();
      }
      const int k = i / segs, j = i % segs;
      const auto [rb, re] = segment(me - k - 2, j);
      float* into = scratch.data() + static_cast<std::size_t>(s) * slot;
      auto self = shared_from_this();
      t->recv(prev, tag(k, j), into, (re - rb) * sizeof(float), [self, k, j, s, rb = rb, re = re, into](Status st) {
        self->received_addend(std::move(st), k, j, s, rb, re, into);
      });
    }
  }
  void received_addend(Status st, int k, int j, int s, std::size_t rb, std::size_t re, const float* addend) {
    if (!begin_touch(std::move(st))) return;
    // CL-2: the sum runs where the segment arrived, while it is in cache: on
    // the waiting caller's thread when it drives the transport, else on the
    // progress thread. (A separate adding thread measured 30-45% slower
    // reduce-scatter on 2 cores: it competes with both for the same cores.)
    add_into(data + rb, addend, re - rb);
    added(k, j, s);
  }
  // Slot `s` is free again; the next receive takes it, step k+1's slice j leaves.
  void added(int k, int j, int s) {
    bool more = false, phase_over = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      --reducing;
      if (!error.ok()) return report_if_quiet(lock);
      free_slots.push_back(s);
      more = k + 1 < n - 1;
      phase_over = --left == 0;
    }
    post_receives();
    if (more) post_reduce_send(k + 1, j);
    if (phase_over) end_phase();
  }
  void transfer_done(Status st) {
    bool phase_over = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (!st && error.ok()) error = std::move(st);
      if (!error.ok()) return report_if_quiet(lock);
      phase_over = --left == 0;
    }
    if (phase_over) end_phase();
  }
  void end_phase() {
    if (reduce_phase && gather_phase) {
      reduce_phase = false;
      return start_all_gather();
    }
    report(Status::success());
  }

  // All-gather step k: send chunk me-k, receive chunk me-k-1 in place. Every
  // receive is posted at once (no receive lands where a send still reads:
  // chunk me-k-1 is sent only at step k+1, after it arrived); the send of
  // slice j at step k+1 follows the arrival of slice j at step k.
  void start_all_gather() {
    {
      std::lock_guard<std::mutex> lock(mu);
      left = (staged() ? 3 : 2) * (n - 1) * segs;  // CL-4: and each reply's send
    }
    auto self = shared_from_this();
    for (int k = 0; k < n - 1; ++k)
      for (int j = 0; j < segs; ++j) {
        if (staged()) {
          receive_staged(n - 1 + k, k, j);
          continue;
        }
        const auto [rb, re] = segment(me - k - 1, j);
        t->recv(prev, tag(n - 1 + k, j), data + rb, (re - rb) * sizeof(float),
                [self, k, j](Status st) { self->gathered(std::move(st), k, j); });
      }
    for (int j = 0; j < segs; ++j) post_gather_send(0, j);
  }
  void post_gather_send(int k, int j) {
    const auto [sb, se] = segment(me - k, j);
    if (staged()) return send_staged(n - 1 + k, j, sb, se);
    auto self = shared_from_this();
    t->send(next, tag(n - 1 + k, j), data + sb, (se - sb) * sizeof(float),
            [self](Status st) { self->transfer_done(std::move(st)); });
  }
  void gathered(Status st, int k, int j) {
    bool more = false, phase_over = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (!st && error.ok()) error = std::move(st);
      if (!error.ok()) return report_if_quiet(lock);
      more = k + 1 < n - 1;
      phase_over = --left == 0;
    }
    if (more) post_gather_send(k + 1, j);
    if (phase_over) end_phase();
  }

  bool staged() const { return outgoing != Outgoing::unstaged; }

  // CL-4, sending segment j of phase step `phase_step`, data[b, e): it is
  // copied into a free slot (or waits in order for one) and the slot's
  // descriptor sent; the slot is free again once the descriptor went and the
  // receiver replied, or sent the bytes it asked for. CL-5: lent data needs
  // no slot: the descriptor of data[b, e) itself goes at once, and the range
  // is not written again before the receiver replied (the phase waits for
  // every reply, and the ring writes a range only in a later step). CL-6: to
  // a member known to be unable to map either, the descriptor says the bytes
  // follow, and data[b, e) goes right after it, unasked (no reply, no slot,
  // no copy); the range is not written before that send completed.
  void send_staged(int phase_step, int j, std::size_t b, std::size_t e) {
    const Tag tg = tag(phase_step, j);
    const std::size_t bytes = (e - b) * sizeof(float);
    int s = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!error.ok()) return;
      if (outgoing != Outgoing::slots) {
        s = phase_step * segs + j;
      } else if (free_send_slots.empty()) {
        waiting_sends.push_back({phase_step, j, b, e});
        return;
      } else {
        s = free_send_slots.back();
        free_send_slots.pop_back();
        ++reducing;
      }
      slot_events[static_cast<std::size_t>(s)] = 2;
    }
    const std::byte* from = nullptr;
    auto& descriptor = sent_descriptors[static_cast<std::size_t>(s)];
    if (outgoing == Outgoing::sent) {
      descriptor = StagingDescriptor{};
      descriptor.host = this_host();
      descriptor.bytes = bytes;
      descriptor.bytes_follow = 1;
      auto self = shared_from_this();
      t->send(next, tg, &descriptor, sizeof(StagingDescriptor), [self, s](Status st) { self->slot_event(std::move(st), s); });
      t->send(next, tg | kBytesBit, data + b, bytes, [self, s](Status st) { self->slot_event(std::move(st), s); });
      return;
    }
    if (outgoing == Outgoing::lent) {
      descriptor = lent_region;
      descriptor.offset += b * sizeof(float);
      descriptor.bytes = bytes;
      from = reinterpret_cast<const std::byte*>(data + b);
    } else {
      std::memcpy(arena->slot(s), data + b, bytes);
      if (!end_touch()) return;
      descriptor = arena->describe(s, bytes);
      from = arena->slot(s);
    }
    auto self = shared_from_this();
    t->recv(next, tg | kReplyBit, &replies[static_cast<std::size_t>(s)], sizeof(StagingReply),
            [self, s, tg, from, bytes](Status st) { self->replied(std::move(st), s, tg, from, bytes); });
    t->send(next, tg, &descriptor, sizeof(StagingDescriptor), [self, s](Status st) { self->slot_event(std::move(st), s); });
  }
  void replied(Status st, int s, Tag tg, const std::byte* from, std::size_t bytes) {
    if (st && replies[static_cast<std::size_t>(s)] == StagingReply::send_bytes) {
      remote->cannot_map(next);  // CL-6: its next operations send at once
      {
        std::lock_guard<std::mutex> lock(mu);
        ++slot_events[static_cast<std::size_t>(s)];
      }
      auto self = shared_from_this();
      t->send(next, tg | kBytesBit, from, bytes, [self, s](Status st2) { self->slot_event(std::move(st2), s); });
    } else if (st && replies[static_cast<std::size_t>(s)] != StagingReply::consumed) {
      st = make_error("collective staging: rank ", std::to_string(next), " sent an unknown reply");
    }
    slot_event(std::move(st), s);
  }
  void slot_event(Status st, int s) {
    std::optional<WaitingSend> waiting;
    bool phase_over = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (!st && error.ok()) error = std::move(st);
      if (!error.ok()) return report_if_quiet(lock);
      if (--slot_events[static_cast<std::size_t>(s)] > 0) return;
      if (outgoing == Outgoing::slots) {
        free_send_slots.push_back(s);
        if (!waiting_sends.empty()) {
          waiting = waiting_sends.front();
          waiting_sends.pop_front();
        }
      }
      phase_over = --left == 0;
    }
    if (waiting) send_staged(waiting->phase_step, waiting->j, waiting->begin, waiting->end);
    if (phase_over) end_phase();
  }
  // A copy or sum is about to touch data: false (and the error reported, if
  // nothing else touches data) if `st` or an earlier failure ended the operation.
  bool begin_touch(Status st) {
    std::unique_lock<std::mutex> lock(mu);
    if (!st && error.ok()) error = std::move(st);
    if (!error.ok()) {
      report_if_quiet(lock);
      return false;
    }
    ++reducing;
    return true;
  }
  // The touch is over; false if an error came meanwhile.
  bool end_touch() {
    std::unique_lock<std::mutex> lock(mu);
    --reducing;
    if (error.ok()) return true;
    report_if_quiet(lock);
    return false;
  }

  // CL-4, receiving segment j of phase step `phase_step` (ring step k): its
  // descriptor arrives, the sender's slot is added into place (reduce-scatter)
  // or copied there (all-gather) and a reply frees the slot; or, where the
  // slot cannot be mapped, the reply asks for the bytes.
  void receive_staged(int phase_step, int k, int j) {
    const std::size_t i = static_cast<std::size_t>(k * segs + j);
    auto self = shared_from_this();
    t->recv(prev, tag(phase_step, j), &arrived[i], sizeof(StagingDescriptor),
            [self, phase_step, k, j, i](Status st) { self->descriptor_arrived(std::move(st), phase_step, k, j, i); });
  }
  void descriptor_arrived(Status st, int phase_step, int k, int j, std::size_t i) {
    const bool reduce = phase_step < n - 1;
    const auto [rb, re] = segment(reduce ? me - k - 2 : me - k - 1, j);
    const std::size_t bytes = (re - rb) * sizeof(float);
    if (st && arrived[i].bytes != bytes)
      st = make_error("collective staging: rank ", std::to_string(prev), " staged ", std::to_string(arrived[i].bytes),
                      " bytes where ", std::to_string(bytes), " were due");
    if (!begin_touch(std::move(st))) return;
    const Tag tg = tag(phase_step, j);
    auto self = shared_from_this();
    auto reply = [&](const StagingReply& r) {
      t->send(prev, tg | kReplyBit, &r, sizeof r, [self](Status s2) { self->transfer_done(std::move(s2)); });
    };
    static constexpr StagingReply kConsumed = StagingReply::consumed, kSendBytes = StagingReply::send_bytes;
    if (arrived[i].bytes_follow) {  // CL-6: the bytes come unasked, and nothing is to be replied
      if (!end_touch()) return;
      receive_bytes(reduce, k, j, rb, re, tg);
      return transfer_done(Status::success());  // in place of the reply's send
    }
    auto mapped = peers->map(arrived[i]);
    if (mapped) {
      const auto* from = reinterpret_cast<const float*>(mapped->get());
      if (reduce) add_into(data + rb, from, re - rb);
      else std::memcpy(data + rb, from, bytes);
      if (!end_touch()) return;
      reply(kConsumed);
      return received_staged(reduce, k, j);
    }
    if (!end_touch()) return;
    // Another host: the bytes come over the transport, received where they
    // are due before they are asked for.
    receive_bytes(reduce, k, j, rb, re, tg);
    reply(kSendBytes);
  }
  // A staged segment's bytes sent over the transport: received in place
  // (all-gather), or (reduce-scatter) into one of reduce_window scratch slots
  // and added from there. A receive that finds no free slot waits in order
  // for one: every slot is held by a receive whose bytes were already sent
  // (they follow their descriptor unasked, or were asked for), so it frees.
  void receive_bytes(bool reduce, int k, int j, std::size_t rb, std::size_t re, Tag tg) {
    auto self = shared_from_this();
    if (!reduce) {
      t->recv(prev, tg | kBytesBit, data + rb, (re - rb) * sizeof(float), [self, k, j](Status s2) {
        return s2 ? self->received_staged(false, k, j) : self->transfer_done(std::move(s2));
      });
      return;
    }
    int s = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (scratch.empty()) {  // the first segment that came as bytes
        for (int w = window - 1; w >= 0; --w) free_slots.push_back(w);
        scratch = pool->take(slot * static_cast<std::size_t>(window));
      }
      if (free_slots.empty()) {
        waiting_bytes.push_back({k, j, rb, re, tg});
        return;
      }
      s = free_slots.back();
      free_slots.pop_back();
    }
    receive_bytes_into(s, {k, j, rb, re, tg});
  }
  void receive_bytes_into(int s, BytesReceive r) {
    auto self = shared_from_this();
    float* into = scratch.data() + static_cast<std::size_t>(s) * slot;
    t->recv(prev, r.tg | kBytesBit, into, (r.end - r.begin) * sizeof(float), [self, s, r, into](Status s2) {
      if (!self->begin_touch(std::move(s2))) return;
      add_into(self->data + r.begin, into, r.end - r.begin);
      if (!self->end_touch()) return;
      std::optional<BytesReceive> next_in_line;
      {
        std::lock_guard<std::mutex> lock(self->mu);
        if (self->waiting_bytes.empty()) {
          self->free_slots.push_back(s);
        } else {
          next_in_line = self->waiting_bytes.front();
          self->waiting_bytes.pop_front();
        }
      }
      if (next_in_line) self->receive_bytes_into(s, *next_in_line);
      self->received_staged(true, r.k, r.j);
    });
  }
  void received_staged(bool reduce, int k, int j) {
    if (!reduce) return gathered(Status::success(), k, j);
    bool more = false, phase_over = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      more = k + 1 < n - 1;
      phase_over = --left == 0;
    }
    if (more) post_reduce_send(k + 1, j);
    if (phase_over) end_phase();
  }
  // An error is reported once no sum is still writing into data (transfers
  // still in flight are the caller's to abort: Transport::abort_all).
  void report_if_quiet(std::unique_lock<std::mutex>& lock) {
    if (reported || reducing > 0) return;
    reported = true;
    Status st = error;
    lock.unlock();
    std::exchange(done, nullptr)(st);
  }
  void report(Status st) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (reported) return;
      reported = true;
    }
    std::exchange(done, nullptr)(st);
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

Collectives::Collectives(Transport& transport, CollectiveOptions options)
    : t_(transport),
      options_(options),
      scratch_(std::make_shared<ScratchPool>()),
      staging_(std::make_shared<StagingPool>()),
      peers_(std::make_shared<PeerArenas>()),
      remote_(std::make_shared<RemotePeers>()) {
  options_.max_segments = std::clamp(options_.max_segments, 1, 1 << kSegmentBits);
}

Collectives::~Collectives() = default;

void Collectives::restart_sequences() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    next_op_.clear();
  }
  peers_->forget_all();
  remote_->forget_all();
}

std::pair<std::size_t, std::size_t> Collectives::chunk(std::size_t count, int n, int i) { return comm_chunk(count, n, i); }

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
  const std::uint64_t op_bits = op & ((std::uint64_t{1} << kOpBits) - 1);
  return kCollectiveTagBit | (group_bits << (39 - 12)) | (op_bits << kStepBits);
}

namespace {

void start_ring(Transport& t, const CollectiveOptions& options, const std::shared_ptr<ScratchPool>& pool,
                const std::shared_ptr<StagingPool>& staging_pool, const std::shared_ptr<PeerArenas>& peers,
                const std::shared_ptr<RemotePeers>& remote,
                const std::vector<int>& group, float* data, std::size_t count, Tag tag_base, bool reduce, bool gather,
                Completion done) {
  const int n = static_cast<int>(group.size());
  const int me = index_in(group, t.rank());
  if (me == n) return done(make_error("collective: rank ", std::to_string(t.rank()), " is not in the group"));
  if (n > kMaxRing)
    return done(make_error("collective: a ring of ", std::to_string(n), " members (at most ", std::to_string(kMaxRing), ")"));
  auto op = std::make_shared<RingOp>();
  op->t = &t;
  op->pool = pool;
  op->data = data;
  op->count = count;
  op->n = n;
  op->me = me;
  op->next = group[static_cast<std::size_t>(Collectives::ring_position(me + 1, n))];
  op->prev = group[static_cast<std::size_t>(Collectives::ring_position(me - 1, n))];
  op->tag_base = tag_base;
  op->reduce_phase = reduce;
  op->gather_phase = gather;
  const std::size_t largest = (count + static_cast<std::size_t>(n) - 1) / static_cast<std::size_t>(n);
  const std::size_t seg = std::max<std::size_t>(1, options.segment_floats);
  op->segs = static_cast<int>(std::clamp<std::size_t>((largest + seg - 1) / seg, 1, static_cast<std::size_t>(options.max_segments)));
  op->slot = (largest + static_cast<std::size_t>(op->segs) - 1) / static_cast<std::size_t>(op->segs);
  const std::size_t segment_bytes = op->slot * sizeof(float);
  using Staging = CollectiveOptions::Staging;
  const bool staged = options.staging == Staging::always ||
                      (options.staging == Staging::between_processes && !t.one_address_space());
  if (staged && n > 1 && segment_bytes >= options.staging_min_bytes) {
    int records = 2 * (n - 1) * op->segs;  // outgoing: every send of both phases, or slots
    op->remote = remote;
    auto region = options.lend_in_place ? find_shared(data, count * sizeof(float)) : std::nullopt;
    if (!remote->may_map(op->next)) {
      op->outgoing = RingOp::Outgoing::sent;
    } else if (region) {
      op->outgoing = RingOp::Outgoing::lent;
      op->lent_region = *region;
    } else {
      op->outgoing = RingOp::Outgoing::slots;
      records = std::clamp(options.staging_slots, 1, op->segs * (n - 1));
      auto arena = staging_pool->take(records, segment_bytes);
      if (!arena) return done(arena.error());
      op->arena = std::move(*arena);
      op->staging_pool = staging_pool;
      for (int s = records - 1; s >= 0; --s) op->free_send_slots.push_back(s);
    }
    op->peers = peers;
    op->window = std::clamp(options.reduce_window, 1, op->segs * (n - 1));
    op->slot_events.assign(static_cast<std::size_t>(records), 0);
    op->sent_descriptors.resize(static_cast<std::size_t>(records));
    op->replies.resize(static_cast<std::size_t>(records));
    op->arrived.resize(static_cast<std::size_t>(op->segs * (n - 1)));
  } else if (reduce) {
    const int slots = std::clamp(options.reduce_window, 1, op->segs * (n - 1));
    for (int s = slots - 1; s >= 0; --s) op->free_slots.push_back(s);
    op->scratch = pool->take(op->slot * static_cast<std::size_t>(slots));
  }
  op->done = std::move(done);
  op->start();
}

}  // namespace

void Collectives::all_reduce(const std::vector<int>& group, float* data, std::size_t count, Completion done) {
  start_ring(t_, options_, scratch_, staging_, peers_, remote_, group, data, count, next_tag_base(group), true, true, std::move(done));
}

void Collectives::reduce_scatter(const std::vector<int>& group, float* data, std::size_t count, Completion done) {
  start_ring(t_, options_, scratch_, staging_, peers_, remote_, group, data, count, next_tag_base(group), true, false, std::move(done));
}

void Collectives::all_gather(const std::vector<int>& group, float* data, std::size_t count, Completion done) {
  start_ring(t_, options_, scratch_, staging_, peers_, remote_, group, data, count, next_tag_base(group), false, true, std::move(done));
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
  const int pos = Collectives::ring_position(me - root, n);  // position along the chain from the root
  if (pos > 0) op->prev = group[static_cast<std::size_t>(Collectives::ring_position(me - 1, n))];
  if (pos < n - 1) op->next = group[static_cast<std::size_t>(Collectives::ring_position(me + 1, n))];
  op->tag_base = tag;
  op->done = std::move(done);
  op->start();
}

}  // namespace troupe
