// export_weights.
#include "training/checkpoint_export.hpp"

#include <nlohmann/json.hpp>

#include "common/atomic_file.hpp"
#include "training/checkpoint_shard.hpp"

namespace troupe {

Expected<ExportFigures> export_weights(const std::string& dir, const std::string& output) {
  auto m = read_manifest(dir);
  if (!m) return m.error();
  const auto specs = stage_param_specs(m->model, whole_model(m->model));
  // The header first: Hugging Face names in the model's order, F32.
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"},
                            {"troupe.layers", std::to_string(m->model.layers)},
                            {"troupe.heads", std::to_string(m->model.heads)},
                            {"troupe.dim", std::to_string(m->model.dim)},
                            {"troupe.ctx", std::to_string(m->model.ctx)},
                            {"troupe.step", std::to_string(m->step)}};
  std::uint64_t offset = 0;
  std::int64_t largest = 0;
  for (auto& p : specs) {
    const std::int64_t n = shape_numel(p.shape);
    header[p.name] = {{"dtype", "F32"}, {"shape", p.shape}, {"data_offsets", {offset, offset + n * sizeof(float)}}};
    offset += static_cast<std::uint64_t>(n) * sizeof(float);
    largest = std::max(largest, n);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  CheckpointReader reader(dir, *m);
  std::vector<float> buffer(static_cast<std::size_t>(largest));  // one tensor at a time
  Status read_status;
  const Status written = write_file_atomically(output, [&](std::ostream& out) {
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    out.write(len, 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (auto& p : specs) {
      const std::int64_t n = shape_numel(p.shape);
      read_status = reader.read(p.name, p.shape, 0, n, buffer.data());
      if (!read_status) return out.setstate(std::ios::badbit);  // the temporary is removed
      out.write(reinterpret_cast<const char*>(buffer.data()), static_cast<std::streamsize>(n * sizeof(float)));
    }
  });
  if (!read_status) return read_status.error();  // the cause, rather than the write it stopped
  if (!written) return written.error();
  return ExportFigures{static_cast<int>(specs.size()), 8 + text.size() + offset};
}

}  // namespace troupe
