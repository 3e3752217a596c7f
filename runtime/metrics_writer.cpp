// MetricsWriter.
#include "runtime/metrics_writer.hpp"

#include <cerrno>
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
