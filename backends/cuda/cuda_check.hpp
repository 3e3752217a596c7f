// CUDA status codes as errors that name the call, the device and the host.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/expected.hpp"

namespace troupe {

/// Success, or an Error "cuda: CALL on device D of HOST: REASON".
Status cuda_status(cudaError_t code, const char* call, int device);

/// For calls whose failure leaves the device unusable where no caller can
/// take an error (an event record, a stream wait): prints the reason and
/// ends the process, which the health monitor then reports lost.
[[noreturn]] void cuda_fatal(cudaError_t code, const char* call, int device);

/// Checks `call` (a cudaError_t expression) and returns its error from the enclosing function.
#define TROUPE_CUDA_TRY(call, device)                                        \
  do {                                                                       \
    if (::troupe::Status st_ = ::troupe::cuda_status((call), #call, device); \
        !st_)                                                                \
      return st_.error();                                                    \
  } while (0)

/// Checks `call` and ends the process on failure (cuda_fatal).
#define TROUPE_CUDA_MUST(call, device)                                   \
  do {                                                                   \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) ::troupe::cuda_fatal(e_, #call, device); \
  } while (0)

}  // namespace troupe
