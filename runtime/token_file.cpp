// Token file writing (temp + rename) and mmap reading with header validation.
#include "runtime/token_file.hpp"

#include "common/atomic_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace troupe {
namespace {

constexpr std::size_t kHeaderBytes = 32;

void put_u32(char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint64_t get_le(const unsigned char* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

Status write_token_file(const std::string& path, std::span<const std::uint8_t> tokens) {
  char header[kHeaderBytes] = {};
  std::memcpy(header, kTokenMagic, 8);
  put_u32(header + 8, kTokenVersion);
  put_u32(header + 12, 1);
  put_u64(header + 16, tokens.size());
  return write_file_atomically(path, [&](std::ostream& out) {
    out.write(header, kHeaderBytes);
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size()));
  });
}

Expected<TokenFile> TokenFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(path, ": cannot open token file (", std::strerror(errno), ")");
  struct stat st {};
  ::fstat(fd, &st);
  const auto bytes = static_cast<std::size_t>(st.st_size);
  if (bytes < kHeaderBytes) {
    ::close(fd);
    return make_error(path, ": not a token file (shorter than its header)");
  }
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return make_error(path, ": mmap failed (", std::strerror(errno), ")");
  TokenFile f;
  f.path_ = path;
  f.map_ = map;
  f.map_bytes_ = bytes;
  auto* p = static_cast<const unsigned char*>(map);
  if (std::memcmp(p, kTokenMagic, 8) != 0)
    return make_error(path, ": not a token file (bad magic; write one with `troupe prepare`)");
  if (get_le(p + 8, 4) != kTokenVersion)
    return make_error(path, ": token file version ", std::to_string(get_le(p + 8, 4)), " is not supported");
  f.width_ = static_cast<std::uint32_t>(get_le(p + 12, 4));
  if (f.width_ != 1 && f.width_ != 2 && f.width_ != 4)
    return make_error(path, ": token width ", std::to_string(f.width_), " must be 1, 2 or 4 bytes");
  f.count_ = get_le(p + 16, 8);
  if (kHeaderBytes + f.count_ * f.width_ > bytes)
    return make_error(path, ": truncated (header says ", std::to_string(f.count_), " tokens)");
  f.tokens_ = p + kHeaderBytes;
  return f;
}

TokenFile::TokenFile(TokenFile&& o) noexcept { *this = std::move(o); }

TokenFile& TokenFile::operator=(TokenFile&& o) noexcept {
  if (this != &o) {
    if (map_) ::munmap(map_, map_bytes_);
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = o.map_bytes_;
    tokens_ = o.tokens_;
    count_ = o.count_;
    width_ = o.width_;
  }
  return *this;
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

std::int32_t TokenFile::at(std::uint64_t i) const {
  return static_cast<std::int32_t>(get_le(tokens_ + i * width_, static_cast<int>(width_)));
}

void TokenFile::read(std::uint64_t begin, std::size_t n, std::int32_t* out) const {
  if (width_ == 1) {
    for (std::size_t i = 0; i < n; ++i) out[i] = tokens_[begin + i];
    return;
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = at(begin + i);
}

}  // namespace troupe
