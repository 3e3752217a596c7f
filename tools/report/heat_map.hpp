// The heat map of every stage actor's compute time per step, binned so that
// any run fits a page: at most `limits.columns` step bins and `limits.rows`
// actor bins, each cell the largest compute time that fell in it (a slow
// actor or step is never averaged away), quantized to one byte against the
// cells' 1st and 99th percentiles (0 = no data).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace troupe::report {

struct HeatMapLimits {
  int columns = 800;  ///< step bins
  int rows = 256;     ///< actor bins
};

class HeatMap {
 public:
  HeatMap() = default;
  /// Steps first_step ... last_step, `actors` actors.
  HeatMap(int first_step, int last_step, int actors, HeatMapLimits limits);

  bool empty() const { return actors_ == 0; }
  /// One step's compute time per actor (ms); extra or missing actors are ignored.
  void add(int step, const std::vector<double>& compute_ms);
  /// {"actors", "rows", "columns", "steps_per_column", "actors_per_row", "first_step", "last_step", "low_ms",
  ///  "high_ms", "cells": base64 of rows x columns bytes, row-major}
  nlohmann::json to_json() const;

 private:
  int first_ = 0, last_ = -1, actors_ = 0, rows_ = 0, columns_ = 0;
  std::vector<float> cells_;  ///< rows x columns, max per cell; < 0: empty
};

/// Standard base64 of `bytes`.
std::string base64(const std::vector<std::uint8_t>& bytes);

}  // namespace troupe::report
