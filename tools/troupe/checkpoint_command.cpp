// troupe checkpoint inspect DIR | export DIR --output FILE.
#include <cstdio>
#include <memory>

#include "tools/troupe/commands.hpp"
#include "training/checkpoint_export.hpp"
#include "training/checkpoint_store.hpp"

namespace troupe::cli {
namespace {

// The manifest in a few lines, then every file against its checksum.
int inspect(const std::string& dir) {
  auto m = read_manifest(dir);
  if (!m) return fail("checkpoint inspect", m.error());
  std::printf("checkpoint %s\n  step %d (a resumed run continues with step %d), format %d, written by Troupe %s\n",
              dir.c_str(), m->step, m->step, m->format, m->troupe_version.c_str());
  std::printf("  model: %d layers, dim %d, %d heads, ctx %d, vocab %d%s%s\n", m->model.layers, m->model.dim,
              m->model.heads, m->model.ctx, m->model.vocab, m->model.parallel_block ? ", parallel block" : "",
              m->model.window > 0 ? (", window " + std::to_string(m->model.window)).c_str() : "");
  std::string layers;
  for (int l : m->layout.layers) layers += (layers.empty() ? "" : ",") + std::to_string(l);
  std::printf("  saved by: dp %d x pp %d x tp %d, %d chunk(s), layers per virtual stage [%s]; config hash %s\n",
              m->layout.dp, m->layout.pp, m->layout.tp, m->layout.chunks, layers.c_str(), m->config_hash.c_str());
  std::size_t pieces = 0;
  for (auto& [name, t] : m->tensors) pieces += t.pieces.size();
  std::printf("  %zu tensors in %zu pieces, %zu files:\n", m->tensors.size(), pieces, m->files.size());
  std::uint64_t total = 0;
  for (auto& f : m->files) {
    std::printf("    %-28s %12llu bytes  crc32 %08x\n", f.name.c_str(), static_cast<unsigned long long>(f.size), f.crc);
    total += f.size;
  }
  if (auto st = verify_checkpoint(dir, *m); !st) return fail("checkpoint inspect", st.error());
  std::printf("  every file verified: %llu bytes\n", static_cast<unsigned long long>(total));
  return 0;
}

}  // namespace

void register_checkpoint(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("checkpoint", "Inspect or export a checkpoint directory");
  cmd->require_subcommand(1);
  auto dir = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  auto* inspect_cmd = cmd->add_subcommand("inspect", "Print the manifest and verify every file's checksum");
  inspect_cmd->add_option("dir", *dir, "Checkpoint directory")->required();
  inspect_cmd->callback([dir, &action] { action = [dir] { return inspect(*dir); }; });
  auto* export_cmd = cmd->add_subcommand("export", "Write the parameters as one Hugging Face GPT-2 safetensors file");
  export_cmd->add_option("dir", *dir, "Checkpoint directory")->required();
  export_cmd->add_option("--output", *output, "The safetensors file to write")->required();
  export_cmd->callback([dir, output, &action] {
    action = [dir, output] {
      auto r = export_weights(*dir, *output);
      if (!r) return fail("checkpoint export", r.error());
      std::printf("exported %d tensors (%llu bytes) to %s\n", r->tensors, static_cast<unsigned long long>(r->bytes),
                  output->c_str());
      return 0;
    };
  });
}

}  // namespace troupe::cli
