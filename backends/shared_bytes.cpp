// Memfd regions, and the process's table of findable ones (by start address).
#include "backends/shared_bytes.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>

#include "common/hash.hpp"
#include "common/posix_file.hpp"

namespace troupe {
namespace {

std::string first_line_of(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
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
  static const std::uint64_t host = [] {
    char ns[256] = {};
    const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    return fnv1a(std::string_view(ns, n > 0 ? static_cast<std::size_t>(n) : 0),
                 fnv1a(first_line_of("/proc/sys/kernel/random/boot_id")));
  }();
  return host;
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
