// Reading and writing safetensors files (Hugging Face's format: an 8-byte
// little-endian header length, a JSON header, then raw little-endian data).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "backends/dtype.hpp"
#include "backends/tensor.hpp"
#include "common/expected.hpp"

namespace troupe {

struct SafetensorEntry {
  DType dtype;
  Shape shape;
  std::size_t begin = 0, end = 0;  ///< byte range within the data section
};

/// A safetensors file read into memory.
class SafetensorsFile {
 public:
  /// Reads and validates `path`; errors name the file and what is wrong.
  static Expected<SafetensorsFile> read(const std::string& path);
  /// Validates the bytes of a whole file (`path` names it in errors): the
  /// header length, the JSON types of every field, shapes whose element count
  /// and byte size do not overflow, and data offsets inside the file. Never
  /// throws; a hostile file is an Error naming the file and tensor.
  static Expected<SafetensorsFile> parse(std::vector<char> bytes, const std::string& path);
  /// Reads and validates only the header of `path` (against the file's size):
  /// names, dtypes and shapes without reading the data; data() is unusable.
  static Expected<SafetensorsFile> read_header(const std::string& path);

  const std::string& path() const { return path_; }
  /// Tensor names in file order of their data.
  std::vector<std::string> names() const;
  const SafetensorEntry* find(const std::string& name) const;
  const void* data(const SafetensorEntry& e) const { return bytes_.data() + data_start_ + e.begin; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  /// Validates the header in bytes_[8, 8 + header length) for a file of `file_size` bytes.
  static Expected<SafetensorsFile> parse_header(SafetensorsFile f, std::uint64_t file_size);
  std::string path_;
  std::vector<char> bytes_;
  std::size_t data_start_ = 0;
  std::map<std::string, SafetensorEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// A named host tensor to write.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

/// Writes `tensors` to `path` atomically: a temporary file in the same
/// directory, flushed, then renamed over `path`; on error nothing is left behind.
Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace troupe
