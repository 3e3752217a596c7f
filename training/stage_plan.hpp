// A training job's plan for GPT stage actors, made from the config before any
// node joins: the model, the split of its layers into pp x chunks virtual
// stages, and the schedule (kind = auto picks one by simulation). Every error
// names the config key at fault.
#pragma once

#include <string>
#include <vector>

#include "common/expected.hpp"
#include "ops/model/gpt_config.hpp"
#include "runtime/config/job_config.hpp"
#include "runtime/config/topology.hpp"
#include "schedules/program.hpp"

namespace troupe {

struct StagePlan {
  JobConfig job;
  GptConfig cfg;
  ParallelDims dims;
  std::vector<StageSpec> virtual_specs;  ///< pp * chunks, virtual stage order
  schedules::Schedule schedule;
  std::string schedule_reason;  ///< why kind = auto chose what it chose ("" otherwise)

  int actors() const { return dims.dp * dims.pp * dims.tp; }
  /// The model chunks stage `stage` holds, chunk 0 first.
  std::vector<StageSpec> chunks_of(int stage) const;
  /// The actor that writes the metrics and exports --save: replica 0's first
  /// stage, rank 0 (on node 0, which also commits the checkpoints).
  int root_rank() const { return 0; }
};

/// Plans `job` for `actors` stage actors (dp x pp must equal it).
Expected<StagePlan> make_stage_plan(const JobConfig& job, int actors);

}  // namespace troupe
