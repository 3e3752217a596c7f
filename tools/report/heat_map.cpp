// HeatMap.
#include "tools/report/heat_map.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::report {

HeatMap::HeatMap(int first_step, int last_step, int actors, HeatMapLimits limits)
    : first_(first_step),
      last_(last_step),
      actors_(std::max(0, actors)),
      rows_(std::min(std::max(1, limits.rows), std::max(1, actors))),
      columns_(std::min(std::max(1, limits.columns), std::max(1, last_step - first_step + 1))),
      cells_(static_cast<std::size_t>(rows_) * static_cast<std::size_t>(columns_), -1.0f) {}

void HeatMap::add(int step, const std::vector<double>& compute_ms) {
  if (empty() || step < first_ || step > last_) return;
  const long span = last_ - first_ + 1;
  const auto col = static_cast<std::size_t>((static_cast<long>(step - first_) * columns_) / span);
  const std::size_t n = std::min(compute_ms.size(), static_cast<std::size_t>(actors_));
  for (std::size_t a = 0; a < n; ++a) {
    const double v = compute_ms[a];
    if (!std::isfinite(v) || v < 0) continue;
    const std::size_t row = a * static_cast<std::size_t>(rows_) / static_cast<std::size_t>(actors_);
    float& cell = cells_[row * static_cast<std::size_t>(columns_) + col];
    cell = std::max(cell, static_cast<float>(v));
  }
}

nlohmann::json HeatMap::to_json() const {
  if (empty()) return nullptr;
  std::vector<float> seen;
  for (float c : cells_)
    if (c >= 0) seen.push_back(c);
  std::sort(seen.begin(), seen.end());
  const auto at = [&](double q) {
    return seen.empty() ? 0.0 : static_cast<double>(seen[static_cast<std::size_t>(q * static_cast<double>(seen.size() - 1))]);
  };
  const double low = at(0.01), high = std::max(at(0.99), low + 1e-9);
  std::vector<std::uint8_t> bytes(cells_.size(), 0);
  for (std::size_t i = 0; i < cells_.size(); ++i)
    if (cells_[i] >= 0)
      bytes[i] = static_cast<std::uint8_t>(1 + std::lround(254 * std::clamp((cells_[i] - low) / (high - low), 0.0, 1.0)));
  const double span = last_ - first_ + 1;
  return {{"actors", actors_},
          {"rows", rows_},
          {"columns", columns_},
          {"steps_per_column", span / columns_},
          {"actors_per_row", static_cast<double>(actors_) / rows_},
          {"first_step", first_},
          {"last_step", last_},
          {"low_ms", low},
          {"high_ms", high},
          {"cells", base64(bytes)}};
}

std::string base64(const std::vector<std::uint8_t>& bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::uint32_t b0 = bytes[i], b1 = i + 1 < bytes.size() ? bytes[i + 1] : 0,
                        b2 = i + 2 < bytes.size() ? bytes[i + 2] : 0;
    const std::uint32_t v = (b0 << 16) | (b1 << 8) | b2;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

}  // namespace troupe::report
