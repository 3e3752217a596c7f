// Point-to-point transfers over one in-order channel per (peer, channel):
// NCCL matches a communicator's sends and receives in the order they are
// issued, not by tag (NC-2), and the pipeline posts a step's receives before
// any of its sends, in program order across all of its neighbours and
// directions. So the pipeline's transfers go over a channel per (peer,
// channel bits of the tag) — for the stage runner: the direction and the
// receiving chunk, i.e. one channel per pair of neighbouring virtual stages
// and direction — and the schedule's S-3 (on each such channel, sends and
// receives come in the same order) makes in-order matching deliver every
// transfer where its tag says.
//
// CH-1 a transfer goes over the channel of (send or receive, peer, tag &
//      channel_mask), issued in the caller's order; collectives are refused
//      (the channels carry transfers only).
// CH-2 over a path that matches by tag (the host and staged paths), the
//      tag's sequence bits are replaced by the transfer's number on its
//      channel within its step (the tag without its sequence bits), counted
//      on each side: transfers then match in issue order, as on an in-order
//      channel — a sender and a receiver that disagree on a channel's order
//      deliver to the wrong buffer, as NCCL would. The CPU tests run the
//      pipeline this way (TROUPE_PIPELINE_IN_ORDER=1).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "backends/comm/communicator.hpp"

namespace troupe {

/// Which bits of a transfer's tag name its channel (with the peer), and
/// which count transfers on it (CH-2 replaces those).
struct ChannelTags {
  Tag channel_mask = 0;
  Tag sequence_mask = 0;  ///< contiguous low bits of the tag
};

class ChannelledCommunicator final : public Communicator {
 public:
  /// Channel (sending: whether this member sends on it, peer, channel bits)
  /// -> a communicator of two members, this one and the peer, in order
  /// (NCCL). A pair of members may share channel bits in both directions
  /// (interleaved schedules): those are two channels.
  using Channels = std::map<std::tuple<bool, int, Tag>, std::unique_ptr<Communicator>>;

  /// CH-1 over in-order channels; a transfer on a channel not in `channels` fails naming it.
  static std::unique_ptr<ChannelledCommunicator> over_channels(GroupMembers members, ChannelTags tags,
                                                               Channels channels);
  /// CH-2 over `tagged`, a communicator of the same members that matches by
  /// tag (owned here when `owned` holds it); it outlives this one.
  static std::unique_ptr<ChannelledCommunicator> in_order_over(Communicator& tagged, ChannelTags tags,
                                                               std::unique_ptr<Communicator> owned = nullptr);

  CommPath path() const override;
  std::string detail() const override;
  void all_reduce(const Tensor& t, Stream& s, Completion done) override;
  void reduce_scatter(const Tensor& t, Stream& s, Completion done) override;
  void all_gather(const Tensor& t, Stream& s, Completion done) override;
  void broadcast(const Tensor& t, int root, Stream& s, Completion done) override;
  void send(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) override;
  void recv(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) override;
  void abort() override;

 private:
  ChannelledCommunicator(GroupMembers members, ChannelTags tags) : Communicator(std::move(members)), tags_(tags) {}
  // The transfer over its channel (CH-1) or its numbered tag over the tagged path (CH-2).
  void transfer(bool sending, const Tensor& t, int peer, Tag tag, Stream& s, Completion done);

  ChannelTags tags_;
  Channels channels_;                     // CH-1
  Communicator* tagged_ = nullptr;        // CH-2
  std::unique_ptr<Communicator> owned_;   // CH-2, when it holds the tagged path
  std::mutex mu_;
  // CH-2, per (sending, peer, channel bits): the tag without its sequence
  // bits of the last transfer issued (a new one starts the count again) and
  // the transfers issued with it.
  struct Count {
    Tag unnumbered = 0;
    Tag issued = 0;
  };
  std::map<std::tuple<bool, int, Tag>, Count> counts_;
};

}  // namespace troupe
