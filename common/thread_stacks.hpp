// Where every thread of this process is: its name and its call stack, as the
// dynamic symbols name them (libc's, CAF's, UCX's functions), for a process
// that is stuck and about to end itself (N-4's watchdog), so that the log
// names the blocking call.
#pragma once

namespace troupe {

/// Writes every other thread's id, name and stack to `fd`, each thread
/// interrupted in turn by a signal whose handler records its stack; a thread
/// that does not answer within 200 ms (blocked with signals masked) is listed
/// without one. Not reentrant: one caller at a time.
void print_thread_stacks(int fd);

}  // namespace troupe
