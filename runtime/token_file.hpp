// Token files: a 32-byte header (magic "TROUPETK", version, token width in
// bytes, token count) followed by little-endian token ids. Read through mmap.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/expected.hpp"

namespace troupe {

inline constexpr char kTokenMagic[8] = {'T', 'R', 'O', 'U', 'P', 'E', 'T', 'K'};
inline constexpr std::uint32_t kTokenVersion = 1;

/// Writes `tokens` (width 1 byte: the byte-level tokenizer) atomically to `path`.
Status write_token_file(const std::string& path, std::span<const std::uint8_t> tokens);

/// A read-only memory-mapped token file.
class TokenFile {
 public:
  static Expected<TokenFile> open(const std::string& path);
  TokenFile(TokenFile&& o) noexcept;
  TokenFile& operator=(TokenFile&& o) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return count_; }
  std::uint32_t width() const { return width_; }
  std::int32_t at(std::uint64_t i) const;
  /// Copies tokens [begin, begin + n) into out as int32.
  void read(std::uint64_t begin, std::size_t n, std::int32_t* out) const;

 private:
  TokenFile() = default;
  std::string path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  std::uint64_t count_ = 0;
  std::uint32_t width_ = 1;
};

}  // namespace troupe
