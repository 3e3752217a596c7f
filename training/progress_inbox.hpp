// An Inbox that marks its actor's progress slot waiting while it waits (H-1),
// around the inbox the completions really arrive in.
#pragma once

#include "training/inbox.hpp"
#include "training/progress.hpp"

namespace troupe {

class ProgressInbox final : public Inbox {
 public:
  ProgressInbox(Inbox& inner, ProgressSlot* slot) : inner_(inner), slot_(slot) {}
  Completion expect(EventKey key) override { return inner_.expect(key); }
  Status wait(EventKey key) override {
    if (inner_.arrived(key)) return inner_.wait(key);  // no wait at all: not marked
    WaitScope waiting(slot_);
    return inner_.wait(key);
  }
  bool arrived(EventKey key) override { return inner_.arrived(key); }
  std::pair<EventClock::time_point, EventClock::time_point> times(EventKey key) override { return inner_.times(key); }
  void forget_all() override { inner_.forget_all(); }

 private:
  Inbox& inner_;
  ProgressSlot* slot_;
};

}  // namespace troupe
