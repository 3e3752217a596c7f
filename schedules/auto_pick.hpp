// kind = auto: choose the schedule kind and chunk count with the shortest
// simulated step whose activation memory fits a per-stage limit, and say why.
#pragma once

#include <string>
#include <vector>

#include "common/expected.hpp"
#include "schedules/program.hpp"
#include "schedules/simulator.hpp"

namespace troupe::schedules {

struct AutoPickRequest {
  int stages = 1;
  int microbatches = 1;
  /// Costs of one microbatch on one whole stage (a chunk of v costs 1/v of it).
  Costs costs;
  /// Activation memory a stage may hold, in whole-stage microbatches.
  double memory_limit = 1e300;
  int max_chunks = 4;
  /// Why the split backward (zb-h1) cannot run, if it cannot (empty: it can):
  /// it is left out of the candidates and the reason says why.
  std::string no_split_backward;
};

struct Candidate {
  Kind kind;
  int chunks = 1;
  double step_time = 0;
  double bubble_fraction = 0;
  double peak_memory = 0;  ///< max over stages, in whole-stage microbatches
  bool fits = false;
};

struct AutoPick {
  Candidate chosen;
  std::vector<Candidate> candidates;  ///< every kind and chunk count considered
  std::string reason;
};

/// Simulates every candidate; picks the fastest that fits (ties: less memory,
/// then fewer chunks, then the simpler kind). An error when none fits.
Expected<AutoPick> auto_pick(const AutoPickRequest& req);

}  // namespace troupe::schedules
