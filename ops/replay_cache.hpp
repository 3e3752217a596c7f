// Work whose launches do not change from one call to the next, captured on
// its first run and replayed after (CUDA graphs where the stream captures):
// a transformer layer's forward or backward is dozens of kernels and GEMMs,
// and a small model's step is bound by launching them, not by running them.
//
// GR-1: a key names everything the captured work depends on that can change
// between calls — its buffers, its flags, the stream. The caller owns that
// promise: the same key must enqueue the same operations on the same memory
// with the same arguments (no per-step scalars, no host reads). A replay then
// runs the very kernels the first call ran, so its results have the same bits.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "ops/exec_context.hpp"

namespace troupe {

class ReplayCache {
 public:
  using Key = std::vector<std::uintptr_t>;

  /// Enqueues on ctx's stream what `enqueue` enqueues: directly where
  /// ctx.replay is off or the stream does not capture, else captured on the
  /// first call for `key` (on this stream) and replayed from then on.
  Status run(const ExecContext& ctx, Key key, const std::function<void()>& enqueue);
  /// Replays held (one per key and stream).
  std::size_t size() const { return replays_.size(); }
  /// At most this many are held: a caller whose buffers move from call to
  /// call (new keys without end) gets its work enqueued directly beyond it.
  static constexpr std::size_t kMaxReplays = 4096;

 private:
  std::map<Key, std::unique_ptr<Replay>> replays_;
  std::set<const Stream*> direct_;  // streams that do not capture
};

/// A buffer's address as part of a key.
inline std::uintptr_t key_of(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace troupe
