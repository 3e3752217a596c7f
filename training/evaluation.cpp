// evaluate_windows: batches of B windows; a final partial batch repeats its
// last window in the unused rows and counts only the real ones.
#include "training/evaluation.hpp"

#include <algorithm>
#include <vector>

namespace troupe {

std::int64_t windows_available(const TokenFile& file, int ctx) {
  return file.size() < 2 ? 0 : static_cast<std::int64_t>((file.size() - 1) / static_cast<std::uint64_t>(ctx));
}

int fill_window_batch(const TokenFile& file, int ctx, std::int64_t first, std::int64_t windows, Tensor& tokens,
                      Tensor& targets) {
  const int B = static_cast<int>(tokens.shape()[0]);
  const int real = static_cast<int>(std::min<std::int64_t>(B, windows - first));
  std::vector<std::int32_t> window(static_cast<std::size_t>(ctx) + 1);
  for (int r = 0; r < B; ++r) {
    const std::int64_t w = first + std::min(r, real - 1);
    file.read(static_cast<std::uint64_t>(w) * ctx, window.size(), window.data());
    std::copy(window.begin(), window.end() - 1, tokens.data<std::int32_t>() + r * ctx);
    std::copy(window.begin() + 1, window.end(), targets.data<std::int32_t>() + r * ctx);
  }
  return real;
}

Expected<EvalResult> evaluate_windows(GptStage& stage, const TokenFile& file, std::int64_t windows, const ExecContext& ctx) {
  const int ctx_len = stage.config().ctx, B = stage.batch(), T = stage.seq();
  if (T != ctx_len) return make_error("evaluation needs sequence length = model.ctx");
  const std::int64_t available = windows_available(file, ctx_len);
  if (windows < 0) windows = available;
  if (windows == 0 || windows > available)
    return make_error(file.path(), ": holds ", std::to_string(available), " windows of ", std::to_string(ctx_len + 1),
                      " tokens, ", std::to_string(windows), " requested");
  // Windows are read into pinned host memory, then copied to the device.
  auto tokens = Tensor::empty(ctx.device, {B, T}, DType::i32);
  auto targets = Tensor::empty(ctx.device, {B, T}, DType::i32);
  auto host_tokens = Tensor::pinned_host(ctx.device, {B, T}, DType::i32);
  auto host_targets = Tensor::pinned_host(ctx.device, {B, T}, DType::i32);
  if (!tokens) return tokens.error();
  if (!targets) return targets.error();
  if (!host_tokens) return host_tokens.error();
  if (!host_targets) return host_targets.error();
  double total = 0;
  for (std::int64_t w0 = 0; w0 < windows; w0 += B) {
    ctx.stream.synchronize();  // the previous batch's copies have read the host buffers
    const int real = fill_window_batch(file, ctx_len, w0, windows, *host_tokens, *host_targets);
    TROUPE_TRY(ctx.copy(*tokens, *host_tokens));
    TROUPE_TRY(ctx.copy(*targets, *host_targets));
    stage.forward(0, *tokens, &*targets, 0.0f, ctx);
    total += ctx.kernels.sum(stage.token_losses(0).view(0, {static_cast<std::int64_t>(real) * T}));
  }
  return EvalResult{total / (static_cast<double>(windows) * T), windows, windows * T};
}

}  // namespace troupe
