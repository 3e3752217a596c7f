// load_weights / save_weights.
#include "ops/model/weights.hpp"

#include <cstring>
#include <set>

#include "ops/model/safetensors.hpp"

namespace troupe {

Status load_weights(GptStage& stage, const std::string& path, std::vector<std::string>& unused) {
  auto file = SafetensorsFile::read(path);
  if (!file) return file.error();
  std::set<std::string> used;
  for (auto& p : stage.params()) {
    const SafetensorEntry* e = file->find(p.spec.name);
    if (!e) return make_error(path, ": missing tensor ", p.spec.name, " (shape ", shape_string(p.spec.shape), ")");
    if (e->shape != p.spec.shape)
      return make_error(path, ": tensor ", p.spec.name, " has shape ", shape_string(e->shape), ", the model needs ",
                        shape_string(p.spec.shape));
    float* dst = p.value.f32();
    if (e->dtype == DType::f32) {
      std::memcpy(dst, file->data(*e), p.value.nbytes());
    } else if (e->dtype == DType::bf16) {
      auto* src = static_cast<const BFloat16*>(file->data(*e));
      for (std::int64_t i = 0; i < p.value.numel(); ++i) dst[i] = from_bf16(src[i]);
    } else {
      return make_error(path, ": tensor ", p.spec.name, " has dtype ", std::string(dtype_name(e->dtype)),
                        ", expected F32 or BF16");
    }
    used.insert(p.spec.name);
  }
  for (auto& name : file->names())
    if (!used.count(name)) unused.push_back(name);
  return Status::success();
}

Status save_weights(const GptStage& stage, const std::string& path) {
  std::vector<NamedTensor> tensors;
  for (auto& p : stage.params()) tensors.push_back({p.spec.name, p.value});
  const auto& c = stage.config();
  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {"troupe.layers", std::to_string(c.layers)},
                                          {"troupe.heads", std::to_string(c.heads)},
                                          {"troupe.dim", std::to_string(c.dim)},
                                          {"troupe.ctx", std::to_string(c.ctx)}};
  return write_safetensors(path, tensors, meta);
}

}  // namespace troupe
