// What every benchmark reports its repeated figures with, and where it writes.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace troupe::cli {

/// The interpreter that runs a Python peer: TROUPE_PYTHON (a command, e.g.
/// "env LD_LIBRARY_PATH= python3"), else Debian's python3.
inline std::string peer_python() {
  const char* p = std::getenv("TROUPE_PYTHON");
  return p && *p ? p : "/usr/bin/python3";
}

/// A peer script of bench/: under $TROUPE_SOURCE_DIR/bench where set (a
/// checkout of one's own, as on the GPU machine), else beside the executable
/// (bench/, copied there by the build) or in the installed tree
/// (../share/troupe/bench); "" where none holds it.
std::string peer_script(const std::string& name);

/// The median of `v` (the mean of the middle two for an even count; 0 when empty).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/// {min, median, max, n} of repeated figures (null when there are none).
inline nlohmann::json spread(const std::vector<double>& v) {
  if (v.empty()) return nullptr;
  return {{"min", *std::min_element(v.begin(), v.end())},
          {"median", median(v)},
          {"max", *std::max_element(v.begin(), v.end())},
          {"n", v.size()}};
}

/// The numbers under `key` in each object of `runs` (objects without it skipped).
inline std::vector<double> column(const nlohmann::json& runs, const char* key) {
  std::vector<double> v;
  for (const auto& r : runs)
    if (r.is_object() && r.contains(key) && r[key].is_number()) v.push_back(r[key].get<double>());
  return v;
}

/// The smallest and largest of `v` (0 when empty).
inline double lowest(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }
inline double highest(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

/// A benchmark's working directory: the one asked for (kept), or a fresh
/// temporary one named after `tag` and the process (removed with this object).
class BenchDirectory {
 public:
  BenchDirectory(const std::string& asked, const std::string& tag)
      : path_(asked.empty() ? (std::filesystem::temp_directory_path() / (tag + "_" + std::to_string(::getpid()))).string()
                            : asked),
        own_(asked.empty()) {}
  ~BenchDirectory() {
    std::error_code ec;
    if (own_) std::filesystem::remove_all(path_, ec);
  }
  BenchDirectory(const BenchDirectory&) = delete;
  BenchDirectory& operator=(const BenchDirectory&) = delete;
  const std::string& path() const { return path_; }
  /// What the JSON says of it.
  std::string described() const { return own_ ? "(temporary, removed)" : path_; }

 private:
  std::string path_;
  bool own_;
};

}  // namespace troupe::cli
