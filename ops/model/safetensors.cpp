// safetensors parsing (nlohmann-json) and atomic writing.
#include "ops/model/safetensors.hpp"

#include "common/atomic_file.hpp"
#include "common/printable.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace troupe {
namespace {

Expected<DType> parse_dtype(const std::string& s) {
  for (DType t : {DType::f32, DType::bf16, DType::i32, DType::u16, DType::u8})
    if (dtype_name(t) == s) return t;
  return make_error("unsupported dtype ", printable(s));
}

Error file_error(const std::string& path, const std::string& what) { return make_error(path, ": ", what); }

// Hugging Face's reader refuses headers over 100 MB; so do we.
constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;

Expected<std::uint64_t> unsigned_of(const nlohmann::json& v) {
  if (!v.is_number_unsigned()) return make_error("not a non-negative integer");
  return v.get<std::uint64_t>();
}

// One tensor's entry; `data_bytes` is the size of the data section.
Expected<SafetensorEntry> parse_entry(const nlohmann::json& v, std::size_t data_bytes) {
  if (!v.is_object()) return make_error("is not a JSON object");
  auto dt = v.find("dtype");
  auto sh = v.find("shape");
  auto off = v.find("data_offsets");
  if (dt == v.end() || sh == v.end() || off == v.end()) return make_error("lacks dtype, shape or data_offsets");
  if (!dt->is_string()) return make_error("dtype is not a string");
  auto dtype = parse_dtype(dt->get<std::string>());
  if (!dtype) return dtype.error();
  if (!sh->is_array()) return make_error("shape is not an array");
  SafetensorEntry e{*dtype, {}, 0, 0};
  std::uint64_t bytes = dtype_size(*dtype);
  for (auto& d : *sh) {
    auto n = unsigned_of(d);
    if (!n || *n > static_cast<std::uint64_t>(INT64_MAX)) return make_error("shape has an entry that is not a size");
    if (__builtin_mul_overflow(bytes, *n, &bytes)) return make_error("shape's byte size overflows");
    e.shape.push_back(static_cast<std::int64_t>(*n));
  }
  if (!off->is_array() || off->size() != 2) return make_error("data_offsets is not a pair");
  auto begin = unsigned_of((*off)[0]);
  auto end = unsigned_of((*off)[1]);
  if (!begin || !end) return make_error("data_offsets are not sizes");
  if (*end < *begin || *end > data_bytes) return make_error("data_offsets point outside the file");
  if (*end - *begin != bytes) return make_error("data_offsets do not match its shape and dtype");
  e.begin = static_cast<std::size_t>(*begin);
  e.end = static_cast<std::size_t>(*end);
  return e;
}

}  // namespace

Expected<SafetensorsFile> SafetensorsFile::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return file_error(path, "cannot open (" + std::string(std::strerror(errno)) + ")");
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) return file_error(path, "read failed");
  return parse(std::move(bytes), path);
}

Expected<SafetensorsFile> SafetensorsFile::parse(std::vector<char> bytes, const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.bytes_ = std::move(bytes);
  const std::uint64_t size = f.bytes_.size();
  return parse_header(std::move(f), size);
}

Expected<SafetensorsFile> SafetensorsFile::read_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return file_error(path, "cannot open (" + std::string(std::strerror(errno)) + ")");
  const auto size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  SafetensorsFile f;
  f.path_ = path;
  f.bytes_.resize(8);
  if (size < 8 || !in.read(f.bytes_.data(), 8))
    return file_error(path, "not a safetensors file (shorter than its 8-byte header)");
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(f.bytes_[static_cast<std::size_t>(i)]);
  if (header_len > size - 8) return file_error(path, "header length exceeds the file size");
  if (header_len > kMaxHeaderBytes) return file_error(path, "header is larger than 100 MB");
  f.bytes_.resize(8 + static_cast<std::size_t>(header_len));
  if (!in.read(f.bytes_.data() + 8, static_cast<std::streamsize>(header_len))) return file_error(path, "read failed");
  return parse_header(std::move(f), size);
}

Expected<SafetensorsFile> SafetensorsFile::parse_header(SafetensorsFile f, std::uint64_t file_size) {
  const std::string& path = f.path_;
  if (f.bytes_.size() < 8) return file_error(path, "not a safetensors file (shorter than its 8-byte header)");
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)
    header_len = (header_len << 8) | static_cast<unsigned char>(f.bytes_[static_cast<std::size_t>(i)]);
  if (header_len > f.bytes_.size() - 8) return file_error(path, "header length exceeds the file size");
  if (header_len > kMaxHeaderBytes) return file_error(path, "header is larger than 100 MB");
  f.data_start_ = 8 + static_cast<std::size_t>(header_len);
  const std::size_t data_bytes = static_cast<std::size_t>(file_size) - f.data_start_;
  auto header = nlohmann::json::parse(f.bytes_.begin() + 8, f.bytes_.begin() + static_cast<long>(f.data_start_),
                                      nullptr, false);
  if (header.is_discarded() || !header.is_object()) return file_error(path, "header is not a JSON object");
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) return file_error(path, "__metadata__ is not a JSON object");
      for (auto& [k, mv] : v.items())
        if (mv.is_string()) f.metadata_[k] = mv.get<std::string>();
      continue;
    }
    auto e = parse_entry(v, data_bytes);
    if (!e) return file_error(path, "tensor " + printable(name) + ": " + e.error().message);
    f.entries_[name] = *e;
  }
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::pair<std::size_t, std::string>> order;
  for (auto& [name, e] : entries_) order.emplace_back(e.begin, name);
  std::sort(order.begin(), order.end());
  std::vector<std::string> out;
  for (auto& [_, name] : order) out.push_back(name);
  return out;
}

const SafetensorEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (auto& t : tensors) {
    header[t.name] = {{"dtype", std::string(dtype_name(t.tensor.dtype()))},
                      {"shape", t.tensor.shape()},
                      {"data_offsets", {offset, offset + t.tensor.nbytes()}}};
    offset += t.tensor.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return write_file_atomically(path, [&](std::ostream& out) {
    std::uint64_t len = text.size();
    char len_bytes[8];
    for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
    out.write(len_bytes, 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (auto& t : tensors)
      out.write(static_cast<const char*>(t.tensor.raw()), static_cast<std::streamsize>(t.tensor.nbytes()));
  });
}

}  // namespace troupe
