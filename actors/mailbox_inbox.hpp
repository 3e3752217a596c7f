// Events as messages in a blocking stage actor's mailbox: a completion, on
// whatever thread the transport runs it, sends msg::TransferDone to the actor; waiting for an event is receiving
// messages until it has come. Other messages (the data loader's answers) stay
// in the mailbox for whoever asks for them. While it waits, the actor drives
// its transport itself (Transport::drive_until), so a transfer that completes
// meanwhile needs no hand-off from the progress thread.
#pragma once

#include <atomic>
#include <memory>

#include <caf/fwd.hpp>
#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>

#include "training/inbox.hpp"

namespace troupe {

class MailboxInbox final : public Inbox {
 public:
  /// Waits give up after `wait_timeout_ms` (health.wait_timeout_ms) with an
  /// error naming the event. `drive`, if given, is the transport whose
  /// completions this inbox expects; waits drive it.
  explicit MailboxInbox(caf::blocking_actor* self, int wait_timeout_ms = 600000, Transport* drive = nullptr);
  Completion expect(EventKey key) override;
  Status wait(EventKey key) override;
  bool arrived(EventKey key) override;
  std::pair<EventClock::time_point, EventClock::time_point> times(EventKey key) override;
  void forget_all() override;

 private:
  struct Entry {
    bool done = true;
    Status status;
    EventClock::time_point armed_at{}, done_at{};
  };
  // Handles one arrival message; false if none came within `timeout_ms` (-1: wait forever).
  bool receive_one(int timeout_ms);
  caf::blocking_actor* self_;
  int wait_timeout_ms_;
  /// MI-1: weak. A completion outlives its actor when its transfer never
  /// completes (a receive posted when the job ended) and the transport
  /// outlives the actor system; a strong handle there kept the ended actor
  /// alive for as long.
  caf::actor_addr handle_;
  Transport* drive_;
  // Completions count themselves here before they send, so that a driving
  // wait knows when to look at the mailbox.
  std::shared_ptr<std::atomic<std::uint64_t>> arrivals_ = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::map<EventKey, Entry> entries_;
  std::uint64_t epoch_ = 0;  ///< bumped by forget_all: older deliveries are dropped
};

}  // namespace troupe
