// The manifest to and from JSON; parsing never throws (hostile input).
#include "training/checkpoint_manifest.hpp"

#include <zlib.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace troupe {
namespace {

using nlohmann::json;

// Typed reads of a JSON object's fields: an error names the field.
struct Fields {
  const json& j;
  std::string where;

  Expected<const json*> field(const char* key, json::value_t type) const {
    auto it = j.find(key);
    if (it == j.end()) return make_error(where, ": missing ", key);
    const bool number = type == json::value_t::number_unsigned;
    if (number ? !it->is_number_unsigned() : it->type() != type)
      return make_error(where, ": ", key, " has the wrong type");
    return &*it;
  }
  Expected<std::uint64_t> count(const char* key, std::uint64_t max) const {
    auto f = field(key, json::value_t::number_unsigned);
    if (!f) return f.error();
    const auto v = (*f)->get<std::uint64_t>();
    if (v > max) return make_error(where, ": ", key, " is out of range");
    return v;
  }
  Expected<int> small(const char* key) const {
    auto v = count(key, 1u << 24);
    if (!v) return v.error();
    return static_cast<int>(*v);
  }
  Expected<std::string> text(const char* key) const {
    auto f = field(key, json::value_t::string);
    if (!f) return f.error();
    return (*f)->get<std::string>();
  }
  Expected<const json*> array(const char* key) const { return field(key, json::value_t::array); }
  Expected<const json*> object(const char* key) const { return field(key, json::value_t::object); }
};

constexpr std::uint64_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint64_t kMaxI64 = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

// A file name inside the checkpoint directory: no separators, no dot files.
bool plain_name(const std::string& n) {
  return !n.empty() && n.size() < 256 && n[0] != '.' && n.find('/') == std::string::npos &&
         n.find('\0') == std::string::npos;
}

Expected<CheckpointPiece> parse_piece(const json& p, const std::string& where) {
  if (!p.is_object()) return make_error(where, ": a piece is not an object");
  Fields f{p, where};
  CheckpointPiece out;
  auto file = f.text("file");
  auto offset = f.count("offset", kMaxI64);
  auto begin = f.count("begin", kMaxI64);
  auto end = f.count("end", kMaxI64);
  auto crc = f.count("crc32", kMaxU32);
  for (const Error* e : {file ? nullptr : &file.error(), offset ? nullptr : &offset.error(),
                         begin ? nullptr : &begin.error(), end ? nullptr : &end.error(), crc ? nullptr : &crc.error()})
    if (e) return *e;
  out.file = *file;
  out.offset = *offset;
  out.begin = static_cast<std::int64_t>(*begin);
  out.end = static_cast<std::int64_t>(*end);
  out.crc = static_cast<std::uint32_t>(*crc);
  if (out.end <= out.begin) return make_error(where, ": a piece has an empty or reversed range");
  if (p.contains("member")) {
    auto member = f.small("member");
    if (!member) return member.error();
    out.member = *member;
  }
  return out;
}

Expected<CheckpointTensor> parse_tensor(const json& t, const std::string& where, ManifestKind kind) {
  if (!t.is_object()) return make_error(where, ": not an object");
  Fields f{t, where};
  auto shape = f.array("shape");
  if (!shape) return shape.error();
  CheckpointTensor out;
  std::int64_t numel = 1;
  for (auto& d : **shape) {
    if (!d.is_number_unsigned() || d.get<std::uint64_t>() > (1ull << 40)) return make_error(where, ": bad shape");
    const auto n = static_cast<std::int64_t>(d.get<std::uint64_t>());
    if (n != 0 && numel > std::numeric_limits<std::int64_t>::max() / 4 / n)
      return make_error(where, ": shape overflows");
    numel *= n;
    out.shape.push_back(n);
  }
  auto pieces = f.array("pieces");
  if (!pieces) return pieces.error();
  for (auto& p : **pieces) {
    auto piece = parse_piece(p, where);
    if (!piece) return piece.error();
    out.pieces.push_back(std::move(*piece));
  }
  if (t.contains("tp")) {  // cut over tensor-parallel members
    auto tp = f.small("tp");
    auto split = f.array("split");
    if (!tp) return tp.error();
    if (!split) return split.error();
    const json& sj = **split;
    if (*tp < 1 || *tp > (1 << 10) || sj.size() != 2 || !sj[0].is_number_unsigned() || !sj[1].is_number_unsigned() ||
        sj[0].get<std::uint64_t>() >= out.shape.size() || sj[1].get<std::uint64_t>() < 1 ||
        sj[1].get<std::uint64_t>() > 64)
      return make_error(where, ": bad tp or split");
    out.tp = *tp;
    out.split = TpSplit{sj[0].get<int>(), sj[1].get<int>()};
    if (!divisible(out.shape, out.split, out.tp)) return make_error(where, ": split does not divide the shape over tp");
  }
  for (auto& p : out.pieces)
    if (p.member >= out.tp) return make_error(where, ": a piece names member ", std::to_string(p.member), " of ", std::to_string(out.tp));
  if (kind == ManifestKind::part) return out;
  // M-1: sorted, disjoint, tiling each member's piece.
  std::size_t i = 0;
  for (int member = 0; member < out.tp; ++member) {
    const std::int64_t size = out.tp == 1 ? numel : shape_numel(local_shape(out.shape, out.split, TpShard{out.tp, member}));
    std::int64_t next = 0;
    for (; i < out.pieces.size() && out.pieces[i].member == member; ++i) {
      const auto& p = out.pieces[i];
      if (p.begin != next) return make_error(where, ": pieces do not tile the tensor (a gap or overlap at ", std::to_string(next), ")");
      next = p.end;
    }
    if (next != size) return make_error(where, ": pieces cover ", std::to_string(next), " of ", std::to_string(size), " elements");
  }
  if (i != out.pieces.size()) return make_error(where, ": pieces are not sorted by member");
  return out;
}

}  // namespace

std::uint32_t crc32_of(const void* bytes, std::size_t size, std::uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(bytes);
  uLong c = crc;
  while (size > 0) {  // zlib takes a uInt length
    const auto n = static_cast<uInt>(std::min<std::size_t>(size, 1u << 30));
    c = ::crc32(c, p, n);
    p += n;
    size -= n;
  }
  return static_cast<std::uint32_t>(c);
}

std::uint32_t crc32_combine_of(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t size_b) {
  return static_cast<std::uint32_t>(::crc32_combine(crc_a, crc_b, static_cast<z_off_t>(size_b)));
}

std::string manifest_json(const Manifest& m) {
  json layers = m.layout.layers;
  json j = {{"format", m.format},
            {"troupe_version", m.troupe_version},
            {"step", m.step},
            {"config_hash", m.config_hash},
            {"model",
             {{"layers", m.model.layers},
              {"heads", m.model.heads},
              {"dim", m.model.dim},
              {"ctx", m.model.ctx},
              {"vocab", m.model.vocab},
              {"parallel_block", m.model.parallel_block},
              {"window", m.model.window}}},
            {"layout", {{"dp", m.layout.dp}, {"pp", m.layout.pp}, {"chunks", m.layout.chunks}, {"layers", layers}}}};
  if (m.layout.tp > 1) j["layout"]["tp"] = m.layout.tp;
  json tensors = json::object();
  for (auto& [name, t] : m.tensors) {
    json pieces = json::array();
    for (auto& p : t.pieces) {
      pieces.push_back({{"file", p.file}, {"offset", p.offset}, {"begin", p.begin}, {"end", p.end}, {"crc32", p.crc}});
      if (t.tp > 1) pieces.back()["member"] = p.member;
    }
    tensors[name] = {{"shape", t.shape}, {"pieces", pieces}};
    if (t.tp > 1) {
      tensors[name]["tp"] = t.tp;
      tensors[name]["split"] = {t.split.dim, t.split.sections};
    }
  }
  j["tensors"] = tensors;
  json files = json::array();
  for (auto& f : m.files) files.push_back({{"name", f.name}, {"size", f.size}, {"crc32", f.crc}});
  j["files"] = files;
  return j.dump(1) + "\n";
}

Expected<Manifest> parse_manifest(const std::string& text, const std::string& path, ManifestKind kind) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return make_error(path, ": not a JSON object");
  Fields f{j, path};
  Manifest m;
  auto format = f.small("format");
  if (!format) return format.error();
  if (*format != kCheckpointFormat)
    return make_error(path, ": checkpoint format ", std::to_string(*format), ", this Troupe reads format ",
                      std::to_string(kCheckpointFormat));
  auto version = f.text("troupe_version");
  auto step = f.small("step");
  auto hash = f.text("config_hash");
  if (!version) return version.error();
  if (!step) return step.error();
  if (!hash) return hash.error();
  m.troupe_version = *version;
  m.step = *step;
  m.config_hash = *hash;
  auto model = f.object("model");
  if (!model) return model.error();
  Fields mf{**model, path + ": model"};
  for (auto [key, out] : {std::pair{"layers", &m.model.layers}, {"heads", &m.model.heads}, {"dim", &m.model.dim},
                          {"ctx", &m.model.ctx}, {"vocab", &m.model.vocab}, {"window", &m.model.window}}) {
    auto v = mf.small(key);
    if (!v) return v.error();
    *out = *v;
  }
  auto pb = mf.field("parallel_block", json::value_t::boolean);
  if (!pb) return pb.error();
  m.model.parallel_block = (*pb)->get<bool>();
  auto layout = f.object("layout");
  if (!layout) return layout.error();
  Fields lf{**layout, path + ": layout"};
  for (auto [key, out] : {std::pair{"dp", &m.layout.dp}, {"pp", &m.layout.pp}, {"chunks", &m.layout.chunks}}) {
    auto v = lf.small(key);
    if (!v) return v.error();
    *out = *v;
  }
  if ((*layout)->contains("tp")) {
    auto tp = lf.small("tp");
    if (!tp) return tp.error();
    if (*tp < 1) return make_error(path, ": layout: tp must be >= 1");
    m.layout.tp = *tp;
  }
  auto layers = lf.array("layers");
  if (!layers) return layers.error();
  for (auto& l : **layers) {
    if (!l.is_number_unsigned() || l.get<std::uint64_t>() > 4096) return make_error(path, ": layout: bad layers");
    m.layout.layers.push_back(l.get<int>());
  }
  auto files = f.array("files");
  if (!files) return files.error();
  std::map<std::string, std::uint64_t> sizes;
  for (auto& fj : **files) {
    if (!fj.is_object()) return make_error(path, ": files: an entry is not an object");
    Fields ff{fj, path + ": files"};
    auto name = ff.text("name");
    auto size = ff.count("size", kMaxI64);
    auto crc = ff.count("crc32", kMaxU32);
    if (!name) return name.error();
    if (!size) return size.error();
    if (!crc) return crc.error();
    if (!plain_name(*name) || sizes.count(*name)) return make_error(path, ": files: bad or repeated name");
    sizes[*name] = *size;
    m.files.push_back({*name, *size, static_cast<std::uint32_t>(*crc)});
  }
  auto tensors = f.object("tensors");
  if (!tensors) return tensors.error();
  for (auto& [name, tj] : (*tensors)->items()) {
    auto t = parse_tensor(tj, path + ": tensor " + name, kind);
    if (!t) return t.error();
    for (auto& p : t->pieces) {  // M-2
      auto it = sizes.find(p.file);
      const auto bytes = static_cast<std::uint64_t>(p.end - p.begin) * sizeof(float);
      if (it == sizes.end() || p.offset > it->second || bytes > it->second - p.offset)
        return make_error(path, ": tensor ", name, ": a piece lies outside its file ", p.file);
    }
    m.tensors.emplace(name, std::move(*t));
  }
  return m;
}

Expected<Manifest> read_manifest_file(const std::string& path, ManifestKind kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path, ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return make_error(path, ": read failed");
  return parse_manifest(text.str(), path, kind);
}

Expected<Manifest> read_manifest(const std::string& dir) {
  return read_manifest_file(dir + "/" + kManifestName, ManifestKind::complete);
}

}  // namespace troupe
