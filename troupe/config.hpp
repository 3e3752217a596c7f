// Troupe's public API: the job config, as every actor receives it
// (ActorArgs::job): [model], [parallel], [train], [data], [health],
// [checkpoint], [recovery], [plugins], [[faults]] and [[topology]], parsed and
// range-checked; load_job_config and parse_job_config read one.
#pragma once

#include "runtime/config/job_config.hpp"  // IWYU pragma: export
