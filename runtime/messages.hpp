// The control messages between node actors and the coordinator. Every message
// that concerns the job carries the membership generation first; a receiver
// drops (and counts) messages of an older generation. Plain atoms and built-in
// types only, so no type registration is needed to cross nodes.
#pragma once

#include <caf/atom.hpp>

namespace troupe::msg {

/// coordinator -> node: (plan, generation, world): start the job's work.
using plan_atom = caf::atom_constant<caf::atom("plan")>;
/// node -> coordinator: (ready, generation, rank, checksum): fabric verified.
using ready_atom = caf::atom_constant<caf::atom("ready")>;
/// coordinator -> node: (lost, generation, rank): a peer died; generation bumped.
using lost_atom = caf::atom_constant<caf::atom("lost")>;
/// coordinator -> node: (finish, generation, ok): stop, with the job's outcome.
using finish_atom = caf::atom_constant<caf::atom("finish")>;
/// node -> itself: (reduced, generation, ok, checksum): the smoke all-reduce completed.
using reduced_atom = caf::atom_constant<caf::atom("reduced")>;
/// work actor -> node: (failed, generation, rank, reason): why the actor's work failed
/// (followed by its (reduced, generation, false, -1)).
using failed_atom = caf::atom_constant<caf::atom("failed")>;
/// transport completion -> stage actor: (arrived, event, chunk, index, ok,
/// error, steady-clock ns): a transfer or collective the stage started is done.
using arrived_atom = caf::atom_constant<caf::atom("arrived")>;
/// stage -> data loader: (batch, step, replica) -> (slot, block): where the
/// replica's microbatches of `step` are in the node's shared-memory ring.
using batch_atom = caf::atom_constant<caf::atom("batch")>;
/// work actor -> node: (failed, generation, rank, reason): why the actor's work failed
/// (followed by its (reduced, generation, false, -1)).
using failed_atom = caf::atom_constant<caf::atom("failed")>;
/// stage -> data loader: (release, step): the stage no longer reads that step.
using release_atom = caf::atom_constant<caf::atom("release")>;
/// coordinator -> itself: the hold time is over.
using hold_atom = caf::atom_constant<caf::atom("hold")>;

}  // namespace troupe::msg
