// Token file writing (temp + rename) and mmap reading with header validation.
#include "runtime/data/token_file.hpp"

#include "common/atomic_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace troupe {
namespace {

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

// The largest id among `count` ids of `width` bytes (a loop the compiler vectorizes).
template <class T>
std::uint32_t max_of(const unsigned char* p, std::uint64_t count) {
  T best = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    best = std::max(best, v);
  }
  return static_cast<std::uint32_t>(best);
}

std::uint32_t max_token_of(const unsigned char* p, const TokenHeader& h) {
  switch (h.width) {
    case 1: return max_of<std::uint8_t>(p, h.count);
    case 2: return max_of<std::uint16_t>(p, h.count);
    default: return max_of<std::uint32_t>(p, h.count);
  }
}

}  // namespace

Expected<TokenHeader> parse_token_header(const unsigned char* p, std::size_t size, const std::string& path) {
  if (size < kTokenHeaderBytes) return make_error(path, ": not a token file (shorter than its header)");
  if (std::memcmp(p, kTokenMagic, 8) != 0)
    return make_error(path, ": not a token file (bad magic; write one with `troupe prepare`)");
  TokenHeader h;
  h.version = static_cast<std::uint32_t>(get_le(p + 8, 4));
  if (h.version != 1 && h.version != 2)
    return make_error(path, ": token file version ", std::to_string(h.version), " is not supported");
  h.width = static_cast<std::uint32_t>(get_le(p + 12, 4));
  if (h.width != 1 && h.width != 2 && h.width != 4)
    return make_error(path, ": token width ", std::to_string(h.width), " must be 1, 2 or 4 bytes");
  h.count = get_le(p + 16, 8);
  h.vocab = h.version >= 2 ? static_cast<std::uint32_t>(get_le(p + 24, 4)) : 0;
  if (h.version >= 2 && h.vocab == 0) return make_error(path, ": token file header records a vocabulary of 0");
  // count * width + header <= size, without overflow.
  if (h.count > (size - kTokenHeaderBytes) / h.width)
    return make_error(path, ": truncated (header says ", std::to_string(h.count), " tokens of ",
                      std::to_string(h.width), " bytes; the file holds ", std::to_string(size), " bytes)");
  return h;
}

Status write_token_file(const std::string& path, std::span<const std::uint8_t> tokens) {
  char header[kTokenHeaderBytes] = {};
  std::memcpy(header, kTokenMagic, 8);
  put_u32(header + 8, kTokenVersion);
  put_u32(header + 12, 1);
  put_u64(header + 16, tokens.size());
  put_u32(header + 24, 256);
  return write_file_atomically(path, [&](std::ostream& out) {
    out.write(header, kTokenHeaderBytes);
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size()));
  });
}

Expected<TokenFile> TokenFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(path, ": cannot open token file (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(path, ": not a regular file");
  }
  const auto bytes = static_cast<std::size_t>(st.st_size);
  if (bytes < kTokenHeaderBytes) {
    ::close(fd);
    return make_error(path, ": not a token file (shorter than its header)");
  }
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return make_error(path, ": mmap failed (", std::strerror(errno), ")");
  TokenFile f;  // owns the mapping from here on, whatever happens
  f.path_ = path;
  f.map_ = map;
  f.map_bytes_ = bytes;
  auto* p = static_cast<const unsigned char*>(map);
  auto header = parse_token_header(p, bytes, path);
  if (!header) return header.error();
  f.header_ = *header;
  f.tokens_ = p + kTokenHeaderBytes;
  f.max_token_ = f.header_.count ? max_token_of(f.tokens_, f.header_) : 0;
  if (f.header_.vocab != 0 && f.max_token_ >= f.header_.vocab)
    return make_error(path, ": token id ", std::to_string(f.max_token_), " is outside the vocabulary of ",
                      std::to_string(f.header_.vocab), " its header records");
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
    header_ = o.header_;
    max_token_ = o.max_token_;
  }
  return *this;
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

std::int32_t TokenFile::at(std::uint64_t i) const {
  return static_cast<std::int32_t>(get_le(tokens_ + i * header_.width, static_cast<int>(header_.width)));
}

void TokenFile::read(std::uint64_t begin, std::size_t n, std::int32_t* out) const {
  if (header_.width == 1) {
    for (std::size_t i = 0; i < n; ++i) out[i] = tokens_[begin + i];
    return;
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = at(begin + i);
}

Status check_vocabulary(const TokenFile& file, int vocab, const char* key) {
  if (file.size() > 0 && static_cast<std::int64_t>(file.max_token()) >= vocab)
    return make_error(key, ": ", file.path(), " holds token id ", std::to_string(file.max_token()),
                      " but model.vocab is ", std::to_string(vocab));
  if (file.vocab() > static_cast<std::uint32_t>(vocab))
    return make_error(key, ": ", file.path(), " was prepared for a vocabulary of ", std::to_string(file.vocab()),
                      " but model.vocab is ", std::to_string(vocab));
  return Status::success();
}

}  // namespace troupe
