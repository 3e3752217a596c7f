// Communicator: group validation and the checks every path shares.
#include "backends/comm/communicator.hpp"

#include <set>

namespace troupe {

Status validate(const GroupMembers& g) {
  if (g.ranks.empty()) return make_error("group ", g.name, ": no members");
  if (g.me < 0 || g.me >= static_cast<int>(g.ranks.size()))
    return make_error("group ", g.name, ": member index ", std::to_string(g.me), " outside its ",
                      std::to_string(g.ranks.size()), " members");
  std::set<int> seen;
  for (int r : g.ranks) {
    if (r < 0) return make_error("group ", g.name, ": negative rank ", std::to_string(r));
    if (!seen.insert(r).second) return make_error("group ", g.name, ": rank ", std::to_string(r), " appears twice");
  }
  return Status::success();
}

Status Communicator::check_collective(const Tensor& t, const char* op, bool host_memory) const {
  if (!t.defined()) return make_error(name(), " ", op, ": no tensor");
  if (t.dtype() != DType::f32)
    return make_error(name(), " ", op, ": collectives sum f32 tensors, got ", dtype_name(t.dtype()));
  if (host_memory && !t.device().host_accessible())
    return make_error(name(), " ", op, ": a ", comm_path_name(path()), " communicator needs memory the host reads (",
                      t.device().name(), " memory needs the staged or nccl path)");
  return Status::success();
}

Status Communicator::check_peer(int peer, Tag tag, const char* op) const {
  if (peer < 0 || peer >= size() || peer == index())
    return make_error(name(), " ", op, ": member ", std::to_string(peer), " is not another member of the group's ",
                      std::to_string(size()));
  if (tag >= kCollectiveTagBit) return make_error(name(), " ", op, ": tag ", std::to_string(tag), " is a collective's");
  return Status::success();
}

}  // namespace troupe
