// safetensors parsing (nlohmann-json) and atomic writing.
#include "ops/model/safetensors.hpp"

#include "common/atomic_file.hpp"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace troupe {
namespace {

Expected<DType> parse_dtype(const std::string& s) {
  for (DType t : {DType::f32, DType::bf16, DType::i32, DType::u16, DType::u8})
    if (dtype_name(t) == s) return t;
  return make_error("unsupported dtype ", s);
}

Error file_error(const std::string& path, const std::string& what) { return make_error(path, ": ", what); }

}  // namespace

Expected<SafetensorsFile> SafetensorsFile::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return file_error(path, "cannot open (" + std::string(std::strerror(errno)) + ")");
  SafetensorsFile f;
  f.path_ = path;
  f.bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (f.bytes_.size() < 8) return file_error(path, "not a safetensors file (shorter than its 8-byte header)");
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(f.bytes_[static_cast<std::size_t>(i)]);
  if (header_len > f.bytes_.size() - 8) return file_error(path, "header length exceeds the file size");
  f.data_start_ = 8 + header_len;
  const std::size_t data_bytes = f.bytes_.size() - f.data_start_;
  auto header = nlohmann::json::parse(f.bytes_.begin() + 8, f.bytes_.begin() + static_cast<long>(f.data_start_),
                                      nullptr, false);
  if (header.is_discarded() || !header.is_object()) return file_error(path, "header is not a JSON object");
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (v.is_object())
        for (auto& [k, mv] : v.items())
          if (mv.is_string()) f.metadata_[k] = mv.get<std::string>();
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      return file_error(path, "tensor " + name + " lacks dtype, shape or data_offsets");
    auto dtype = parse_dtype(v["dtype"].get<std::string>());
    if (!dtype) return file_error(path, "tensor " + name + ": " + dtype.error().message);
    SafetensorEntry e{*dtype, v["shape"].get<Shape>(), v["data_offsets"][0].get<std::size_t>(),
                      v["data_offsets"][1].get<std::size_t>()};
    if (e.end < e.begin || e.end > data_bytes ||
        e.end - e.begin != static_cast<std::size_t>(shape_numel(e.shape)) * dtype_size(e.dtype))
      return file_error(path, "tensor " + name + " has data_offsets that do not match its shape or the file");
    f.entries_[name] = e;
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
