// VethHosts: ip netns / ip link, and setns.
#include "runtime/veth_hosts.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace troupe {
namespace {

bool quietly(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

}  // namespace

Expected<std::unique_ptr<VethHosts>> VethHosts::create(const std::string& tag) {
  if (::geteuid() != 0) return make_error("creating network namespaces needs root");
  if (!quietly("command -v ip")) return make_error("iproute2's ip is not installed");
  std::unique_ptr<VethHosts> h(new VethHosts);
  const int pid = ::getpid();
  const std::string id = std::to_string(pid % 200 + 20);
  h->a_ = "troupe-" + tag + "-" + std::to_string(pid) + "-a";
  h->b_ = "troupe-" + tag + "-" + std::to_string(pid) + "-b";
  h->addr_a_ = "10.251." + id + ".1";
  h->addr_b_ = "10.251." + id + ".2";
  h->va_ = "tva" + std::to_string(pid % 100000);
  h->vb_ = "tvb" + std::to_string(pid % 100000);
  const std::string &va = h->va_, &vb = h->vb_;
  h->made_ = true;  // from here on the destructor removes whatever was made
  for (const std::string& cmd :
       {"ip netns add " + h->a_, "ip netns add " + h->b_, "ip link add " + va + " type veth peer name " + vb,
        "ip link set " + va + " netns " + h->a_, "ip link set " + vb + " netns " + h->b_,
        "ip -n " + h->a_ + " addr add " + h->addr_a_ + "/24 dev " + va,
        "ip -n " + h->b_ + " addr add " + h->addr_b_ + "/24 dev " + vb, "ip -n " + h->a_ + " link set " + va + " up",
        "ip -n " + h->b_ + " link set " + vb + " up", "ip -n " + h->a_ + " link set lo up",
        "ip -n " + h->b_ + " link set lo up"})
    if (!quietly(cmd)) return make_error("cannot create network namespaces and a veth pair here (", cmd, " failed)");
  return h;
}

VethHosts::~VethHosts() {
  if (!made_) return;
  for (const std::string& ns : {a_, b_}) {
    (void)quietly("ip netns pids " + ns + " | xargs -r kill -9");
    (void)quietly("ip netns del " + ns);  // the veth pair goes with it
  }
}

Status VethHosts::enter(int host) const {
  const std::string path = "/var/run/netns/" + name(host);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open ", path, ": ", std::strerror(errno));
  const int rc = ::setns(fd, CLONE_NEWNET);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return make_error("setns into ", name(host), " failed: ", std::strerror(err));
  // As `ip netns exec` does: a private mount namespace with /sys showing this
  // namespace's devices (UCX finds its network devices there).
  if (::unshare(CLONE_NEWNS) != 0) return make_error("unshare of the mount namespace failed: ", std::strerror(errno));
  if (::mount("none", "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0)
    return make_error("cannot make / a slave mount: ", std::strerror(errno));
  (void)::umount2("/sys", MNT_DETACH);
  if (::mount(name(host).c_str(), "/sys", "sysfs", 0, nullptr) != 0)
    return make_error("cannot mount /sys for ", name(host), ": ", std::strerror(errno));
  return Status::success();
}

}  // namespace troupe
