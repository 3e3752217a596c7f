// MailboxInbox.
#include "actors/mailbox_inbox.hpp"

#include <caf/all.hpp>

#include "runtime/messages.hpp"

namespace troupe {

MailboxInbox::MailboxInbox(caf::blocking_actor* self) : self_(self), handle_(caf::actor_cast<caf::actor>(self)) {}

Completion MailboxInbox::expect(EventKey key) {
  Entry& e = entries_[key];
  e.done = false;
  e.armed_at = EventClock::now();
  return [to = handle_, key](Status st) {
    const auto at = EventClock::now().time_since_epoch().count();
    caf::anon_send(to, msg::arrived_atom::value, static_cast<int>(key.event), key.chunk, key.index, st.ok(),
                   st.ok() ? std::string() : st.error().message, static_cast<std::int64_t>(at));
  };
}

bool MailboxInbox::receive_one(int timeout_ms) {
  bool got = false;
  auto on_arrival = [&](msg::arrived_atom, int event, int chunk, int index, bool ok, const std::string& error,
                        std::int64_t at) {
    Entry& e = entries_[EventKey{static_cast<StageEvent>(event), chunk, index}];
    e.done = true;
    e.status = ok ? Status::success() : Status(make_error(error));
    e.done_at = EventClock::time_point(EventClock::duration(at));
    got = true;
  };
  if (timeout_ms < 0)
    self_->receive(on_arrival);
  else
    self_->receive(on_arrival, caf::after(std::chrono::milliseconds(timeout_ms)) >> [] {});
  return got;
}

Status MailboxInbox::wait(EventKey key) {
  while (!entries_[key].done) receive_one(-1);
  return entries_[key].status;
}

bool MailboxInbox::arrived(EventKey key) {
  while (!entries_[key].done && receive_one(0)) {
  }
  return entries_[key].done;
}

std::pair<EventClock::time_point, EventClock::time_point> MailboxInbox::times(EventKey key) {
  const Entry& e = entries_[key];
  return {e.armed_at, e.done_at};
}

}  // namespace troupe
