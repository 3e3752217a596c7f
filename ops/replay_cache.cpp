#include "ops/replay_cache.hpp"

namespace troupe {

Status ReplayCache::run(const ExecContext& ctx, Key key, const std::function<void()>& enqueue) {
  if (!ctx.replay || direct_.contains(&ctx.stream)) {
    enqueue();
    return Status::success();
  }
  key.push_back(key_of(&ctx.stream));
  auto it = replays_.find(key);
  if (it == replays_.end()) {
    if (replays_.size() >= kMaxReplays) {
      enqueue();
      return Status::success();
    }
    auto replay = ctx.stream.capture(enqueue);
    if (!replay) return replay.error();
    if (!*replay) {  // the stream runs work as it is enqueued: nothing to capture
      direct_.insert(&ctx.stream);
      enqueue();
      return Status::success();
    }
    it = replays_.emplace(std::move(key), std::move(*replay)).first;
  }
  return it->second->launch(ctx.stream);
}

}  // namespace troupe
