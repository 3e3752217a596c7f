// Snapshots on the wire: a snapshot arrives whole in the sender's layout
// whatever the order of send and receive; a bad header is refused before any
// piece lands (SW-1); done runs once, also when the peer fails (SW-2).
#include "training/snapshot_wire.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <optional>

#include "backends/transport/local_transport.hpp"

namespace troupe {
namespace {

StageSnapshot sample(int step, float seed) {
  StageSnapshot s;
  s.next_step = step;
  const std::array<std::size_t, 2> sizes{1000, 37};
  for (std::size_t c = 0; c < sizes.size(); ++c) {
    std::vector<float> p(sizes[c]), m(sizes[c] / 2), v(sizes[c] / 2);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = seed + static_cast<float>(i) * 0.5f + static_cast<float>(c);
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = -seed * static_cast<float>(i), v[i] = seed / static_cast<float>(i + 1);
    s.params.push_back(p);
    s.exp_avg.push_back(m);
    s.exp_avg_sq.push_back(v);
  }
  s.exp_avg_sq.back().clear();  // an empty piece (a replica that owns no shard of a chunk)
  return s;
}

bool same(const StageSnapshot& a, const StageSnapshot& b) {
  return a.next_step == b.next_step && a.params == b.params && a.exp_avg == b.exp_avg &&
         a.exp_avg_sq == b.exp_avg_sq && a.actor_state == b.actor_state;
}

struct Pair {
  std::shared_ptr<LocalFabric> fabric = LocalFabric::create(2);
  std::unique_ptr<Transport> a = fabric->endpoint(0), b = fabric->endpoint(1);
};

TEST_CASE("a snapshot crosses the wire whole, in the sender's layout, whichever side posts first", "[snapshot_wire][recovery]") {
  const StageSnapshot sent = sample(12, 3.25f);
  CHECK(snapshot_bytes(sent) == (1000 + 500 + 500 + 37 + 18) * sizeof(float));
  for (bool receive_first : {true, false}) {
    Pair p;
    StageSnapshot got;  // empty: sized from the header
    got.params.resize(5);  // and a stale layout is replaced
    std::optional<Status> sent_st, got_st;
    auto receive = [&] { receive_snapshot(*p.b, 0, kMirrorChannel, got, [&](Status st) { got_st = st; }); };
    auto send = [&] { send_snapshot(*p.a, 1, kMirrorChannel, sent, [&](Status st) { sent_st = st; }); };
    if (receive_first) receive(), send();
    else send(), receive();
    REQUIRE(sent_st);
    REQUIRE(got_st);
    CHECK(sent_st->ok());
    CHECK(got_st->ok());
    CHECK(same(got, sent));
  }
}

TEST_CASE("UH-1: the actor's own state crosses the wire with the snapshot, and a stale one is dropped", "[snapshot_wire][recovery]") {
  StageSnapshot sent = sample(4, 1.5f);
  sent.actor_state = {1, 2, 3, 250, 0, 7};
  CHECK(snapshot_bytes(sent) == (1000 + 500 + 500 + 37 + 18) * sizeof(float) + 6);
  Pair p;
  StageSnapshot got;
  got.actor_state = {9, 9, 9, 9, 9, 9, 9, 9, 9, 9};  // a buffer's earlier contents
  std::optional<Status> got_st, sent_st;
  receive_snapshot(*p.b, 0, kMirrorChannel, got, [&](Status st) { got_st = st; });
  send_snapshot(*p.a, 1, kMirrorChannel, sent, [&](Status st) { sent_st = st; });
  REQUIRE(got_st);
  CHECK(got_st->ok());
  CHECK(same(got, sent));
  // A snapshot without any: the receiver's buffer holds none afterwards.
  sent.actor_state.clear();
  got_st.reset();
  receive_snapshot(*p.b, 0, kMirrorChannel, got, [&](Status st) { got_st = st; });
  send_snapshot(*p.a, 1, kMirrorChannel, sent, [&](Status st) { sent_st = st; });
  REQUIRE(got_st);
  CHECK(got_st->ok());
  CHECK(got.actor_state.empty());
}

// Magic, step, chunks, every piece's size, the actor's own state's bytes.
using Header = std::array<std::uint64_t, 3 + 3 * kMaxSnapshotChunks + 1>;

// A genuine header of `s`, as it travels.
Header header_of(const StageSnapshot& s) {
  Pair p;
  Header h{};
  std::optional<Status> st;
  p.b->recv(0, snapshot_tag(kMirrorChannel, 0), h.data(), sizeof(h), [&](Status x) { st = x; });
  send_snapshot(*p.a, 1, kMirrorChannel, s, [](Status) {});
  REQUIRE(st);
  REQUIRE(st->ok());
  return h;
}

TEST_CASE("SW-1: a header that is not a snapshot's, or claims too much, is refused before any piece lands", "[snapshot_wire][recovery]") {
  const Header genuine = header_of(sample(1, 1));
  CHECK(genuine[1] == 1);
  CHECK(genuine[2] == 2);
  Header bad_magic = genuine, many_chunks = genuine, huge_piece = genuine, bad_step = genuine, huge_state = genuine;
  huge_state.back() = kMaxActorStateBytes + 1;
  bad_magic[0] ^= 1;
  many_chunks[2] = kMaxSnapshotChunks + 1;
  huge_piece[3] = kMaxSnapshotPieceFloats + 1;
  bad_step[1] = std::uint64_t{1} << 40;
  for (auto [forged, word] : {std::pair{bad_magic, "magic"}, std::pair{many_chunks, "chunks"},
                              std::pair{huge_piece, "floats"}, std::pair{bad_step, "step"},
                              std::pair{huge_state, "the actor's own state"}}) {
    Pair p;
    StageSnapshot got;
    std::optional<Status> got_st;
    receive_snapshot(*p.b, 0, kServeChannel, got, [&](Status st) { got_st = st; });
    p.a->send(1, snapshot_tag(kServeChannel, 0), forged.data(), sizeof(forged), [](Status) {});
    REQUIRE(got_st);
    REQUIRE_FALSE(got_st->ok());
    CHECK(got_st->error().message.find(word) != std::string::npos);
    CHECK(got.params.empty());  // nothing sized, nothing received
  }
}

TEST_CASE("SW-2: done runs once, with the error, when the peer fails in the middle", "[snapshot_wire][recovery]") {
  const StageSnapshot sent = sample(3, 2);
  StageSnapshot got;
  std::atomic<int> calls{0};
  std::optional<Status> got_st;
  // The header arrives; the pieces' receives then wait for sends that never come.
  const Header header = header_of(sent);
  Pair q;  // a fresh pair: only the header is sent
  receive_snapshot(*q.b, 0, kMirrorChannel, got, [&](Status st) {
    ++calls;
    got_st = st;
  });
  q.a->send(1, snapshot_tag(kMirrorChannel, 0), header.data(), sizeof(header), [](Status) {});
  CHECK(calls == 0);  // sized, waiting for its pieces
  CHECK(got.params.size() == 2);
  q.fabric->fail(0);
  CHECK(calls == 1);
  REQUIRE(got_st);
  CHECK_FALSE(got_st->ok());
}

}  // namespace
}  // namespace troupe
