# Sourced by scripts/sanitize.sh and scripts/tsan.sh: the tests a sanitized
# build leaves to the plain one, as a ctest -E pattern (why each: the header
# of scripts/sanitize.sh).
sanitizer_skips="learns the demo corpus|40 finished jobs in a row|examples build against the installed package"
sanitizer_skips+="|300 steps without faults|CPU hog pinned on one core for 300 steps|bench transport: latency and bandwidth"
sanitizer_skips+="|layers depend downward only|report loads in Chromium|load time in Chromium"
sanitizer_skips+="|a report of a slow drill and a recovery|a failed run's report has the verdict"
