// troupe prepare: a text file -> byte-level train.bin and val.bin (last 10% is validation).
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "runtime/data/token_file.hpp"
#include "tools/troupe/commands.hpp"

namespace troupe::cli {
namespace {

struct PrepareArgs {
  std::string input, output;
  double val_fraction = 0.1;
};

int run_prepare(const PrepareArgs& a) {
  std::ifstream in(a.input, std::ios::binary);
  if (!in) return fail("prepare", make_error("--input ", a.input, ": cannot open"));
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 2) return fail("prepare", make_error("--input ", a.input, ": needs at least 2 bytes of text"));
  std::error_code ec;
  std::filesystem::create_directories(a.output, ec);
  if (ec) return fail("prepare", make_error("--output ", a.output, ": ", ec.message()));
  const auto val_bytes = static_cast<std::size_t>(static_cast<double>(bytes.size()) * a.val_fraction);
  const std::size_t split = bytes.size() - val_bytes;
  const std::span<const std::uint8_t> all(bytes);
  const auto train_path = (std::filesystem::path(a.output) / "train.bin").string();
  const auto val_path = (std::filesystem::path(a.output) / "val.bin").string();
  if (auto st = write_token_file(train_path, all.subspan(0, split)); !st) return fail("prepare", st.error());
  if (auto st = write_token_file(val_path, all.subspan(split)); !st) return fail("prepare", st.error());
  std::printf("{\"train\": \"%s\", \"train_tokens\": %zu, \"val\": \"%s\", \"val_tokens\": %zu}\n", train_path.c_str(),
              split, val_path.c_str(), bytes.size() - split);
  return 0;
}

}  // namespace

void register_prepare(CLI::App& app, Action& action) {
  auto args = std::make_shared<PrepareArgs>();
  auto* cmd = app.add_subcommand("prepare", "Write byte-level token files DIR/train.bin and DIR/val.bin");
  cmd->add_option("--input", args->input, "Text file (any bytes)")->required();
  cmd->add_option("--output", args->output, "Output directory")->required();
  cmd->add_option("--val-fraction", args->val_fraction, "Fraction at the end kept for validation")
      ->check(CLI::Range(0.0, 0.9));
  cmd->callback([args, &action] { action = [args] { return run_prepare(*args); }; });
}

}  // namespace troupe::cli
