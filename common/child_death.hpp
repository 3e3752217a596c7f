// For tests of checks that end the process: run a function in a forked child
// and report how it ended and what it wrote to stderr.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

namespace troupe::testing {

struct ChildEnd {
  bool aborted = false;  ///< ended by SIGABRT
  std::string err;       ///< what it wrote to stderr
};

/// Runs `body` in a child process (which exits 0 if `body` returns).
inline ChildEnd run_in_child(const std::function<void()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGABRT, SIG_DFL);  // not the test framework's handler: the child ends as the check ends it
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    body();
    ::_exit(0);
  }
  ::close(fds[1]);
  ChildEnd end;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) end.err.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  end.aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  return end;
}

}  // namespace troupe::testing
