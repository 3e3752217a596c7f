// ShmRing: shm_open + ftruncate + mmap, a small header with the creator's pid.
#include "runtime/data/shm_ring.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

namespace troupe {
namespace {

constexpr std::uint64_t kMagic = 0x474e495254505254ull;  // "TRPTRING"
constexpr std::size_t kHeaderBytes = 64;                  // keeps slots 64-byte aligned

struct Header {
  std::uint64_t magic;
  std::uint64_t slot_bytes;
  std::int64_t slots;
  std::int64_t creator_pid;
};

std::size_t round_up(std::size_t n) { return (n + 63) / 64 * 64; }

// Header plus `slots` slots of `slot_bytes`, each rounded up to 64 bytes;
// false if that does not fit in a size_t (a hostile or absurd header).
bool ring_bytes(std::uint64_t slot_bytes, std::int64_t slots, std::size_t& out) {
  if (slots < 1 || slot_bytes == 0 || slot_bytes > SIZE_MAX - 63) return false;
  std::size_t all = 0;
  if (__builtin_mul_overflow(round_up(slot_bytes), static_cast<std::size_t>(slots), &all)) return false;
  return !__builtin_add_overflow(all, kHeaderBytes, &out);
}

Error sys_error(const std::string& name, const char* what) {
  return make_error("shared memory ", name, ": ", what, " (", std::strerror(errno), ")");
}

// A zombie (killed, not yet reaped by its parent) is dead: a process that
// replaces it may take its ring at once.
bool process_alive(pid_t pid) {
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno != EPERM)) return false;
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return true;
  char state = '?';
  // "pid (comm) state ...": comm may hold spaces and parentheses; the state follows the last ')'.
  std::string line(512, '\0');
  const std::size_t n = std::fread(line.data(), 1, line.size(), f);
  std::fclose(f);
  line.resize(n);
  if (const auto close = line.rfind(')'); close != std::string::npos && close + 2 < line.size()) state = line[close + 2];
  return state != 'Z' && state != 'X';
}

// Maps `fd` of `bytes`; closes fd.
Expected<void*> map(int fd, std::size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return sys_error(name, "mmap failed");
  return p;
}

}  // namespace

namespace {

char g_ring_path[256] = {};  // written once before the handlers are installed

extern "C" void remove_ring_and_die(int sig) {
  if (g_ring_path[0]) ::unlink(g_ring_path);  // async-signal-safe, unlike shm_unlink
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void remove_ring_on_termination(const std::string& name) {
  const std::string path = "/dev/shm" + name;
  if (path.size() >= sizeof g_ring_path) return;
  std::snprintf(g_ring_path, sizeof g_ring_path, "%s", path.c_str());
  struct sigaction sa {};
  sa.sa_handler = remove_ring_and_die;
  // SIGPIPE too: a node whose launcher was killed dies writing its next log
  // line into the launcher's closed pipe, possibly before its SIGTERM comes.
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE}) ::sigaction(sig, &sa, nullptr);
}

std::string shm_ring_name(const std::string& job_id, int node_rank) {
  std::string safe;
  for (char c : job_id) safe += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') ? c : '_';
  return "/troupe." + safe + "." + std::to_string(node_rank);
}

int remove_orphaned_rings() {
  std::error_code ec;
  int removed = 0;
  // Never throws: an unreadable /dev/shm (or entry) just ends the sweep.
  for (std::filesystem::directory_iterator it("/dev/shm", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (file.rfind("troupe.", 0) != 0) continue;
    const std::string name = "/" + file;
    const std::string path = "/dev/shm" + name;
    struct stat seen {};
    if (::stat(path.c_str(), &seen) != 0) continue;
    auto ring = ShmRing::open(name);  // not ours (mode 0600) or not a ring: left alone
    if (!ring.ok()) continue;
    const auto* h = static_cast<const Header*>(ring->base_);
    if (process_alive(static_cast<pid_t>(h->creator_pid))) continue;
    // The dead creator's ring only: its rank's restarted process may have
    // replaced it under the same name meanwhile (another job's sweep once
    // removed such a new ring).
    struct stat now {};
    if (::stat(path.c_str(), &now) != 0 || now.st_ino != seen.st_ino) continue;
    if (::shm_unlink(name.c_str()) == 0) ++removed;
  }
  return removed;
}

Expected<ShmRing> ShmRing::create(const std::string& name, std::size_t slot_bytes, int slots) {
  if (slots < 1 || slot_bytes == 0) return make_error("shared memory ", name, ": needs at least one non-empty slot");
  remove_orphaned_rings();  // crashed jobs' rings, whatever they were named
  // A leftover from a crashed creator is removed; a live creator's is not ours to take.
  if (auto existing = open(name); existing.ok()) {
    const auto* h = static_cast<const Header*>(existing->base_);
    if (process_alive(static_cast<pid_t>(h->creator_pid)))
      return make_error("shared memory ", name, " belongs to running process ", std::to_string(h->creator_pid));
    ::shm_unlink(name.c_str());
  } else {
    ::shm_unlink(name.c_str());  // unreadable or foreign leftovers too
  }
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return sys_error(name, "cannot create");
  std::size_t bytes = 0;
  if (!ring_bytes(slot_bytes, slots, bytes)) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return make_error("shared memory ", name, ": ", std::to_string(slots), " slots of ", std::to_string(slot_bytes),
                      " bytes do not fit in memory");
  }
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return sys_error(name, "cannot size");
  }
  auto p = map(fd, bytes, name);
  if (!p) {
    ::shm_unlink(name.c_str());
    return p.error();
  }
  ShmRing r;
  r.name_ = name;
  r.base_ = *p;
  r.bytes_ = bytes;
  r.owner_ = true;
  *static_cast<Header*>(r.base_) = Header{kMagic, slot_bytes, slots, ::getpid()};
  return r;
}

Expected<ShmRing> ShmRing::open(const std::string& name) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return sys_error(name, "cannot open");
  struct stat st {};
  ::fstat(fd, &st);
  if (static_cast<std::size_t>(st.st_size) < kHeaderBytes) {
    ::close(fd);
    return make_error("shared memory ", name, ": not a Troupe ring (too small)");
  }
  auto p = map(fd, static_cast<std::size_t>(st.st_size), name);
  if (!p) return p.error();
  ShmRing r;
  r.name_ = name;
  r.base_ = *p;
  r.bytes_ = static_cast<std::size_t>(st.st_size);
  const auto* h = static_cast<const Header*>(r.base_);
  std::size_t needed = 0;
  if (h->magic != kMagic || !ring_bytes(h->slot_bytes, h->slots, needed) || needed > r.bytes_)
    return make_error("shared memory ", name, ": not a Troupe ring");
  return r;
}

ShmRing::ShmRing(ShmRing&& o) noexcept { *this = std::move(o); }

ShmRing& ShmRing::operator=(ShmRing&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = o.bytes_;
    owner_ = std::exchange(o.owner_, false);
  }
  return *this;
}

ShmRing::~ShmRing() { release(); }

void ShmRing::release() {
  if (base_) ::munmap(base_, bytes_);
  if (owner_) ::shm_unlink(name_.c_str());
  base_ = nullptr;
  owner_ = false;
}

int ShmRing::slots() const { return static_cast<int>(static_cast<const Header*>(base_)->slots); }

std::size_t ShmRing::slot_bytes() const { return static_cast<const Header*>(base_)->slot_bytes; }

void* ShmRing::slot(int i) const {
  return static_cast<char*>(base_) + kHeaderBytes + round_up(slot_bytes()) * static_cast<std::size_t>(i);
}

}  // namespace troupe
