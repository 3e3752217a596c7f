// The data loader actor.
#include "actors/data_loader.hpp"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <algorithm>
#include <map>
#include <optional>

#include "training/batches.hpp"
#include "actors/protocol.hpp"

namespace troupe {
namespace {

struct LoaderState {
  std::shared_ptr<ShmRing> ring;
  DataLoaderSpec spec;
  std::optional<TokenFile> file;
  int next_fill = 0;      // next step to write
  int released_upto = 0;  // every step below this one was released by every consumer
  std::map<int, int> releases;  // step -> consumers that released it (-1: all did)
  std::map<int, std::vector<std::pair<caf::typed_response_promise<msg::BatchSlot>, int>>> waiting;  // step -> (promise, block)
  static inline const char* name = "troupe.data_loader";
};

using LoaderSelf = caf::stateful_actor<LoaderState>;

int block_of(const DataLoaderSpec& spec, int replica) {
  for (std::size_t i = 0; i < spec.replicas.size(); ++i)
    if (spec.replicas[i] == replica) return static_cast<int>(i);
  return -1;
}

// Writes every step the ring has room for, then answers the stages waiting on them.
void fill_ahead(LoaderSelf* self) {
  auto& st = self->state;
  const auto& sp = st.spec;
  while (st.next_fill < sp.steps && st.next_fill < st.released_upto + sp.depth) {
    const int step = st.next_fill++;
    auto* base = static_cast<char*>(st.ring->slot(step % sp.depth));
    for (std::size_t b = 0; b < sp.replicas.size(); ++b)
      for (int mb = 0; mb < sp.microbatches; ++mb) {
        auto* tokens = reinterpret_cast<std::int32_t*>(base + b * sp.block_bytes() + sp.offset_in_block(mb));
        fill_batch_rows(*st.file, sp.seed, step, mb, sp.batch, sp.ctx, tokens, tokens + sp.batch * sp.ctx,
                        sp.replicas[b], sp.dp);
      }
    if (auto it = st.waiting.find(step); it != st.waiting.end()) {
      for (auto& [promise, block] : it->second) promise.deliver(msg::BatchSlot{step % sp.depth, block});
      st.waiting.erase(it);
    }
  }
}

caf::behavior data_loader(LoaderSelf* self, std::shared_ptr<ShmRing> ring, DataLoaderSpec spec) {
  ::pthread_setname_np(::pthread_self(), "troupe.loader");  // its detached thread, named in a stack dump (N-4)
  auto& st = self->state;
  st.ring = std::move(ring);
  st.spec = std::move(spec);
  auto file = open_data(st.spec.train_path, "data.train", st.spec.ctx, st.spec.vocab);
  if (!file) {
    spdlog::error("data loader: {}", file.error().message);
    self->quit(caf::sec::runtime_error);
    return {};
  }
  st.file.emplace(std::move(*file));
  st.next_fill = st.released_upto = std::clamp(st.spec.first_step, 0, st.spec.steps);
  fill_ahead(self);
  return {
      [self](const msg::BatchRequest& ask) -> caf::result<msg::BatchSlot> {
        auto& s = self->state;
        const int block = block_of(s.spec, ask.replica);
        if (block < 0 || ask.step < s.released_upto || ask.step >= s.spec.steps) return caf::sec::invalid_argument;
        if (ask.step < s.next_fill) return msg::BatchSlot{ask.step % s.spec.depth, block};
        auto promise = self->make_response_promise<msg::BatchSlot>();
        s.waiting[ask.step].emplace_back(promise, block);
        return promise;
      },
      [self](const msg::LoaderRewind& r) {  // a recovery: the stages redo from r.step
        auto& s = self->state;
        if (self->current_sender() == nullptr || self->current_sender()->node() != self->node()) return;
        s.next_fill = s.released_upto = std::clamp(static_cast<int>(r.step), 0, s.spec.steps);
        s.releases.clear();
        s.waiting.clear();
        fill_ahead(self);
      },
      [self](const msg::BatchRelease& r) {
        auto& s = self->state;
        const int step = r.step;
        // Only steps that were handed out and not yet released by everyone.
        if (step < s.released_upto || step >= s.next_fill) return;
        if (++s.releases[step] < s.spec.consumers) return;
        s.releases[step] = -1;  // released by every consumer
        for (auto it = s.releases.find(s.released_upto); it != s.releases.end() && it->second == -1;
             it = s.releases.find(s.released_upto)) {
          s.releases.erase(it);
          ++s.released_upto;
        }
        fill_ahead(self);
      },
  };
}

}  // namespace

Expected<std::shared_ptr<ShmRing>> create_data_ring(const std::string& job_id, int node, const DataLoaderSpec& spec) {
  auto ring = ShmRing::create(shm_ring_name(job_id, node), spec.slot_bytes(), spec.depth);
  if (!ring) return ring.error();
  return std::make_shared<ShmRing>(std::move(*ring));
}

caf::actor spawn_data_loader(caf::actor_system& sys, std::shared_ptr<ShmRing> ring, DataLoaderSpec spec) {
  // Detached: its own thread wakes the moment a stage asks (the shared scheduler
  // may sleep for milliseconds between polls).
  return sys.spawn<caf::detached>(data_loader, std::move(ring), std::move(spec));
}

}  // namespace troupe
