#include "runtime/config/job_config.hpp"

#include <catch2/catch.hpp>

namespace troupe {

TEST_CASE("a config reads every section and --set overrides any key", "[config]") {
  const std::string text = R"(
[model]
layers = 8
dim = 512
parallel_block = true
[train]
steps = 50
lr = 3e-4
optimizer = "lamb"
[data]
train = "x/train.bin"
[parallel]
layers = [3, 5]
)";
  auto c = parse_job_config(text, "job.toml", {"train.steps=200", "data.val=y/val.bin", "train.lr=1"});
  REQUIRE(c.ok());
  CHECK(c->model.layers == 8);
  CHECK(c->model.dim == 512);
  CHECK(c->model.parallel_block);
  CHECK(c->train.steps == 200);
  CHECK(c->train.lr == 1.0);  // an integer is accepted for a real key
  CHECK(c->train.optimizer == "lamb");
  CHECK(c->data.train == "x/train.bin");
  CHECK(c->data.val == "y/val.bin");  // bare word read as a string
  CHECK(c->parallel.layers == std::vector<int>{3, 5});
  CHECK(c->model.heads == 4);  // default kept
}

TEST_CASE("config errors name the file, key or flag", "[config]") {
  auto unknown = parse_job_config("[train]\nstepz = 3\n", "job.toml");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message == "job.toml: unknown key train.stepz (did you mean train.steps?)");

  auto type = parse_job_config("[model]\nlayers = \"four\"\n", "job.toml");
  REQUIRE_FALSE(type.ok());
  CHECK(type.error().message == "job.toml: key model.layers has the wrong type (an integer is expected)");

  auto syntax = parse_job_config("[model\n", "job.toml");
  REQUIRE_FALSE(syntax.ok());
  CHECK(syntax.error().message.rfind("job.toml:1:", 0) == 0);

  auto flag = parse_job_config("", "job.toml", {"train.nope=1"});
  REQUIRE_FALSE(flag.ok());
  CHECK(flag.error().message == "--set train.nope=1: unknown key train.nope");

  auto noeq = parse_job_config("", "job.toml", {"train.steps"});
  REQUIRE_FALSE(noeq.ok());
  CHECK(noeq.error().message.find("expected key=value") != std::string::npos);

  auto range = parse_job_config("", "job.toml", {"train.optimizer=sgd"});
  REQUIRE_FALSE(range.ok());
  CHECK(range.error().message.find("train.optimizer") != std::string::npos);

  auto recompute = parse_job_config("[train]\nrecompute = \"all\"\n", "job.toml");
  REQUIRE_FALSE(recompute.ok());
  CHECK(recompute.error().message == "job.toml: train.recompute must be none or gelu (got all)");
  auto gelu = parse_job_config("", "job.toml", {"train.recompute=gelu"});
  REQUIRE(gelu.ok());
  CHECK(gelu->train.recompute == "gelu");

  auto transport = parse_job_config("", "job.toml", {"parallel.device_transport=gloo"});
  REQUIRE_FALSE(transport.ok());
  CHECK(transport.error().message == "job.toml: parallel.device_transport must be auto, nccl or staged (got gloo)");
  auto nccl_on_cpu = parse_job_config("[parallel]\ndevice_transport = \"nccl\"\n", "job.toml");
  REQUIRE_FALSE(nccl_on_cpu.ok());
  CHECK(nccl_on_cpu.error().message.find("needs train.device = \"cuda\"") != std::string::npos);
  auto nccl = parse_job_config("[parallel]\ndevice_transport = \"nccl\"\n[train]\ndevice = \"cuda\"\n", "job.toml");
  REQUIRE(nccl.ok());
  CHECK(nccl->parallel.device_transport == "nccl");

  auto missing = load_job_config("/nonexistent/job.toml");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("/nonexistent/job.toml") != std::string::npos);
}

}  // namespace troupe

namespace troupe {

TEST_CASE("every numeric key has a range: NaN, infinities, overflow and out-of-range values are refused", "[config]") {
  struct Case {
    const char* set;
    const char* message;
  };
  for (auto c : {Case{"train.lr=nan", "--set train.lr=nan: train.lr must be a finite number"},
                 Case{"train.beta1=1", "--set train.beta1=1: train.beta1 must be in [0, 0.999999]"},
                 Case{"train.grad_clip=nan", "--set train.grad_clip=nan: train.grad_clip must be a finite number"},
                 Case{"parallel.bucket_mb=inf", "--set parallel.bucket_mb=inf: parallel.bucket_mb must be a finite number"},
                 Case{"parallel.bucket_mb=0", "--set parallel.bucket_mb=0: parallel.bucket_mb must be in (0, 1.04858e+06]"},
                 Case{"model.dim=4294967424", "--set model.dim=4294967424: model.dim must be in [1, 65536]"},
                 Case{"train.seed=-1", "--set train.seed=-1: train.seed must be in [0, 9.22337e+18]"},
                 Case{"train.steps=1.5", "--set train.steps=1.5: train.steps has the wrong type (an integer is expected)"},
                 Case{"train.stepz=3", "--set train.stepz=3: unknown key train.stepz (did you mean train.steps?)"},
                 Case{"health.peer_timeout_ms=100", "job.toml: health.peer_timeout_ms must be at least twice health.heartbeat_ms"},
                 Case{"train.lr=1e-5", "job.toml: train.min_lr (0.000100) must not exceed train.lr (0.000010)"}}) {
    auto r = parse_job_config("", "job.toml", {c.set});
    INFO(c.set);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message == c.message);
  }
  // In the file too, naming the file.
  auto f = parse_job_config("[model]\nheads = 0\n", "job.toml");
  REQUIRE_FALSE(f.ok());
  CHECK(f.error().message == "job.toml: key model.heads must be in [1, 4096]");
  // A value that is not one TOML value is refused rather than half-read.
  auto two = parse_job_config("", "job.toml", {"train.steps=1\nx = 2"});
  REQUIRE_FALSE(two.ok());
}

}  // namespace troupe

namespace troupe {

TEST_CASE("fault drills from the config and --fault are read, and wrong ones are refused naming the entry", "[config][fault]") {
  auto ok = parse_job_config("[parallel]\npp = 2\n[[faults]]\nkind = \"slow\"\nactor = 1\nstep = 5\nfactor = 1.5\n"
                             "steps = 3\n[[faults]]\nkind = \"hang\"\nnode = 1\nstep = 7\ninstruction = 2\n",
                             "job.toml", {fault_override("kind=exception,actor=0,step=9")});
  REQUIRE(ok.ok());
  REQUIRE(ok->faults.size() == 3);
  CHECK(ok->faults[0].kind == "slow");
  CHECK(ok->faults[0].actor == 1);
  CHECK(ok->faults[0].factor == 1.5);
  CHECK(ok->faults[0].steps == 3);
  CHECK(ok->faults[1].node == 1);
  CHECK(ok->faults[1].instruction == 2);
  CHECK(ok->faults[2].kind == "exception");
  CHECK(ok->faults[2].step == 9);
  CHECK(ok->faults[2].when == "step");
  auto during = parse_job_config("", "job.toml", {fault_override("kind=kill,node=0,when=recovery")});
  REQUIRE(during.ok());
  CHECK(during->faults[0].when == "recovery");
  auto at_start = parse_job_config("[parallel]\npp = 2\n", "job.toml", {fault_override("kind=exception,actor=1,when=start")});
  REQUIRE(at_start.ok());
  CHECK(at_start->faults[0].when == "start");
  CHECK(at_start->faults[0].step == 0);

  const std::pair<const char*, const char*> bad[] = {
      {"[[faults]]\nkind = \"melt\"\nactor = 0\n", "job.toml: faults[0]: kind must be kill, hang, stall, slow, exception, lose or slow_persist (got \"melt\")"},
      {"[[faults]]\nkind = \"stall\"\nactr = 0\n", "job.toml: faults[0]: unknown key actr (did you mean actor?)"},
      {"[[faults]]\nkind = \"stall\"\nnode = 0\n", "job.toml: faults[0]: kind = stall needs actor (a stage actor's rank), not node"},
      {"[[faults]]\nkind = \"kill\"\n", "job.toml: faults[0]: kind = kill needs node or actor (one of them)"},
      {"[[faults]]\nkind = \"kill\"\nnode = 0\nfactor = 3\n", "job.toml: faults[0]: factor and steps apply to kind = slow only"},
      {"[[faults]]\nkind = \"slow\"\nactor = 0\nfactor = 1\n", "job.toml: faults[0]: key factor must be in (1, 1000]"},
      {"[[faults]]\nkind = \"kill\"\nnode = 0\nwhen = \"later\"\n", "job.toml: faults[0]: when must be step, start or recovery (got \"later\")"},
      {"[[faults]]\nkind = \"stall\"\nactor = 0\nwhen = \"recovery\"\n",
       "job.toml: faults[0]: when = recovery applies to kind = kill or hang of a node, without step or instruction"},
      {"[[faults]]\nkind = \"kill\"\nnode = 0\nstep = 4\nwhen = \"recovery\"\n",
       "job.toml: faults[0]: when = recovery applies to kind = kill or hang of a node, without step or instruction"},
      {"[[faults]]\nkind = \"lose\"\nactor = 0\nwhen = \"start\"\n",
       "job.toml: faults[0]: when = start applies to kind = kill, hang or exception, without instruction"},
      {"[[faults]]\nkind = \"exception\"\nactor = 0\ninstruction = 1\nwhen = \"start\"\n",
       "job.toml: faults[0]: when = start applies to kind = kill, hang or exception, without instruction"},
      {"[[faults]]\nkind = \"stall\"\nactor = 3\n", "job.toml: faults[0]: actor 3 is out of range (the job has 1 stage actors)"},
      {"faults = 3\n", "job.toml: faults must be an array of tables ([[faults]])"},
      {"faults = [1]\n", "job.toml: faults[0] must be a table ([[faults]])"},
  };
  for (auto [text, says] : bad) {
    auto r = parse_job_config(text, "job.toml");
    INFO(text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message == says);
  }
  auto flag = parse_job_config("", "job.toml", {fault_override("kind=stall,actor")});
  REQUIRE_FALSE(flag.ok());
  CHECK(flag.error().message == "--fault kind=stall,actor: expected key=value,key=value,...");
}

}  // namespace troupe

namespace troupe {

TEST_CASE("failure domains from the topology tables and recovery.max_simultaneous_losses are read, wrong ones refused",
          "[config][domains]") {
  const std::string racks = R"(
[recovery]
max_simultaneous_losses = 2
[[topology]]
domain = "rack-a"
nodes = [0, 1]
[[topology]]
domain = "rack-b"
nodes = [3]
)";
  auto c = parse_job_config(racks, "job.toml");
  REQUIRE(c.ok());
  CHECK(c->recovery.max_simultaneous_losses == 2);
  REQUIRE(c->topology.size() == 2);
  CHECK(*topology_domains(*c, 4) == std::vector<std::string>{"rack-a", "rack-a", "", "rack-b"});
  auto small = topology_domains(*c, 3);
  REQUIRE(!small);
  CHECK(small.error().message == "job.toml: topology: domain rack-b lists node 3 but the job has 3 nodes");
  CHECK(parse_job_config("", "job.toml")->recovery.max_simultaneous_losses == 1);
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"[[topology]]\ndomain = \"a\"\nnodes = [0]\n[[topology]]\ndomain = \"b\"\nnodes = [0]\n",
            "job.toml: topology[1]: node 0 is in domain a already"},
           {"[[topology]]\ndomain = \"a b\"\nnodes = [0]\n", "job.toml: topology[0]: domain: a failure domain's name must be printable ASCII without spaces"},
           {"[[topology]]\nnodes = [0]\n", "job.toml: topology[0]: needs domain (a name) and nodes (their ranks)"},
           {"[[topology]]\ndomain = \"a\"\nnode = [0]\n", "job.toml: topology[0]: unknown key node (did you mean nodes?)"},
           {"[[topology]]\ndomain = \"a\"\nnodes = [-1]\n", "job.toml: topology[0]: key nodes has an entry that must be in [0, "},
           {"topology = 3\n", "job.toml: topology must be an array of tables ([[topology]])"},
           {"[recovery]\nmax_simultaneous_losses = 0\n", ""}}) {
    auto bad = parse_job_config(text, "job.toml");
    INFO(text);
    REQUIRE(!bad);
    CHECK(bad.error().message.rfind(message, 0) == 0);  // starts with it
    CHECK(bad.error().message.find('\n') == std::string::npos);
  }
}

}  // namespace troupe
