// read_private_line (see private_file.hpp).
#include "common/private_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace troupe {

Expected<std::string> read_private_line(const std::string& path, const std::string& flag) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return make_error(flag, " ", path, ": cannot read");
  if (!S_ISREG(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 077) != 0)
    return make_error(flag, " ", path, ": must be a file of yours with mode 0600 (chmod 600 ", path, ")");
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  if (line.empty()) return make_error(flag, " ", path, ": is empty");
  return line;
}

}  // namespace troupe
