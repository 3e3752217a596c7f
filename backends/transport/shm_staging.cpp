// CL-4's arenas (slots in a SharedBytes region), kept between operations,
// and the peers' regions mapped here.
#include "backends/transport/shm_staging.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/posix_file.hpp"

namespace troupe {

StagingArena::StagingArena(std::unique_ptr<SharedBytes> bytes, int slots, std::size_t slot_bytes)
    : bytes_(std::move(bytes)), slots_(slots), slot_bytes_(slot_bytes) {}

Expected<std::unique_ptr<StagingArena>> StagingArena::create(int slots, std::size_t slot_bytes) {
  auto bytes = SharedBytes::create(static_cast<std::size_t>(slots) * slot_bytes, /*findable=*/false);
  if (!bytes) return make_error("collective staging: ", bytes.error().message);
  return std::unique_ptr<StagingArena>(new StagingArena(std::move(*bytes), slots, slot_bytes));
}

StagingDescriptor StagingArena::describe(int s, std::size_t bytes) const {
  return bytes_->describe(static_cast<std::size_t>(s) * slot_bytes_, bytes);
}

Expected<std::unique_ptr<StagingArena>> StagingPool::take(int slots, std::size_t slot_bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // spare_ runs from the largest slots to the smallest.
    auto fits = std::find_if(spare_.rbegin(), spare_.rend(),
                             [&](const auto& a) { return a->slots() >= slots && a->slot_bytes() >= slot_bytes; });
    if (fits != spare_.rend()) {
      auto arena = std::move(*fits);
      spare_.erase(std::next(fits).base());
      return arena;
    }
  }
  return StagingArena::create(slots, slot_bytes);
}

void StagingPool::give_back(std::unique_ptr<StagingArena> arena) {
  std::lock_guard<std::mutex> lock(mu_);
  spare_.push_back(std::move(arena));
  std::sort(spare_.begin(), spare_.end(), [](const auto& a, const auto& b) { return a->slot_bytes() > b->slot_bytes(); });
  auto bytes = [](const auto& a) { return static_cast<std::size_t>(a->slots()) * a->slot_bytes(); };
  std::size_t total = 0;
  for (const auto& a : spare_) total += bytes(a);
  while (total > kSpareBytes) {  // the largest go first
    total -= bytes(spare_.front());
    spare_.erase(spare_.begin());
  }
  if (spare_.size() > kSpareArenas) spare_.resize(kSpareArenas);
}

Expected<std::shared_ptr<const std::byte>> PeerArenas::map(const StagingDescriptor& d) {
  if (d.offset > d.arena_bytes || d.bytes > d.arena_bytes - d.offset)
    return make_error("collective staging: a descriptor past its arena's end");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(mapped_.begin(), mapped_.end(), [&](const Mapping& m) { return m.id == d.arena_id; });
  if (it == mapped_.end()) {
    if (d.host != this_host()) return make_error("collective staging: the sender is on another host");
    mapped_.remove_if([](const Mapping& m) { return ::kill(static_cast<pid_t>(m.pid), 0) != 0 && errno == ESRCH; });
    const std::string path = "/proc/" + std::to_string(d.pid) + "/fd/" + std::to_string(d.fd);
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0) return make_error("collective staging: open ", path, ": ", std::strerror(errno));
    if (static_cast<std::uint64_t>(st.st_size) != d.arena_bytes)
      return make_error("collective staging: ", path, " is not the sender's arena");
    void* base = ::mmap(nullptr, d.arena_bytes, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (base == MAP_FAILED) return make_error("collective staging: mmap ", path, ": ", std::strerror(errno));
    const std::size_t bytes = d.arena_bytes;
    mapped_.push_front({d.arena_id, d.pid, std::shared_ptr<const std::byte>(static_cast<const std::byte*>(base),
                                                                     [bytes](const std::byte* p) { ::munmap(const_cast<std::byte*>(p), bytes); })});
    if (mapped_.size() > kKept) mapped_.pop_back();
    it = mapped_.begin();
  } else if (it != mapped_.begin()) {
    mapped_.splice(mapped_.begin(), mapped_, it);
    it = mapped_.begin();
  }
  return std::shared_ptr<const std::byte>(it->base, it->base.get() + d.offset);
}

void PeerArenas::forget_all() {
  std::lock_guard<std::mutex> lock(mu_);
  mapped_.clear();
}

std::size_t PeerArenas::mapped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mapped_.size();
}

}  // namespace troupe
