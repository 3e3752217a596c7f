// One JSON object per line, flushed per line, so a crash never leaves half a
// record. The file is open in append mode, so that several writers (the
// root's per-step lines, the coordinator's verdicts) never overwrite each
// other's lines.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "common/expected.hpp"

namespace troupe {

class MetricsWriter {
 public:
  /// Opens (truncates) `path`; an empty path writes nothing.
  static Expected<MetricsWriter> open(const std::string& path);
  /// Opens `path` to add lines after whatever it holds; an empty path writes nothing.
  static Expected<MetricsWriter> append(const std::string& path);
  /// The newest "step" of the per-step lines at the end of `path` (-1: none,
  /// or no file): where a replaced writer carries on.
  static int last_step(const std::string& path);
  /// Appends one line (`json_object` must be a single-line JSON object); a
  /// failed write or flush (a full disk) is an error naming the file.
  Status write(const std::string& json_object);
  bool enabled() const { return file_ != nullptr; }

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file_;
  std::string path_;
};

}  // namespace troupe
