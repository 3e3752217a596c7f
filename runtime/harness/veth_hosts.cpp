// VethHosts: ip netns / ip link, and setns.
#include "runtime/harness/veth_hosts.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace troupe {
namespace {

bool quietly(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

// An algorithm's name goes into a shell command: letters, digits, '_' only.
bool plain_name(const std::string& s) {
  return !s.empty() && s.size() <= 16 &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// VH-1: a namespace's creator holds an flock on its lock file here for as
// long as the namespaces live. The kernel lets go of it however the creator
// ends (killed, its destructor never run), and in whichever pid namespace it
// ran, so a lock anyone can take marks namespaces that nobody will remove.
constexpr const char* kLockDir = "/run/troupe-netns";

std::string lock_path(const std::string& ns) { return std::string(kLockDir) + "/" + ns; }

// VH-1: removes every namespace whose lock file nobody holds, with whatever
// still runs in it, and the lock file. A namespace without a lock file is not
// judged (made by someone else, or by a troupe that kept no lock).
void remove_abandoned() {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(kLockDir), ::closedir);
  if (!dir) return;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir.get()))
    if (std::strncmp(e->d_name, "troupe-", 7) == 0) names.emplace_back(e->d_name);
  for (const std::string& ns : names) {
    UniqueFd lock(::open(lock_path(ns).c_str(), O_RDWR | O_CLOEXEC));
    if (!lock || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) continue;  // gone meanwhile, or its creator lives
    (void)quietly("ip netns pids " + ns + " | xargs -r kill -9");
    (void)quietly("ip netns del " + ns);  // if it still exists
    ::unlink(lock_path(ns).c_str());
  }
}

}  // namespace

Expected<std::unique_ptr<VethHosts>> VethHosts::create(const std::string& tag, int hosts) {
  if (hosts < 2 || hosts > 26) return make_error("network namespaces: 2 to 26 hosts, not ", std::to_string(hosts));
  if (::geteuid() != 0) return make_error("creating network namespaces needs root");
  if (!quietly("command -v ip")) return make_error("iproute2's ip is not installed");
  std::unique_ptr<VethHosts> h(new VethHosts);
  const int pid = ::getpid();
  const std::string id = std::to_string(pid % 200 + 20), short_pid = std::to_string(pid % 100000);
  for (int i = 0; i < hosts; ++i) {
    h->names_.push_back("troupe-" + tag + "-" + std::to_string(pid) + "-" + static_cast<char>('a' + i));
    h->addresses_.push_back("10.251." + id + "." + std::to_string(i + 1));
  }
  // VH-1: locked before they exist, so that no sweep takes them for abandoned.
  if (::mkdir(kLockDir, 0700) != 0 && errno != EEXIST)
    return make_error("cannot create ", kLockDir, ": ", std::strerror(errno));
  for (const std::string& ns : h->names_) {
    UniqueFd lock(::open(lock_path(ns).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!lock || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0)
      return make_error("cannot lock ", lock_path(ns), ": ", std::strerror(errno));
    h->locks_.push_back(std::move(lock));
  }
  remove_abandoned();
  h->made_ = true;  // from here on the destructor removes whatever was made
  std::vector<std::string> cmds;
  for (auto& ns : h->names_) cmds.push_back("ip netns add " + ns);
  const auto& n = h->names_;
  auto addr = [&](int i, const std::string& dev) {
    cmds.push_back("ip -n " + n[static_cast<std::size_t>(i)] + " addr add " + h->addresses_[static_cast<std::size_t>(i)] +
                   "/24 dev " + dev);
    cmds.push_back("ip -n " + n[static_cast<std::size_t>(i)] + " link set " + dev + " up");
  };
  if (hosts == 2) {  // one pair, its ends the hosts' devices
    const std::string va = "tva" + short_pid, vb = "tvb" + short_pid;
    cmds.push_back("ip link add " + va + " type veth peer name " + vb);
    cmds.push_back("ip link set " + va + " netns " + n[0]);
    cmds.push_back("ip link set " + vb + " netns " + n[1]);
    addr(0, va);
    addr(1, vb);
    h->devices_ = {va, vb};
  } else {  // a bridge in host 0; each other host's pair ends on it
    const std::string bridge = "tbr" + short_pid;
    cmds.push_back("ip -n " + n[0] + " link add " + bridge + " type bridge");
    addr(0, bridge);
    h->devices_.push_back(bridge);
    for (int i = 1; i < hosts; ++i) {
      const std::string port = "tp" + short_pid + static_cast<char>('a' + i), end = "te" + short_pid + static_cast<char>('a' + i);
      cmds.push_back("ip link add " + port + " type veth peer name " + end);
      cmds.push_back("ip link set " + port + " netns " + n[0]);
      cmds.push_back("ip link set " + end + " netns " + n[static_cast<std::size_t>(i)]);
      cmds.push_back("ip -n " + n[0] + " link set " + port + " master " + bridge);
      cmds.push_back("ip -n " + n[0] + " link set " + port + " up");
      addr(i, end);
      h->devices_.push_back(end);
    }
  }
  for (auto& ns : n) cmds.push_back("ip -n " + ns + " link set lo up");
  for (const std::string& cmd : cmds)
    if (!quietly(cmd)) return make_error("cannot create network namespaces and veth pairs here (", cmd, " failed)");
  return h;
}

VethHosts::~VethHosts() {
  if (!made_) return;
  for (const std::string& ns : names_) {
    (void)quietly("ip netns pids " + ns + " | xargs -r kill -9");
    (void)quietly("ip netns del " + ns);  // its veth ends go with it
    ::unlink(lock_path(ns).c_str());
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

Status VethHosts::set_tcp_congestion_control(const std::string& algorithm) const {
  if (!plain_name(algorithm)) return make_error("TCP congestion control: not an algorithm's name: '", algorithm, "'");
  for (int h = 0; h < hosts(); ++h) {
    if (!quietly(exec_prefix(h) + "sysctl -qw net.ipv4.tcp_congestion_control=" + algorithm))
      return make_error("cannot set TCP congestion control '", algorithm, "' in namespace ", name(h),
                        " (a namespace may use reno or one in net.ipv4.tcp_allowed_congestion_control)");
    auto now = tcp_congestion_control(h);
    if (!now) return now.error();
    if (*now != algorithm)
      return make_error("TCP congestion control in namespace ", name(h), " is '", *now, "' after setting '", algorithm, "'");
  }
  return Status::success();
}

Expected<std::string> VethHosts::tcp_congestion_control(int host) const {
  const std::string cmd = exec_prefix(host) + "cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  char line[64] = {};
  std::string s = p && std::fgets(line, sizeof line, p.get()) ? line : "";
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (s.empty()) return make_error("cannot read TCP congestion control in namespace ", name(host));
  return s;
}

}  // namespace troupe
