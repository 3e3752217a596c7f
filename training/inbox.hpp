// What a stage actor waits for, by name: "activation arrived", "gradient
// arrived", "activation sent", "gradient sent", "bucket reduced", "parameters
// gathered", "tensor-parallel collective done". The stage's code arms an event when it starts the transfer and
// waits for it when it needs the result; how the completion travels is the
// inbox's business. In a stage actor it is a message in the actor's mailbox
// (MailboxInbox, mailbox_inbox.hpp); without an actor (tests, tools) a futex
// flag (FlagInbox).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "backends/transport/transport.hpp"
#include "backends/transport/wait.hpp"

namespace troupe {

enum class StageEvent : std::uint8_t {
  activation_arrived,
  gradient_arrived,
  activation_sent,
  gradient_sent,
  bucket_reduced,
  params_gathered,
  tensor_parallel_done,  ///< the tensor-parallel group's sum or gather inside a layer (one at a time)
};

/// One event: what, for which model chunk, and which microbatch or bucket.
struct EventKey {
  StageEvent event;
  int chunk = 0;
  int index = 0;
  friend auto operator<=>(const EventKey&, const EventKey&) = default;
};

using EventClock = std::chrono::steady_clock;

class Inbox {
 public:
  virtual ~Inbox() = default;
  /// Arms `key` and returns the completion that delivers it (from any thread).
  virtual Completion expect(EventKey key) = 0;
  /// Blocks until `key` was delivered (other events are recorded meanwhile);
  /// its status. An event never armed counts as delivered.
  virtual Status wait(EventKey key) = 0;
  /// Whether `key` was delivered; never blocks.
  virtual bool arrived(EventKey key) = 0;
  /// When `key` was last armed and delivered (for timelines).
  virtual std::pair<EventClock::time_point, EventClock::time_point> times(EventKey key) = 0;
  /// After an abort (a recovery): forgets every armed event, and drops the
  /// deliveries still to come of events armed before. Inboxes of jobs that
  /// never recover need not support it.
  virtual void forget_all() {}
};

/// Events as futex flags (CompletionFlag), for code that runs without an actor.
class FlagInbox final : public Inbox {
 public:
  Completion expect(EventKey key) override { return flag(key).callback(); }
  Status wait(EventKey key) override { return flag(key).wait(); }
  bool arrived(EventKey key) override { return flag(key).done(); }
  std::pair<EventClock::time_point, EventClock::time_point> times(EventKey key) override {
    return {flag(key).armed_at(), flag(key).completed_at()};
  }

 private:
  // Only the owning thread touches the map; completions hold the flag itself.
  CompletionFlag& flag(EventKey key) {
    auto& f = flags_[key];
    if (!f) f = std::make_unique<CompletionFlag>();
    return *f;
  }
  std::map<EventKey, std::unique_ptr<CompletionFlag>> flags_;
};

}  // namespace troupe
