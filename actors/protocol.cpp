// announce_protocol.
#include "actors/protocol.hpp"

#include <caf/all.hpp>

namespace troupe {

void announce_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<msg::Plan>("troupe.Plan");
  cfg.add_message_type<msg::PeerLost>("troupe.PeerLost");
  cfg.add_message_type<msg::Finish>("troupe.Finish");
  cfg.add_message_type<msg::Recover>("troupe.Recover");
  cfg.add_message_type<msg::Rewire>("troupe.Rewire");
  cfg.add_message_type<msg::Redo>("troupe.Redo");
  cfg.add_message_type<msg::Rejoin>("troupe.Rejoin");
  cfg.add_message_type<msg::NodeAborted>("troupe.NodeAborted");
  cfg.add_message_type<msg::Rewired>("troupe.Rewired");
  cfg.add_message_type<msg::ActorParked>("troupe.ActorParked");
  cfg.add_message_type<msg::NodeDone>("troupe.NodeDone");
  cfg.add_message_type<msg::NodeFailed>("troupe.NodeFailed");
  cfg.add_message_type<msg::Heartbeat>("troupe.Heartbeat");
  cfg.add_message_type<msg::HeartbeatAck>("troupe.HeartbeatAck");
  cfg.add_message_type<msg::MemberSilent>("troupe.MemberSilent");
  cfg.add_message_type<msg::ActorDone>("troupe.ActorDone");
  cfg.add_message_type<msg::ActorFailed>("troupe.ActorFailed");
  cfg.add_message_type<msg::TransferDone>("troupe.TransferDone");
  cfg.add_message_type<msg::BatchRequest>("troupe.BatchRequest");
  cfg.add_message_type<msg::BatchSlot>("troupe.BatchSlot");
  cfg.add_message_type<msg::BatchRelease>("troupe.BatchRelease");
  cfg.add_message_type<msg::HoldOver>("troupe.HoldOver");
  cfg.add_message_type<msg::BlameDeadline>("troupe.BlameDeadline");
  cfg.add_message_type<msg::FinishDeadline>("troupe.FinishDeadline");
  cfg.add_message_type<msg::SnapshotTaken>("troupe.SnapshotTaken");
  cfg.add_message_type<msg::FabricReduced>("troupe.FabricReduced");
}

}  // namespace troupe
