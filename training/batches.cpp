// fill_batch / open_data.
#include "training/batches.hpp"

#include <vector>

#include "runtime/data/batch_sampler.hpp"

namespace troupe {

void fill_batch(const TokenFile& file, std::uint64_t seed, int step, int mb, Tensor& tokens, Tensor& targets,
                int replica, int replicas) {
  fill_batch_rows(file, seed, step, mb, static_cast<int>(tokens.dim(0)), static_cast<int>(tokens.dim(1)),
                  tokens.data<std::int32_t>(), targets.data<std::int32_t>(), replica, replicas);
}

void fill_batch_rows(const TokenFile& file, std::uint64_t seed, int step, int mb, int B, int T, std::int32_t* tokens,
                     std::int32_t* targets, int replica, int replicas) {
  std::vector<std::int32_t> window(static_cast<std::size_t>(T) + 1);
  for (int r = 0; r < B; ++r) {
    const auto row = static_cast<std::uint64_t>(mb * replicas + replica) * static_cast<std::uint64_t>(B) +
                     static_cast<std::uint64_t>(r);
    const auto off = sample_offset(seed, static_cast<std::uint64_t>(step), row, file.size(), static_cast<std::uint64_t>(T));
    file.read(off, window.size(), window.data());
    std::copy(window.begin(), window.end() - 1, tokens + r * T);
    std::copy(window.begin() + 1, window.end(), targets + r * T);
  }
}

Expected<TokenFile> open_data(const std::string& path, const char* key, int ctx, int vocab) {
  auto f = TokenFile::open(path);
  if (!f) return make_error(key, ": ", f.error().message);
  if (f->size() < static_cast<std::uint64_t>(ctx) + 2)
    return make_error(key, ": ", path, " holds ", std::to_string(f->size()), " tokens, fewer than model.ctx + 2");
  TROUPE_TRY(check_vocabulary(*f, vocab, key));
  return f;
}

}  // namespace troupe
