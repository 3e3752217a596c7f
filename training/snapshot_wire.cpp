// Snapshots on the wire (SW-1, SW-2).
#include "training/snapshot_wire.hpp"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace troupe {
namespace {

constexpr std::uint64_t kMagic = 0x3150414e53505254ull;  // "TRPSNAP1"
// magic, step, chunks, the chunks' piece sizes, then the actor's own state's bytes (UH-1).
constexpr std::size_t kHeaderWords = 3 + 3 * kMaxSnapshotChunks + 1;
constexpr std::size_t kActorStateWord = kHeaderWords - 1;
using Header = std::array<std::uint64_t, kHeaderWords>;

// The pieces of a snapshot in wire order: per chunk its parameters, first and second moments.
template <class Snapshot, class F>
void for_each_piece(Snapshot& s, F&& f) {
  for (std::size_t c = 0; c < s.params.size(); ++c) {
    f(s.params[c]);
    f(s.exp_avg[c]);
    f(s.exp_avg_sq[c]);
  }
}

// SW-2: counts the operations of one snapshot; the last one to complete
// calls done. The poster holds one count of its own until it has posted all.
class Countdown {
 public:
  explicit Countdown(Completion done) : done_(std::move(done)) {}
  void add() { pending_.fetch_add(1, std::memory_order_relaxed); }
  void release() { complete(Status::success()); }
  void complete(Status st) {
    if (!st) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!first_error_) first_error_ = st.error();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    std::optional<Error> error;
    {
      std::lock_guard<std::mutex> lock(mu_);
      error = first_error_;
    }
    done_(error ? Status(*error) : Status::success());
  }

 private:
  Completion done_;
  std::atomic<int> pending_{1};
  std::mutex mu_;
  std::optional<Error> first_error_;
};

Status check_header(const Header& h) {  // SW-1
  if (h[0] != kMagic) return make_error("snapshot header: not a Troupe snapshot (bad magic)");
  if (h[1] > static_cast<std::uint64_t>(INT32_MAX)) return make_error("snapshot header: step ", std::to_string(h[1]), " out of range");
  if (h[2] > static_cast<std::uint64_t>(kMaxSnapshotChunks))
    return make_error("snapshot header: ", std::to_string(h[2]), " chunks (at most ", std::to_string(kMaxSnapshotChunks), ")");
  for (std::size_t i = 0; i < 3 * h[2]; ++i)
    if (h[3 + i] > kMaxSnapshotPieceFloats)
      return make_error("snapshot header: piece ", std::to_string(i), " of ", std::to_string(h[3 + i]), " floats (at most ",
                        std::to_string(kMaxSnapshotPieceFloats), ")");
  if (h[kActorStateWord] > kMaxActorStateBytes)
    return make_error("snapshot header: the actor's own state of ", std::to_string(h[kActorStateWord]),
                      " bytes (at most ", std::to_string(kMaxActorStateBytes), ")");
  return Status::success();
}

}  // namespace

std::uint64_t snapshot_bytes(const StageSnapshot& s) {
  std::uint64_t n = 0;
  for_each_piece(s, [&](const std::vector<float>& v) { n += v.size() * sizeof(float); });
  return n + s.actor_state.size();
}

void send_snapshot(Transport& t, int peer, Tag channel, const StageSnapshot& snapshot, Completion done) {
  if (snapshot.params.size() > static_cast<std::size_t>(kMaxSnapshotChunks) || snapshot.exp_avg.size() != snapshot.params.size() ||
      snapshot.exp_avg_sq.size() != snapshot.params.size())
    return done(make_error("snapshot: ", std::to_string(snapshot.params.size()), " chunks cannot be sent (at most ",
                           std::to_string(kMaxSnapshotChunks), ", each with its two moments)"));
  if (snapshot.actor_state.size() > kMaxActorStateBytes)
    return done(make_error("snapshot: the actor's own state of ", std::to_string(snapshot.actor_state.size()),
                           " bytes cannot be sent (at most ", std::to_string(kMaxActorStateBytes), ")"));
  auto header = std::make_shared<Header>();
  header->fill(0);
  (*header)[0] = kMagic;
  (*header)[1] = static_cast<std::uint64_t>(snapshot.next_step);
  (*header)[2] = snapshot.params.size();
  std::size_t i = 0;
  for_each_piece(snapshot, [&](const std::vector<float>& v) { (*header)[3 + i++] = v.size(); });
  (*header)[kActorStateWord] = snapshot.actor_state.size();
  auto count = std::make_shared<Countdown>([header, done = std::move(done)](Status st) { done(std::move(st)); });
  count->add();
  t.send(peer, snapshot_tag(channel, 0), header->data(), sizeof(Header), [count](Status st) { count->complete(std::move(st)); });
  i = 0;
  for_each_piece(snapshot, [&](const std::vector<float>& v) {
    ++i;
    if (v.empty()) return;
    count->add();
    t.send(peer, snapshot_tag(channel, i), v.data(), v.size() * sizeof(float), [count](Status st) { count->complete(std::move(st)); });
  });
  if (!snapshot.actor_state.empty()) {
    count->add();
    t.send(peer, snapshot_tag(channel, i + 1), snapshot.actor_state.data(), snapshot.actor_state.size(),
           [count](Status st) { count->complete(std::move(st)); });
  }
  count->release();
}

void receive_snapshot(Transport& t, int peer, Tag channel, PlaceSnapshot place, Completion done) {
  auto header = std::make_shared<Header>();
  Transport* tp = &t;
  t.recv(peer, snapshot_tag(channel, 0), header->data(), sizeof(Header),
         [tp, peer, channel, header, place = std::move(place), done = std::move(done)](Status st) mutable {
           if (!st) return done(std::move(st));
           if (auto ok = check_header(*header); !ok) return done(std::move(ok));
           std::string why;
           StageSnapshot* out = place(static_cast<int>((*header)[1]), why);
           if (!out) return done(make_error("snapshot of step ", std::to_string((*header)[1]), " refused: ", why));
           const auto chunks = static_cast<std::size_t>((*header)[2]);
           out->next_step = static_cast<int>((*header)[1]);
           out->params.resize(chunks);
           out->exp_avg.resize(chunks);
           out->exp_avg_sq.resize(chunks);
           std::size_t i = 0;
           for_each_piece(*out, [&](std::vector<float>& v) { v.resize(static_cast<std::size_t>((*header)[3 + i++])); });
           out->actor_state.resize(static_cast<std::size_t>((*header)[kActorStateWord]));
           auto count = std::make_shared<Countdown>(std::move(done));
           i = 0;
           for_each_piece(*out, [&](std::vector<float>& v) {
             ++i;
             if (v.empty()) return;
             count->add();
             tp->recv(peer, snapshot_tag(channel, i), v.data(), v.size() * sizeof(float),
                      [count](Status s) { count->complete(std::move(s)); });
           });
           if (!out->actor_state.empty()) {
             count->add();
             tp->recv(peer, snapshot_tag(channel, i + 1), out->actor_state.data(), out->actor_state.size(),
                      [count](Status s) { count->complete(std::move(s)); });
           }
           count->release();
         });
}

void receive_snapshot(Transport& t, int peer, Tag channel, StageSnapshot& into, Completion done) {
  receive_snapshot(t, peer, channel, [out = &into](int, std::string&) { return out; }, std::move(done));
}

}  // namespace troupe
