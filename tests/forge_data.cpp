// forge_data ADDRESS_HEX PEER RANK SIZE: a process that is not a member of the
// job, but knows a node's UCX worker address (hex, as the node published it
// in the job's Redis) and the ranks, connects to it as rank RANK of SIZE and
// sends four tagged messages to rank PEER, without the job's key. None can
// match a receive there (UX-10); the node sweeps them and counts them with
// the control plane's refusals (UX-11), and its job finishes.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "backends/transport/ucx_transport.hpp"
#include "backends/transport/wait.hpp"

namespace {

bool from_hex(const std::string& hex, std::string& out) {
  if (hex.size() % 2) return false;
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    char* end = nullptr;
    const std::string byte = hex.substr(i, 2);
    const long v = std::strtol(byte.c_str(), &end, 16);
    if (end != byte.c_str() + 2) return false;
    out.push_back(static_cast<char>(v));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string address;
  if (argc != 5 || !from_hex(argv[1], address)) {
    std::fprintf(stderr, "usage: forge_data ADDRESS_HEX PEER RANK SIZE\n");
    return 2;
  }
  const int peer = std::atoi(argv[2]), rank = std::atoi(argv[3]), size = std::atoi(argv[4]);
  if (peer < 0 || peer >= size || rank < 0 || rank >= size || peer == rank) {
    std::fprintf(stderr, "forge_data: PEER and RANK must be distinct ranks below SIZE\n");
    return 2;
  }
  auto transport = troupe::UcxTransport::create(rank, size);
  if (!transport) {
    std::fprintf(stderr, "forge_data: %s\n", transport.error().message.c_str());
    return 1;
  }
  std::vector<std::string> addresses(static_cast<std::size_t>(size));
  addresses[static_cast<std::size_t>(peer)] = address;
  if (auto st = (*transport)->connect(addresses); !st.ok()) {
    std::fprintf(stderr, "forge_data: %s\n", st.error().message.c_str());
    return 1;
  }
  // Eager sizes only: each is gone once sent, whether or not anyone receives it.
  std::vector<char> bytes(1024, 'x');
  const troupe::Tag tags[] = {0, 1, troupe::kCollectiveTagBit | 1, 7};
  const std::size_t sizes[] = {16, 64, 1024, 4};
  for (int i = 0; i < 4; ++i) {
    auto st = troupe::wait_for(**transport, [&](troupe::Completion done) {
      (*transport)->send(peer, tags[i], bytes.data(), sizes[i], std::move(done));
    });
    if (!st.ok()) {
      std::fprintf(stderr, "forge_data: send %d: %s\n", i, st.error().message.c_str());
      return 1;
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the transports deliver before this process goes
  std::printf("sent 4 forged data messages as rank %d of %d\n", rank, size);
  return 0;
}
