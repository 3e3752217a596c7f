// PinnedThread: pthread affinity, taken and given back.
#include "common/cpu_affinity.hpp"

#include <pthread.h>

#include <cstring>
#include <string>

namespace troupe {

Expected<PinnedThread> PinnedThread::to(int core) {
  cpu_set_t before;
  if (const int e = ::pthread_getaffinity_np(::pthread_self(), sizeof before, &before); e != 0)
    return make_error("pthread_getaffinity_np failed: ", std::strerror(e));
  if (core < 0 || core >= CPU_SETSIZE) return make_error("no core ", std::to_string(core), " to pin a thread to");
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(core, &one);
  if (const int e = ::pthread_setaffinity_np(::pthread_self(), sizeof one, &one); e != 0)
    return make_error("cannot pin a thread to core ", std::to_string(core), ": ", std::strerror(e));
  return PinnedThread(before);
}

PinnedThread::~PinnedThread() {
  if (owns_) (void)::pthread_setaffinity_np(::pthread_self(), sizeof before_, &before_);
}

}  // namespace troupe
