// libFuzzer target: a token file of arbitrary bytes, opened the way training
// opens it (mmap, header checks, the vocabulary scan, then reads). It must
// never crash or read past the mapping.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/data/token_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto header = troupe::parse_token_header(data, size, "fuzz.bin");
  if (header && troupe::kTokenHeaderBytes + header->count * header->width > size) std::abort();
  const int fd = ::memfd_create("troupe-fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) {
    ::close(fd);
    return 0;
  }
  auto file = troupe::TokenFile::open("/proc/self/fd/" + std::to_string(fd));
  if (file) {
    (void)troupe::check_vocabulary(*file, 256, "data.train");
    const std::uint64_t n = file->size() < 64 ? file->size() : 64;
    std::vector<std::int32_t> out(n);
    file->read(file->size() - n, n, out.data());
    for (auto t : out)
      if (static_cast<std::uint32_t>(t) > file->max_token()) std::abort();
  }
  ::close(fd);
  return 0;
}
