// MetricsWriter.
#include "runtime/telemetry/metrics_writer.hpp"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <cstring>

#include <sys/stat.h>
#include <unistd.h>

namespace troupe {

Expected<MetricsWriter> MetricsWriter::open(const std::string& path) {
  auto w = append(path);
  if (!w || !w->file_) return w;
  struct stat st {};
  const int fd = ::fileno(w->file_.get());
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::ftruncate(fd, 0) != 0)  // a device (/dev/full) has no length
    return make_error("--metrics ", path, ": cannot truncate (", std::strerror(errno), ")");
  return w;
}

int MetricsWriter::last_step(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return -1;
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 65536);  // the last lines are enough
  in.seekg(from);
  std::string tail(static_cast<std::size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  int last = -1;
  std::istringstream lines(tail);
  for (std::string line; std::getline(lines, line);) {
    // A step's line has "loss"; its own "step" is the last key of that name
    // (keys are sorted: a nested one, "checkpoint_persisted", comes earlier).
    const auto at = line.rfind("\"step\":");
    if (at == std::string::npos || line.find("\"loss\"") == std::string::npos) continue;
    const std::size_t start = at + 7;
    int step = 0;
    std::size_t end = start;
    while (end < line.size() && line[end] >= '0' && line[end] <= '9') step = step * 10 + (line[end++] - '0');
    if (end > start) last = std::max(last, step);
  }
  return last;
}

Expected<MetricsWriter> MetricsWriter::append(const std::string& path) {
  MetricsWriter w;
  if (path.empty()) return w;
  w.file_.reset(std::fopen(path.c_str(), "a"));
  if (!w.file_) return make_error("--metrics ", path, ": cannot open (", std::strerror(errno), ")");
  std::setvbuf(w.file_.get(), nullptr, _IOFBF, 1 << 16);  // a line goes out in one write (O_APPEND: whole)
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
