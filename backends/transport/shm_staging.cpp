// CL-4's arenas: memfd files mapped by their owner read-write and by peers
// (through /proc/<pid>/fd/<fd>) read-only.
#include "backends/transport/shm_staging.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "common/hash.hpp"
#include "common/posix_file.hpp"

namespace troupe {
namespace {

std::string text_of(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

std::uint64_t random_id() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

std::uint64_t this_host() {
  static const std::uint64_t host = [] {
    char ns[256] = {};
    const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    return fnv1a(std::string_view(ns, n > 0 ? static_cast<std::size_t>(n) : 0),
                 fnv1a(text_of("/proc/sys/kernel/random/boot_id")));
  }();
  return host;
}

StagingArena::StagingArena(int fd, std::byte* base, int slots, std::size_t slot_bytes)
    : fd_(fd), base_(base), slots_(slots), slot_bytes_(slot_bytes), id_(random_id()) {}

StagingArena::~StagingArena() {
  ::munmap(base_, static_cast<std::size_t>(slots_) * slot_bytes_);
  ::close(fd_);
}

Expected<std::unique_ptr<StagingArena>> StagingArena::create(int slots, std::size_t slot_bytes) {
  const std::size_t bytes = static_cast<std::size_t>(slots) * slot_bytes;
  UniqueFd fd(::memfd_create("troupe-staging", MFD_CLOEXEC));
  if (!fd) return make_error("collective staging: memfd_create: ", std::strerror(errno));
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return make_error("collective staging: ftruncate to ", std::to_string(bytes), " bytes: ", std::strerror(errno));
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return make_error("collective staging: mmap of ", std::to_string(bytes), " bytes: ", std::strerror(errno));
  return std::unique_ptr<StagingArena>(new StagingArena(fd.release(), static_cast<std::byte*>(base), slots, slot_bytes));
}

StagingDescriptor StagingArena::describe(int s, std::size_t bytes) const {
  return {this_host(), id_, ::getpid(), fd_, static_cast<std::uint64_t>(slots_) * slot_bytes_,
          static_cast<std::uint64_t>(s) * slot_bytes_, bytes};
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
    const std::string path = "/proc/" + std::to_string(d.pid) + "/fd/" + std::to_string(d.fd);
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0) return make_error("collective staging: open ", path, ": ", std::strerror(errno));
    if (static_cast<std::uint64_t>(st.st_size) != d.arena_bytes)
      return make_error("collective staging: ", path, " is not the sender's arena");
    void* base = ::mmap(nullptr, d.arena_bytes, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (base == MAP_FAILED) return make_error("collective staging: mmap ", path, ": ", std::strerror(errno));
    const std::size_t bytes = d.arena_bytes;
    mapped_.push_front({d.arena_id, std::shared_ptr<const std::byte>(static_cast<const std::byte*>(base),
                                                                     [bytes](const std::byte* p) { ::munmap(const_cast<std::byte*>(p), bytes); })});
    if (mapped_.size() > kKept) mapped_.pop_back();
    it = mapped_.begin();
  } else if (it != mapped_.begin()) {
    mapped_.splice(mapped_.begin(), mapped_, it);
    it = mapped_.begin();
  }
  return std::shared_ptr<const std::byte>(it->base, it->base.get() + d.offset);
}

}  // namespace troupe
