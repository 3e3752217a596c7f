// Memfd regions, and the process's table of findable ones (by start address).
#include "backends/shared_bytes.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <string_view>

#include "common/hash.hpp"
#include "common/posix_file.hpp"

namespace troupe {
namespace {

// Reads and links below use the stack only: this_host() may run in a child
// forked from a multi-threaded process, where malloc's locks may be held.

// The first line of a small file (at most 127 bytes of it), or "".
std::string_view first_line_of(const char* path, char (&buf)[128]) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return {};
  std::string_view line(buf, static_cast<std::size_t>(n));
  return line.substr(0, line.find('\n'));
}

// What a /proc/self/ns link names ("net:[4026531840]"), or "".
std::string_view namespace_of(const char* link, char (&buf)[128]) {
  const ssize_t n = ::readlink(link, buf, sizeof buf - 1);
  return n > 0 ? std::string_view(buf, static_cast<std::size_t>(n)) : std::string_view{};
}

std::uint64_t compute_host() {
  char boot[128], pid_ns[128], net_ns[128];
  return fnv1a(namespace_of("/proc/self/ns/net", net_ns),
               fnv1a(namespace_of("/proc/self/ns/pid", pid_ns),
                     fnv1a(first_line_of("/proc/sys/kernel/random/boot_id", boot))));
}

std::uint64_t random_id() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

// Findable regions by their first byte's address; they never overlap (each
// is a mapping of its own).
struct FindableTable {
  std::mutex mu;
  std::map<std::uintptr_t, const SharedBytes*> by_start;
};

FindableTable& findable() {
  static FindableTable table;
  return table;
}

}  // namespace

std::uint64_t this_host() {
  // Once per process, after it entered its namespaces: a forked child (run
  // in a namespace of its own by VethHosts::enter) computes its own.
  static std::atomic<std::uint64_t> host{0};
  static std::atomic<pid_t> computed_in{0};
  const pid_t me = ::getpid();
  if (computed_in.load(std::memory_order_acquire) != me) {
    host.store(compute_host(), std::memory_order_relaxed);
    computed_in.store(me, std::memory_order_release);
  }
  return host.load(std::memory_order_relaxed);
}

SharedBytes::SharedBytes(int fd, std::byte* base, std::size_t bytes, bool findable_region)
    : fd_(fd), base_(base), bytes_(bytes), findable_(findable_region), id_(random_id()) {
  if (!findable_) return;
  std::lock_guard<std::mutex> lock(findable().mu);
  findable().by_start[reinterpret_cast<std::uintptr_t>(base_)] = this;
}

SharedBytes::~SharedBytes() {
  if (findable_) {
    std::lock_guard<std::mutex> lock(findable().mu);
    findable().by_start.erase(reinterpret_cast<std::uintptr_t>(base_));
  }
  ::munmap(base_, bytes_);
  ::close(fd_);
}

Expected<std::unique_ptr<SharedBytes>> SharedBytes::create(std::size_t bytes, bool findable_region) {
  const std::size_t mapped = bytes == 0 ? 1 : bytes;
  UniqueFd fd(::memfd_create("troupe-shared", MFD_CLOEXEC));
  if (!fd) return make_error("shared memory: memfd_create: ", std::strerror(errno));
  if (::ftruncate(fd.get(), static_cast<off_t>(mapped)) != 0)
    return make_error("shared memory: ftruncate to ", std::to_string(mapped), " bytes: ", std::strerror(errno));
  void* base = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return make_error("shared memory: mmap of ", std::to_string(mapped), " bytes: ", std::strerror(errno));
  return std::unique_ptr<SharedBytes>(new SharedBytes(fd.release(), static_cast<std::byte*>(base), mapped, findable_region));
}

StagingDescriptor SharedBytes::describe(std::size_t offset, std::size_t bytes) const {
  return {this_host(), id_, ::getpid(), fd_, bytes_, offset, bytes};
}

std::optional<StagingDescriptor> find_shared(const void* p, std::size_t bytes) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(findable().mu);
  auto it = findable().by_start.upper_bound(at);
  if (it == findable().by_start.begin()) return std::nullopt;
  const SharedBytes& region = *std::prev(it)->second;
  const std::size_t offset = at - std::prev(it)->first;
  if (offset >= region.size() || bytes > region.size() - offset) return std::nullopt;
  return region.describe(offset, bytes);
}

}  // namespace troupe
