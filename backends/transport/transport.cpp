// Transport: the abort listeners every implementation shares.
#include "backends/transport/transport.hpp"

#include <map>
#include <mutex>

namespace troupe {

struct Transport::AbortListeners {
  std::mutex mu;  // held while listeners run: a handle's removal waits for them
  std::map<std::uint64_t, std::function<void()>> by_id;
  std::uint64_t next = 0;
};

Transport::Transport() : listeners_(std::make_shared<AbortListeners>()) {}

std::shared_ptr<void> Transport::on_abort(std::function<void()> listener) {
  std::weak_ptr<AbortListeners> home = listeners_;
  std::uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(listeners_->mu);
    id = listeners_->next++;
    listeners_->by_id.emplace(id, std::move(listener));
  }
  return std::shared_ptr<void>(nullptr, [home, id](void*) {
    if (auto l = home.lock()) {
      std::lock_guard<std::mutex> lock(l->mu);
      l->by_id.erase(id);
    }
  });
}

void Transport::run_abort_listeners() {
  std::lock_guard<std::mutex> lock(listeners_->mu);
  for (auto& [id, listener] : listeners_->by_id) listener();
}

}  // namespace troupe
