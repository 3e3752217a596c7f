// MetricsWriter.
#include "runtime/metrics_writer.hpp"

#include <cerrno>
#include <cstring>

namespace troupe {

Expected<MetricsWriter> MetricsWriter::open(const std::string& path) {
  MetricsWriter w;
  if (path.empty()) return w;
  w.file_.reset(std::fopen(path.c_str(), "w"));
  if (!w.file_) return make_error("--metrics ", path, ": cannot open (", std::strerror(errno), ")");
  w.path_ = path;
  return w;
}

Status MetricsWriter::write(const std::string& json_object) {
  if (!file_) return Status::success();
  if (std::fputs(json_object.c_str(), file_.get()) < 0 || std::fputc('\n', file_.get()) == EOF ||
      std::fflush(file_.get()) != 0)
    return make_error("--metrics ", path_, ": write failed (", std::strerror(errno), ")");
  return Status::success();
}

}  // namespace troupe
