// load_weights / save_weights.
#include "ops/model/weights.hpp"

#include <cstring>
#include <set>

#include "ops/model/safetensors.hpp"

namespace troupe {

namespace {

// The entry of `spec` in `file`, present with its (whole) shape and F32 or BF16.
Expected<const SafetensorEntry*> entry_for(const SafetensorsFile& file, const ParamSpec& spec) {
  const std::string& path = file.path();
  const SafetensorEntry* e = file.find(spec.name);
  const Shape& whole = spec.full.empty() ? spec.shape : spec.full;
  if (!e) return make_error(path, ": missing tensor ", spec.name, " (shape ", shape_string(whole), ")");
  if (e->shape != whole)
    return make_error(path, ": tensor ", spec.name, " has shape ", shape_string(e->shape), ", the model needs ",
                      shape_string(whole));
  if (e->dtype != DType::f32 && e->dtype != DType::bf16)
    return make_error(path, ": tensor ", spec.name, " has dtype ", std::string(dtype_name(e->dtype)),
                      ", expected F32 or BF16");
  return e;
}

}  // namespace

Status check_weights(const GptConfig& cfg, const std::string& path) {
  auto file = SafetensorsFile::read_header(path);
  if (!file) return file.error();
  for (auto& spec : stage_param_specs(cfg, whole_model(cfg))) TROUPE_TRY(entry_for(*file, spec));
  return Status::success();
}

Status load_weights(GptStage& stage, const std::string& path, std::vector<std::string>& unused) {
  auto file = SafetensorsFile::read(path);
  if (!file) return file.error();
  std::set<std::string> used;
  TROUPE_TRY(stage.write_params([&](const StageParam& p, Tensor& value) -> Status {
    auto entry = entry_for(*file, p.spec);
    if (!entry) return entry.error();
    const SafetensorEntry* e = *entry;
    float* dst = value.f32();
    // A tensor-parallel member takes its piece of the whole tensor, run by run.
    for_each_run(p.spec.full, p.spec.split, stage.tp_shard(), 0, value.numel(),
                 [&](std::int64_t whole, std::int64_t local, std::int64_t count) {
                   if (e->dtype == DType::f32) {
                     std::memcpy(dst + local, static_cast<const float*>(file->data(*e)) + whole,
                                 static_cast<std::size_t>(count) * sizeof(float));
                     return;
                   }
                   auto* src = static_cast<const BFloat16*>(file->data(*e)) + whole;
                   for (std::int64_t i = 0; i < count; ++i) dst[local + i] = from_bf16(src[i]);
                 });
    used.insert(p.spec.name);
    return Status::success();
  }));
  for (auto& name : file->names())
    if (!used.count(name)) unused.push_back(name);
  return Status::success();
}

Status save_weights(const GptStage& stage, const std::string& path) {
  if (!stage.tp_shard().whole())
    return make_error(path, ": a tensor-parallel member holds pieces of the tensors; save the whole model from a "
                            "checkpoint (troupe checkpoint export)");
  std::vector<NamedTensor> tensors;
  auto host = stage.params_on_host();
  if (!host) return host.error();
  for (auto& p : stage.params()) tensors.push_back({p.spec.name, host->view(p.offset, p.spec.shape)});
  const auto& c = stage.config();
  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {"troupe.layers", std::to_string(c.layers)},
                                          {"troupe.heads", std::to_string(c.heads)},
                                          {"troupe.dim", std::to_string(c.dim)},
                                          {"troupe.ctx", std::to_string(c.ctx)}};
  return write_safetensors(path, tensors, meta);
}

}  // namespace troupe
