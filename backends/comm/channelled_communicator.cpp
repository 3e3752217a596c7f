// ChannelledCommunicator: a channel per (peer, channel bits), or numbered tags over a tagged path.
#include "backends/comm/channelled_communicator.hpp"

namespace troupe {

std::unique_ptr<ChannelledCommunicator> ChannelledCommunicator::over_channels(GroupMembers members, ChannelTags tags,
                                                                             Channels channels) {
  std::unique_ptr<ChannelledCommunicator> c(new ChannelledCommunicator(std::move(members), tags));
  c->channels_ = std::move(channels);
  return c;
}

std::unique_ptr<ChannelledCommunicator> ChannelledCommunicator::in_order_over(Communicator& tagged, ChannelTags tags,
                                                                             std::unique_ptr<Communicator> owned) {
  std::unique_ptr<ChannelledCommunicator> c(
      new ChannelledCommunicator(GroupMembers{tagged.name(), tagged.ranks(), tagged.index()}, tags));
  c->tagged_ = &tagged;
  c->owned_ = std::move(owned);
  return c;
}

CommPath ChannelledCommunicator::path() const {
  if (tagged_) return tagged_->path();
  return channels_.empty() ? CommPath::nccl : channels_.begin()->second->path();
}

std::string ChannelledCommunicator::detail() const {
  if (tagged_) return "in order per channel over the " + std::string(comm_path_name(tagged_->path())) + " path (CH-2)";
  return std::to_string(channels_.size()) + " in-order channels (CH-1)";
}

void ChannelledCommunicator::all_reduce(const Tensor&, Stream&, Completion done) {
  done(make_error(name(), " all-reduce: the pipeline's channels carry transfers only"));
}
void ChannelledCommunicator::reduce_scatter(const Tensor&, Stream&, Completion done) {
  done(make_error(name(), " reduce-scatter: the pipeline's channels carry transfers only"));
}
void ChannelledCommunicator::all_gather(const Tensor&, Stream&, Completion done) {
  done(make_error(name(), " all-gather: the pipeline's channels carry transfers only"));
}
void ChannelledCommunicator::broadcast(const Tensor&, int, Stream&, Completion done) {
  done(make_error(name(), " broadcast: the pipeline's channels carry transfers only"));
}

void ChannelledCommunicator::send(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) {
  transfer(true, t, peer, tag, s, std::move(done));
}

void ChannelledCommunicator::recv(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) {
  transfer(false, t, peer, tag, s, std::move(done));
}

void ChannelledCommunicator::transfer(bool sending, const Tensor& t, int peer, Tag tag, Stream& s, Completion done) {
  const char* op = sending ? "send" : "recv";
  if (Status st = check_peer(peer, tag, op); !st) return done(st);
  if (tagged_) {  // CH-2
    const Tag unnumbered = tag & ~tags_.sequence_mask;
    Tag n = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Count& c = counts_[{sending, peer, tag & tags_.channel_mask}];
      if (c.unnumbered != unnumbered) c = Count{unnumbered, 0};  // the channel's next step
      n = c.issued++;
    }
    if (n > tags_.sequence_mask)
      return done(make_error(name(), " ", op, ": more transfers on one channel in a step than its tags number"));
    const Tag numbered = unnumbered | n;
    return sending ? tagged_->send(t, peer, numbered, s, std::move(done))
                   : tagged_->recv(t, peer, numbered, s, std::move(done));
  }
  auto it = channels_.find({sending, peer, tag & tags_.channel_mask});  // CH-1
  if (it == channels_.end())
    return done(make_error(name(), " ", op, ": no channel ", sending ? "to" : "from", " member ", std::to_string(peer),
                           " for tag ", std::to_string(tag)));
  Communicator& channel = *it->second;
  const int other = 1 - channel.index();  // a channel holds this member and the peer
  return sending ? channel.send(t, other, tag, s, std::move(done)) : channel.recv(t, other, tag, s, std::move(done));
}

void ChannelledCommunicator::abort() {
  if (tagged_) {
    tagged_->abort();
    std::lock_guard<std::mutex> lock(mu_);
    counts_.clear();  // a step run again numbers its transfers from 0, as every side's abort does
    return;
  }
  for (auto& [key, channel] : channels_) channel->abort();
}

}  // namespace troupe
