// forge_control HOST PORT [KEY]: a process that is not a member of the job
// connects to a node's published actor and sends it every control message a
// member could — with a huge generation, out-of-range indices, and a failure
// verdict. Without the job's KEY the node refuses them all for their MAC
// (P-5); with it, they pass the MAC and the membership checks drop them
// (P-2, P-3). Either way the node counts them and finishes its job normally.
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <cstdio>
#include <thread>

#include "actors/protocol.hpp"
#include "common/message_key.hpp"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: forge_control HOST PORT [KEY]\n");
    return 2;
  }
  if (argc == 4) troupe::install_message_key(argv[3]);
  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  troupe::announce_protocol(cfg);
  caf::actor_system sys{cfg};
  auto node = sys.middleman().remote_actor(argv[1], static_cast<std::uint16_t>(std::atoi(argv[2])));
  if (!node) {
    std::fprintf(stderr, "forge_control: %s\n", sys.render(node.error()).c_str());
    return 1;
  }
  namespace msg = troupe::msg;
  const std::uint64_t huge = std::uint64_t{1} << 40;
  caf::scoped_actor forger{sys};
  forger->send(*node, msg::Plan{huge, 2});
  forger->send(*node, msg::PeerLost{huge, 1 << 30, "forged"});
  forger->send(*node, msg::PeerLost{huge, 0, "forged"});
  forger->send(*node, msg::ActorFailed{huge, 1 << 30, "forged", false, ""});
  forger->send(*node, msg::ActorFailed{huge, 1, "forged", false, ""});
  forger->send(*node, msg::ActorDone{huge, 1, 0.0});
  msg::Heartbeat beat{huge, 0, 1, {0}, {5}, {1}, {0}, {-1}, {}, 0, 0};
  forger->send(*node, beat);  // to a node that relays for nobody
  forger->send(*node, msg::Finish{huge, false, "forged"});
  caf::anon_send(*node, msg::Finish{huge, false, "forged anonymously"});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::printf("sent 9 forged messages\n");
  return 0;
}
