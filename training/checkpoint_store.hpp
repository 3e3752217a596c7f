// A directory of checkpoints, and how one comes into being:
//
//   ROOT/.partial-step-00000012/    every node writes its actors' shards here,
//       shard-a0003.safetensors     then its part (node-1.part.json: the
//       node-1.part.json            pieces and files it wrote), fsynced;
//   ROOT/step-00000012/             the committer (node 0) merges the parts
//       manifest.json               into manifest.json, written last, then
//                                   renames the directory.
//
//  C-1  a checkpoint exists only once its manifest is in place and its
//       directory renamed: a crash at any earlier point leaves only a
//       .partial directory, never chosen by a resume and removed by the next commit;
//  C-2  older checkpoints are deleted only after a newer one is complete, and
//       the newest `keep` complete ones always stay.
//  C-3  no node removes a directory another node may be writing into: a node
//       whose part fails removes only the files it wrote and leaves a marker
//       (node-N.failed, the reason) that the committer stops on; a partial
//       directory goes whole only when every node has finished with it (its
//       part or its marker in place), at the next commit (C-2), at a rollback
//       once every node has aborted (its writer cancelled and joined its
//       persist: the coordinator removes them, SV-8), or when a job starts
//       afresh, before any node can write (so a run resumed after a crash
//       never meets the dead run's files).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "training/checkpoint_manifest.hpp"
#include "training/checkpoint_shard.hpp"

namespace troupe {

std::string checkpoint_dir(const std::string& root, int step);
std::string partial_dir(const std::string& root, int step);
/// The shard file of stage actor `rank`.
std::string shard_name(int rank);
/// The file of stage actor `rank`'s own state (UH-1; only where it has some):
/// kActorStateFilePrefix and the rank.
inline constexpr const char* kActorStateFilePrefix = "actor-state-a";
std::string actor_state_name(int rank);

/// Creates ROOT and ROOT/.partial-step-N (which may already exist: other nodes).
Status begin_partial(const std::string& root, int step);

/// Records node `node`'s shards in the partial directory (its part file,
/// fsynced). Node 0, the committer, keeps its own in memory.
Status write_part(const std::string& root, int step, int node, const std::vector<ShardRecord>& shards);

/// Node `node` could not write its part of `step`: its marker, with the reason (C-3).
Status mark_part_failed(const std::string& root, int step, int node, const std::string& reason);

/// Where nodes 1 ... nodes-1 stand with their parts of `step`.
struct PartsState {
  int written = 0;                    ///< parts in place
  std::vector<std::string> failures;  ///< "node N: reason" for each marker
  int others = 0;                     ///< nodes - 1
  bool complete() const { return written == others; }
  bool finished() const { return written + static_cast<int>(failures.size()) == others; }
};
PartsState parts_state(const std::string& root, int step, int nodes);

/// Whether the parts of nodes 1 ... nodes-1 for `step` are written.
bool parts_complete(const std::string& root, int step, int nodes);

/// A persist of `step` failed on node `node`, which wrote `files` (names in
/// the partial directory): they go, and the node's marker is left (a node
/// other than the committer), or the whole directory goes where no other
/// node still writes into it (the committer, C-3).
void abandon_partial(const std::string& root, int step, int node, int nodes, const std::vector<std::string>& files,
                     const std::string& reason);

/// Merges node 0's `shards` and the other nodes' parts into `base` (step,
/// model, layout, versions already set), checks that every tensor is tiled
/// (M-1), writes the manifest and renames the directory (C-1). Returns the
/// checkpoint's bytes.
Expected<std::uint64_t> commit_checkpoint(const std::string& root, Manifest base, int nodes,
                                          const std::vector<ShardRecord>& shards);

/// After the commit of `step`: keeps the newest `keep` complete checkpoints
/// and removes partial directories of steps up to `step` (C-2).
void retain_checkpoints(const std::string& root, int keep, int step);

/// A recovery rolled the job back, or a job starts afresh: every partial
/// directory under ROOT (a persist cancelled, or cut by a process that died)
/// goes, so that the steps done again write theirs afresh (C-3). Complete
/// checkpoints are untouched.
void remove_partials(const std::string& root);

/// Steps of the complete checkpoints under ROOT, oldest first.
std::vector<int> complete_steps(const std::string& root);

/// The step a run resumed from `dir` starts at (0 for "": no resume).
Expected<int> resume_step(const std::string& dir);

/// Checks every file of checkpoint DIR against the manifest (size and CRC-32);
/// the error names the file and both checksums.
Status verify_checkpoint(const std::string& dir, const Manifest& m);

/// The checkpoint `--resume` means: "latest" is the newest complete one under
/// `root` that verifies (an older one is taken if a newer one does not, and
/// `warn` is told why); anything else is a checkpoint directory itself.
Expected<std::string> resolve_resume(const std::string& what, const std::string& root,
                                     const std::function<void(const std::string&)>& warn);

}  // namespace troupe
