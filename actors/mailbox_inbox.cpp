// MailboxInbox.
#include "actors/mailbox_inbox.hpp"

#include <caf/all.hpp>

#include "actors/protocol.hpp"

namespace troupe {

MailboxInbox::MailboxInbox(caf::blocking_actor* self, int wait_timeout_ms, Transport* drive)
    : self_(self), wait_timeout_ms_(wait_timeout_ms), handle_(self->address()), drive_(drive) {}

Completion MailboxInbox::expect(EventKey key) {
  Entry& e = entries_[key];
  e.done = false;
  e.armed_at = EventClock::now();
  return [to = handle_, key, arrivals = arrivals_, epoch = epoch_](Status st) {
    const auto at = EventClock::now().time_since_epoch().count();
    arrivals->fetch_add(1, std::memory_order_release);
    if (auto actor = caf::actor_cast<caf::actor>(to))  // MI-1: gone with its actor, it sends nothing
      caf::anon_send(actor, msg::TransferDone{static_cast<std::int32_t>(key.event), key.chunk, key.index, st.ok(),
                                              st.ok() ? std::string() : st.error().message,
                                              !st.ok() && st.error().origin == Origin::peer,
                                              static_cast<std::int64_t>(at), epoch});
  };
}

bool MailboxInbox::receive_one(int timeout_ms) {
  bool got = false;
  auto on_arrival = [&](const msg::TransferDone& m) {
    got = true;
    if (m.epoch != epoch_) return;  // armed before an abort
    Entry& e = entries_[EventKey{static_cast<StageEvent>(m.event), m.chunk, m.index}];
    e.done = true;
    e.status = m.ok ? Status::success() : Status(Error{m.error, m.from_peer ? Origin::peer : Origin::here});
    e.done_at = EventClock::time_point(EventClock::duration(m.at_ns));
  };
  if (timeout_ms < 0)
    self_->receive(on_arrival);
  else
    self_->receive(on_arrival, caf::after(std::chrono::milliseconds(timeout_ms)) >> [] {});
  return got;
}

const char* event_name(StageEvent e) {
  switch (e) {
    case StageEvent::activation_arrived: return "activation arrival";
    case StageEvent::gradient_arrived: return "gradient arrival";
    case StageEvent::activation_sent: return "activation send";
    case StageEvent::gradient_sent: return "gradient send";
    case StageEvent::bucket_reduced: return "bucket reduce-scatter";
    case StageEvent::params_gathered: return "parameter all-gather";
    case StageEvent::tensor_parallel_done: return "tensor-parallel collective";
  }
  return "transfer";
}

Status MailboxInbox::wait(EventKey key) {
  const auto deadline = EventClock::now() + std::chrono::milliseconds(wait_timeout_ms_);
  while (!entries_[key].done) {
    if (drive_) {
      const std::uint64_t seen = arrivals_->load(std::memory_order_acquire);
      drive_->drive_until([&] { return arrivals_->load(std::memory_order_acquire) != seen; }, kDriveIdleAnyEvent);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - EventClock::now()).count();
    if (left <= 0 || !receive_one(static_cast<int>(left))) {
      if (entries_[key].done) break;
      if (EventClock::now() < deadline) continue;
      return make_error(event_name(key.event), " (chunk ", std::to_string(key.chunk), ", index ",
                        std::to_string(key.index), ") did not complete within ", std::to_string(wait_timeout_ms_),
                        " ms (health.wait_timeout_ms)");
    }
  }
  return entries_[key].status;
}

bool MailboxInbox::arrived(EventKey key) {
  while (!entries_[key].done && receive_one(0)) {
  }
  return entries_[key].done;
}

void MailboxInbox::forget_all() {
  ++epoch_;
  entries_.clear();
}

std::pair<EventClock::time_point, EventClock::time_point> MailboxInbox::times(EventKey key) {
  const Entry& e = entries_[key];
  return {e.armed_at, e.done_at};
}

}  // namespace troupe
