// LocalPauses (see local_pauses.hpp).
#include "runtime/health/local_pauses.hpp"

#include <algorithm>

namespace troupe {

std::optional<LocalPauses::Pause> LocalPauses::ticked(Clock::time_point now) {
  if (!due_) return std::nullopt;
  const Clock::time_point due = *due_;
  due_.reset();
  if (now - due <= threshold_) return std::nullopt;
  const Pause p{due, now};
  recent_.push_back(p);
  if (recent_.size() > kKept) recent_.pop_front();
  ++count_;
  total_ += p.length();
  return p;
}

LocalPauses::Clock::duration LocalPauses::within(Clock::time_point from, Clock::time_point to) const {
  Clock::duration covered{};
  for (const Pause& p : recent_) {
    const auto a = std::max(from, p.from), b = std::min(to, p.to);
    if (a < b) covered += b - a;
  }
  return covered;
}

std::string pauses_text(int count, std::int64_t total_ms) {
  if (count == 0) return "";
  return std::to_string(count) + (count == 1 ? " pause" : " pauses") + " of this process (" + std::to_string(total_ms) +
         " ms), ";
}

std::int64_t without_pauses(const LocalPauses& pauses, std::int64_t ms, LocalPauses::Clock::time_point at) {
  if (ms <= 0) return ms;
  const auto covered = pauses.within(at - std::chrono::milliseconds(ms), at);
  return ms - std::chrono::duration_cast<std::chrono::milliseconds>(covered).count();
}

}  // namespace troupe
