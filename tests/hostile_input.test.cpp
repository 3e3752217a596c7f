// Hostile input, end to end: every case exits non-zero within 10 s with a
// one-line error naming the file, key, tensor or node, and leaves no process,
// shared-memory ring or temporary file behind (issue: control plane you can trust).
#include <catch2/catch.hpp>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <set>

#include "common/hex.hpp"
#include "common/version.hpp"
#include "runtime/control/redis_server.hpp"
#include "runtime/control/endpoint.hpp"
#include "runtime/control/rendezvous.hpp"
#include "tests/test_support.hpp"

namespace troupe::testing {
namespace {

using Clock = std::chrono::steady_clock;

// A prepared synthetic corpus and a small config (2 layers, d=32, ctx 32).
struct Job {
  ScratchDir dir{"hostile"};
  std::string cfg = dir / "job.toml";
  explicit Job(const std::string& extra = "") {
    write_file(dir / "corpus.txt", synthetic_text(40000));
    REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string())
                .exit_code == 0);
    write_file(cfg, "[model]\nlayers = 2\nheads = 2\ndim = 32\nctx = 32\n[train]\nbatch = 4\nthreads = 1\n"
                    "steps = 4\nlr = 3e-3\neval_every = 0\neval_windows = 2\nlog_every = 1\n" + extra +
                    "[data]\ntrain = \"" + (dir / "train.bin") + "\"\nval = \"" + (dir / "val.bin") + "\"\n");
  }
  std::set<std::string> files() const {
    std::set<std::string> out;
    for (auto& e : std::filesystem::recursive_directory_iterator(dir.path())) out.insert(e.path().string());
    return out;
  }
};

// Whether the process that created the ring at `path` (its header's creator pid) is gone.
bool orphaned(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::int64_t header[4] = {};
  if (!in.read(reinterpret_cast<char*>(header), sizeof header)) return false;
  return ::kill(static_cast<pid_t>(header[3]), 0) != 0 && errno == ESRCH;
}

std::set<std::string> rings() {
  std::set<std::string> out;
  for (auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind("troupe.", 0) == 0) out.insert(e.path().string());
  return out;
}


// `cmd` fails within 10 s with one line naming `needle`, and leaves nothing behind.
void refused(const Job& job, const std::string& cmd, const std::string& needle) {
  const auto files = job.files();
  const auto before = rings();
  const auto t0 = Clock::now();
  auto r = run(cmd);
  const auto took = Clock::now() - t0;
  INFO("command: " << cmd << "\nstderr: " << r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find(needle) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(took < std::chrono::seconds(10));
  CHECK(job.files() == files);
  CHECK(processes_with(job.dir.path().string()).empty());
  // Rings of tests running beside this one have live creators; one left by this command would not.
  for (auto& ring : rings())
    if (!before.count(ring)) CHECK_FALSE(orphaned(ring));
}

std::string token_header(std::uint32_t version, std::uint32_t width, std::uint64_t count, std::uint32_t vocab) {
  std::string h = "TROUPETK";
  auto put = [&h](std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) h += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  put(version, 4);
  put(width, 4);
  put(count, 8);
  put(vocab, 4);
  h.append(4, '\0');
  return h;
}

// A safetensors file whose JSON header is `header`, followed by `data_bytes` zeros.
std::string safetensors_with(const std::string& header, std::size_t data_bytes) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

}  // namespace

TEST_CASE("token ids outside the vocabulary are refused when the file is opened, by train and launch", "[hostile]") {
  Job job;
  const std::string t = troupe_bin();
  refused(job, t + " train " + job.cfg + " --set model.vocab=64", "model.vocab is 64");
  refused(job, t + " launch " + job.cfg + " --nodes 2 --set parallel.dp=2 --set model.vocab=64", "model.vocab is 64");
}

TEST_CASE("a token header whose count overflows the size check is refused", "[hostile]") {
  Job job;
  write_file(job.dir / "huge.bin", token_header(2, 4, (std::uint64_t{1} << 62) + 1, 256) + std::string(64, 'a'));
  const std::string set = " --set data.train=" + (job.dir / "huge.bin");
  refused(job, troupe_bin() + " train " + job.cfg + set, "huge.bin: truncated");
  refused(job, troupe_bin() + " launch " + job.cfg + " --nodes 2 --set parallel.dp=2" + set, "huge.bin: truncated");
}

TEST_CASE("a train file shorter than ctx + 2 is refused under launch too", "[hostile]") {
  Job job;
  write_file(job.dir / "short.bin", token_header(2, 1, 10, 256) + std::string(10, 'a'));
  refused(job, troupe_bin() + " launch " + job.cfg + " --nodes 2 --set parallel.dp=2 --set data.train=" +
                   (job.dir / "short.bin"),
          "fewer than model.ctx + 2");
}

TEST_CASE("hostile safetensors are refused by train, eval and launch, naming the file and tensor", "[hostile]") {
  Job job;
  const std::string wrong_type = R"({"wte.weight":{"dtype":5,"shape":[256,32],"data_offsets":[0,32768]}})";
  const std::string past_end = R"({"wte.weight":{"dtype":"F32","shape":[256,32],"data_offsets":[0,32768]}})";
  const std::string overflow =
      R"({"wte.weight":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})";
  for (auto [name, text, needle] : {std::tuple{"type.safetensors", safetensors_with(wrong_type, 32768), "dtype is not a string"},
                                    std::tuple{"end.safetensors", safetensors_with(past_end, 100), "data_offsets point outside the file"},
                                    std::tuple{"shape.safetensors", safetensors_with(overflow, 0), "shape's byte size overflows"}}) {
    const std::string path = job.dir / name;
    write_file(path, text);
    const std::string init = " --init " + path;
    const std::string named = std::string(name) + ": tensor wte.weight: " + needle;
    refused(job, troupe_bin() + " train " + job.cfg + init, named);
    refused(job, troupe_bin() + " eval " + job.cfg + init + " --data " + (job.dir / "val.bin"), named);
    refused(job, troupe_bin() + " launch " + job.cfg + " --nodes 2 --set parallel.dp=2" + init, named);
  }
}

TEST_CASE("config values out of range, NaN, infinite or too large for their type are refused", "[hostile]") {
  Job job;
  for (auto [set, key] : {std::pair{"train.lr=nan", "train.lr"}, std::pair{"train.beta1=1", "train.beta1"},
                          std::pair{"train.grad_clip=nan", "train.grad_clip"},
                          std::pair{"parallel.bucket_mb=inf", "parallel.bucket_mb"},
                          std::pair{"model.dim=4294967424", "model.dim"}}) {
    refused(job, troupe_bin() + " train " + job.cfg + " --set " + set, key);
    refused(job, troupe_bin() + " launch " + job.cfg + " --nodes 2 --set parallel.dp=2 --set " + set, key);
  }
}

TEST_CASE("a malformed endpoint in Redis ends the node that reads it, naming the publisher", "[hostile]") {
  Job job("[parallel]\nstage_actor = \"troupe.fabric_check\"\n");
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  ::setenv(kRedisPasswordVariable, server->password().c_str(), 1);
  // A member that publishes garbage: rank 1 of job "bad", with the job's own config hash.
  auto redis = server->connect();
  REQUIRE(redis.ok());
  RendezvousRequest liar{"bad", 1, 2, content_hash(slurp(job.cfg)), kTroupeVersion, "garbage\n",
                         std::chrono::milliseconds(5000)};
  REQUIRE(rendezvous_join(*redis, liar).ok());
  refused(job, troupe_bin() + " node " + job.cfg + " --redis " + server->url() + " --node-rank 0 --nodes 2 --job bad",
          "node 1 published a malformed endpoint");
}

TEST_CASE("P-5, UX-10: forged control and data messages without the job's key are refused and counted, control "
          "messages with it still meet the membership checks, and the job finishes",
          "[hostile][auth]") {
  Job job("[parallel]\nstage_actor = \"troupe.fabric_check\"\n");
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  ::setenv(kRedisPasswordVariable, server->password().c_str(), 1);
  const int port = free_loopback_port();
  const std::string node = troupe_bin() + " node " + job.cfg + " --redis " + server->url() + " --nodes 2 --job members";
  const std::string log1 = job.dir / "node1.log";
  RunResult r0, r1;
  std::thread n0([&] { r0 = run(node + " --node-rank 0 --hold 4"); });
  std::thread n1([&] { r1 = run("(" + node + " --node-rank 1 --port " + std::to_string(port) + " 2>" + log1 + ")"); });
  const bool joined = wait_for_text(log1, "joined job members", std::chrono::seconds(20));
  // A process that knows the node's address and the actors' ids, but not the job's key ...
  const std::string forge = std::string(FORGE_CONTROL_PATH) + " 127.0.0.1 " + std::to_string(port);
  auto without_key = run(forge);
  // ... and one that read the key from the job's Redis (whose password it has).
  auto redis = server->connect();
  REQUIRE(redis.ok());
  auto key = redis->command({"GET", "troupe:members:secret"});
  REQUIRE(key.ok());
  auto with_key = run(forge + " " + key->str);
  // UX-10: a process that read node 1's UCX worker address sends to its work
  // actor, as a rank outside the job and as a member's rank, without the key.
  auto published = redis->command({"HGET", "troupe:members:nodes", "1"});
  REQUIRE(published.ok());
  auto endpoint = decode_endpoint(published->str, "node 1");
  REQUIRE(endpoint.ok());
  REQUIRE_FALSE(endpoint->ucx.empty());
  const int k = static_cast<int>(endpoint->ucx.size()), world = 2 * k;  // work actors per node, in the job
  const std::string data = std::string(FORGE_DATA_PATH) + " " + to_hex(endpoint->ucx[0]) + " " + std::to_string(k);
  auto outsider = run(data + " " + std::to_string(world + 1) + " " + std::to_string(world + 2));
  auto posing = run(data + " 0 " + std::to_string(world));
  n0.join();
  n1.join();
  REQUIRE(joined);
  const std::string log = slurp(log1);
  INFO("forger: " << without_key.err << with_key.err << outsider.err << posing.err << "\nnode 0: " << r0.err
                  << "\nnode 1: " << log);
  CHECK(without_key.exit_code == 0);
  CHECK(with_key.exit_code == 0);
  CHECK(outsider.exit_code == 0);
  CHECK(posing.exit_code == 0);
  CHECK(r0.exit_code == 0);
  CHECK(r1.exit_code == 0);
  CHECK(log.find("refused a troupe.Plan whose MAC does not match the job's key") != std::string::npos);
  // All 9 of the first forger's control messages, none of the second's (those
  // met the membership checks instead); the outsider's 4 data messages, and
  // those of the one posing as rank 0 unless a check byte fell on one of the
  // 11 of 256 values a sweep keeps or calls stale (UX-11).
  const auto at = log.find("and refused ");
  REQUIRE(at != std::string::npos);
  const int refused = std::atoi(log.c_str() + at + std::string("and refused ").size());
  CHECK(refused >= 9 + 4);
  CHECK(refused <= 9 + 4 + 4);
  CHECK(log.find(" without the job's key", at) != std::string::npos);
  CHECK(log.find("dropped 0 stale and 9 non-member control messages") != std::string::npos);
  CHECK(log.find("forged") == std::string::npos);  // no forged reason was ever acted on
}

}  // namespace troupe::testing
