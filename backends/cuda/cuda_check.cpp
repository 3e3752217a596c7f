// cuda_status and cuda_fatal.
#include "backends/cuda/cuda_check.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace troupe {
namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "this host";
  return name;
}

std::string describe(cudaError_t code, const char* call, int device) {
  return std::string("cuda: ") + call + " on device " + std::to_string(device) + " of " + host_name() + ": " +
         cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")";
}

}  // namespace

Status cuda_status(cudaError_t code, const char* call, int device) {
  if (code == cudaSuccess) return Status::success();
  return make_error(describe(code, call, device));
}

void cuda_fatal(cudaError_t code, const char* call, int device) {
  std::fprintf(stderr, "%s\n", describe(code, call, device).c_str());
  std::abort();
}

}  // namespace troupe
