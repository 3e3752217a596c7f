// Token files: a 32-byte header (magic "TROUPETK", version, token width in
// bytes, token count, vocabulary size) followed by little-endian token ids.
// Read through mmap. Opening checks every size with overflow-safe arithmetic
// and scans the ids once, so a file whose ids do not fit its stated
// vocabulary is refused before any of them reaches an embedding table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/expected.hpp"

namespace troupe {

inline constexpr char kTokenMagic[8] = {'T', 'R', 'O', 'U', 'P', 'E', 'T', 'K'};
/// Version 2 records the vocabulary; version 1 files (no vocabulary) still open.
inline constexpr std::uint32_t kTokenVersion = 2;
inline constexpr std::size_t kTokenHeaderBytes = 32;

/// What a token file's header says, validated against the file's size.
struct TokenHeader {
  std::uint32_t version = kTokenVersion;
  std::uint32_t width = 1;   ///< bytes per token id: 1, 2 or 4
  std::uint64_t count = 0;   ///< token ids after the header
  std::uint32_t vocab = 0;   ///< ids are < vocab; 0 = not recorded (version 1)
};

/// Parses and checks the header at the start of `bytes` (the whole file,
/// `size` bytes long): magic, version, width, and that `count` ids of `width`
/// bytes fit in the file without overflow. Errors name `path`. Never throws.
Expected<TokenHeader> parse_token_header(const unsigned char* bytes, std::size_t size, const std::string& path);

/// Writes `tokens` (width 1 byte: the byte-level tokenizer, vocabulary 256)
/// atomically to `path`.
Status write_token_file(const std::string& path, std::span<const std::uint8_t> tokens);

/// A read-only memory-mapped token file.
class TokenFile {
 public:
  /// Maps `path`, validates its header and finds the largest id; an id at or
  /// above the header's vocabulary is an error naming the file and position.
  static Expected<TokenFile> open(const std::string& path);
  TokenFile(TokenFile&& o) noexcept;
  TokenFile& operator=(TokenFile&& o) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return header_.count; }
  std::uint32_t width() const { return header_.width; }
  /// The vocabulary the header records (0: version 1, not recorded).
  std::uint32_t vocab() const { return header_.vocab; }
  /// The largest id in the file (0 for an empty file).
  std::uint32_t max_token() const { return max_token_; }
  std::int32_t at(std::uint64_t i) const;
  /// Copies tokens [begin, begin + n) into out as int32.
  void read(std::uint64_t begin, std::size_t n, std::int32_t* out) const;

 private:
  TokenFile() = default;
  std::string path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  TokenHeader header_;
  std::uint32_t max_token_ = 0;
};

/// Checks that every id of `file` is below the model's vocabulary `vocab`;
/// the error names the file, the largest id and `key` (e.g. "data.train").
Status check_vocabulary(const TokenFile& file, int vocab, const char* key);

}  // namespace troupe
