// Job config parsing with toml++ against a table of known keys, each with its
// type and range.
#include "runtime/config/job_config.hpp"
#include "runtime/config/failure_domains.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <thread>
#include <toml++/toml.h>

namespace troupe {
namespace {

// Reads one TOML value into a config field; returns an empty string on
// success, else what is wrong with the value ("has the wrong type", "must be
// in [1, 64]").
using Reader = std::function<std::string(const toml::node&)>;

std::string range_text(double lo, double hi, bool lo_open = false) {
  auto num = [](double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  return "must be in " + std::string(lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + "]";
}

template <class T>
Reader integer(T& field, std::int64_t lo, std::int64_t hi) {
  return [&field, lo, hi](const toml::node& n) -> std::string {
    if (!n.is_integer()) return "has the wrong type (an integer is expected)";
    const std::int64_t v = *n.value<std::int64_t>();
    if (v < lo || v > hi) return range_text(static_cast<double>(lo), static_cast<double>(hi));
    field = static_cast<T>(v);
    return {};
  };
}
// A real in [lo, hi] (or (lo, hi] when lo_open); NaN and infinities never pass.
Reader real(double& field, double lo, double hi, bool lo_open = false) {
  return [&field, lo, hi, lo_open](const toml::node& n) -> std::string {
    if (!n.is_number()) return "has the wrong type (a number is expected)";
    const double v = *n.value<double>();
    if (!std::isfinite(v)) return "must be a finite number";
    if (v < lo || v > hi || (lo_open && v == lo)) return range_text(lo, hi, lo_open);
    field = v;
    return {};
  };
}
Reader boolean(bool& field) {
  return [&field](const toml::node& n) -> std::string {
    if (!n.is_boolean()) return "has the wrong type (true or false is expected)";
    field = *n.value<bool>();
    return {};
  };
}
Reader string(std::string& field) {
  return [&field](const toml::node& n) -> std::string {
    if (!n.is_string()) return "has the wrong type (a string is expected)";
    field = *n.value<std::string>();
    return {};
  };
}
Reader int_list(std::vector<int>& field, std::int64_t lo, std::int64_t hi) {
  return [&field, lo, hi](const toml::node& n) -> std::string {
    const auto* arr = n.as_array();
    if (!arr) return "has the wrong type (a list of integers is expected)";
    std::vector<int> out;
    for (auto& e : *arr) {
      if (!e.is_integer()) return "has the wrong type (a list of integers is expected)";
      const std::int64_t v = *e.value<std::int64_t>();
      if (v < lo || v > hi) return "has an entry that " + range_text(static_cast<double>(lo), static_cast<double>(hi));
      out.push_back(static_cast<int>(v));
    }
    field = std::move(out);
    return {};
  };
}

Reader string_list(std::vector<std::string>& field) {
  return [&field](const toml::node& n) -> std::string {
    const auto* arr = n.as_array();
    if (!arr) return "has the wrong type (a list of strings is expected)";
    std::vector<std::string> out;
    for (auto& e : *arr) {
      if (!e.is_string()) return "has the wrong type (a list of strings is expected)";
      out.push_back(*e.value<std::string>());
      if (out.back().empty()) return "has an empty entry";
    }
    field = std::move(out);
    return {};
  };
}

constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr std::int64_t kMaxI64 = std::numeric_limits<std::int64_t>::max();

std::map<std::string, Reader> known_keys(JobConfig& c) {
  auto& m = c.model;
  auto& p = c.parallel;
  auto& t = c.train;
  auto& d = c.data;
  auto& h = c.health;
  auto& k = c.checkpoint;
  auto& rc = c.recovery;
  return {
      {"model.layers", integer(m.layers, 1, 4096)},
      {"model.heads", integer(m.heads, 1, 4096)},
      {"model.dim", integer(m.dim, 1, 1 << 16)},
      {"model.ctx", integer(m.ctx, 1, 1 << 20)},
      {"model.vocab", integer(m.vocab, 1, 1 << 24)},
      {"model.parallel_block", boolean(m.parallel_block)},
      {"model.window", integer(m.window, 0, 1 << 20)},
      {"parallel.dp", integer(p.dp, 1, 1 << 16)},
      {"parallel.pp", integer(p.pp, 1, 1 << 12)},
      {"parallel.tp", integer(p.tp, 1, 1 << 10)},
      {"parallel.sequence_parallel", boolean(p.sequence_parallel)},
      {"parallel.tp_overlap_chunks", integer(p.tp_overlap_chunks, 1, 64)},
      {"parallel.schedule", string(p.schedule)},
      {"parallel.chunks", integer(p.chunks, 1, 64)},
      {"parallel.microbatches", integer(p.microbatches, 1, 1 << 16)},
      {"parallel.layers", int_list(p.layers, 1, 4096)},
      {"parallel.stage_actor", string(p.stage_actor)},
      {"parallel.bucket_mb", real(p.bucket_mb, 0, 1 << 20, true)},
      {"parallel.max_activations", real(p.max_activations, 0, 1e6)},
      {"parallel.device_transport", string(p.device_transport)},
      {"train.steps", integer(t.steps, 0, kMaxInt / 2)},
      {"train.batch", integer(t.batch, 1, 1 << 20)},
      {"train.optimizer", string(t.optimizer)},
      {"train.lr", real(t.lr, 0, 10, true)},
      {"train.min_lr", real(t.min_lr, 0, 10)},
      {"train.warmup_steps", integer(t.warmup_steps, 0, kMaxInt / 2)},
      {"train.lr_schedule", string(t.lr_schedule)},
      {"train.weight_decay", real(t.weight_decay, 0, 100)},
      {"train.beta1", real(t.beta1, 0, 0.999999)},
      {"train.beta2", real(t.beta2, 0, 0.999999999)},
      {"train.eps", real(t.eps, 0, 1, true)},
      {"train.grad_clip", real(t.grad_clip, 0, 1e9)},
      {"train.seed", integer(t.seed, 0, kMaxI64)},
      {"train.threads", integer(t.threads, 0, 4096)},
      {"train.device", string(t.device)},
      {"train.precision", string(t.precision)},
      {"train.cuda_graphs", boolean(t.cuda_graphs)},
      {"train.recompute", string(t.recompute)},
      {"train.eval_every", integer(t.eval_every, 0, kMaxInt / 2)},
      {"train.eval_windows", integer(t.eval_windows, 0, 1 << 24)},
      {"train.log_every", integer(t.log_every, 0, kMaxInt / 2)},
      {"data.train", string(d.train)},
      {"data.val", string(d.val)},
      {"health.heartbeat_ms", integer(h.heartbeat_ms, 10, 60000)},
      {"health.peer_timeout_ms", integer(h.peer_timeout_ms, 50, 3600000)},
      {"health.miss_limit", integer(h.miss_limit, 1, 1000)},
      {"health.progress_timeout_ms", integer(h.progress_timeout_ms, 10, 86400000)},
      {"health.straggler_threshold", real(h.straggler_threshold, 0, 1, true)},
      {"health.straggler_steps", integer(h.straggler_steps, 1, 1000000)},
      {"health.straggler_window", integer(h.straggler_window, 3, 100000)},
      {"health.relay_group", integer(h.relay_group, 0, 1000000)},
      {"health.rendezvous_timeout_ms", integer(h.rendezvous_timeout_ms, 100, 86400000)},
      {"health.wait_timeout_ms", integer(h.wait_timeout_ms, 100, 86400000)},
      {"checkpoint.dir", string(k.dir)},
      {"checkpoint.every", integer(k.every, 0, kMaxInt / 2)},
      {"checkpoint.keep", integer(k.keep, 1, 1 << 20)},
      {"recovery.max_failures_per_hour", integer(rc.max_failures_per_hour, 0, 1000000)},
      {"recovery.snapshot_every", integer(rc.snapshot_every, 1, kMaxInt / 2)},
      {"recovery.restarts", integer(rc.restarts, 0, 1000000)},
      {"recovery.buddy", boolean(rc.buddy)},
      {"recovery.spares", integer(rc.spares, 0, 1024)},
      {"recovery.max_simultaneous_losses", integer(rc.max_simultaneous_losses, 1, 1 << 20)},
      {"plugins.paths", string_list(c.plugins.paths)},
  };
}

std::map<std::string, Reader> fault_keys(FaultSpec& f) {
  return {{"kind", string(f.kind)},
          {"node", integer(f.node, 0, kMaxInt)},
          {"actor", integer(f.actor, 0, kMaxInt)},
          {"step", integer(f.step, 0, kMaxInt)},
          {"instruction", integer(f.instruction, 0, kMaxInt)},
          {"factor", real(f.factor, 1, 1000, true)},
          {"steps", integer(f.steps, 1, kMaxInt)},
          {"ms", integer(f.ms, 1, 3600000)},
          {"when", string(f.when)}};
}

// Edit distance, for suggesting the key a typo meant.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string unknown_key(const std::string& key, const std::map<std::string, Reader>& keys) {
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (auto& [k, _] : keys)
    if (auto d = edit_distance(key, k); d < best_d) best_d = d, best = k;
  std::string out = "unknown key " + key;
  if (best_d <= std::max<std::size_t>(2, key.size() / 4)) out += " (did you mean " + best + "?)";
  return out;
}

// One "key=value" from the command line (TOML syntax for the value; a bare
// word is a string) into `keys`; errors start with `where`.
Status apply_assignment(const std::string& item, std::map<std::string, Reader>& keys, const std::string& where,
                        const char* expected) {
  const auto eq = item.find('=');
  if (eq == std::string::npos || eq == 0) return make_error(where, ": expected ", expected);
  const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
  auto it = keys.find(key);
  if (it == keys.end()) return make_error(where, ": ", unknown_key(key, keys));
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", value}};  // a bare word: a string
  }
  const toml::node* v = parsed.get("v");
  if (parsed.size() != 1 || !v) return make_error(where, ": expected one value for ", key);
  if (auto wrong = it->second(*v); !wrong.empty()) return make_error(where, ": ", key, " ", wrong);
  return Status::success();
}

// A fault drill's keys and their relations; `where` names it ("job.toml: faults[1]", "--fault ...").
Status check_fault(const FaultSpec& f, const std::string& where) {
  static const char* kinds[] = {"kill", "hang", "stall", "slow", "exception", "lose", "slow_persist"};
  if (std::find(std::begin(kinds), std::end(kinds), f.kind) == std::end(kinds))
    return make_error(where, ": kind must be kill, hang, stall, slow, exception, lose or slow_persist (got \"", f.kind,
                      "\")");
  if ((f.kind == "slow_persist") != (f.ms > 0))
    return make_error(where, ": ms applies to kind = slow_persist, which needs it");
  if (f.kind == "slow_persist") {
    if (f.node < 0 || f.actor >= 0 || f.instruction >= 0 || f.when != "step")
      return make_error(where, ": kind = slow_persist needs node (whose checkpoint writer) and step, nothing else");
    return Status::success();
  }
  const bool whole_node = f.kind == "kill" || f.kind == "hang";
  if (whole_node && (f.node < 0) == (f.actor < 0))
    return make_error(where, ": kind = ", f.kind, " needs node or actor (one of them)");
  if (!whole_node && (f.actor < 0 || f.node >= 0))
    return make_error(where, ": kind = ", f.kind, " needs actor (a stage actor's rank), not node");
  if (f.kind != "slow" && (f.factor != 2 || f.steps != 1))
    return make_error(where, ": factor and steps apply to kind = slow only");
  if (f.when != "step" && f.when != "start" && f.when != "recovery")
    return make_error(where, ": when must be step, start or recovery (got \"", f.when, "\")");
  // A stall or a lost message in a start barrier would wait out health.wait_timeout_ms:
  // actors are judged only from their first step on (H-3).
  if (f.when == "start" && (f.kind == "slow" || f.kind == "stall" || f.kind == "lose" || f.instruction >= 0))
    return make_error(where, ": when = start applies to kind = kill, hang or exception, without instruction");
  if (f.when == "recovery" && (!whole_node || f.node < 0 || f.step != 0 || f.instruction >= 0))
    return make_error(where, ": when = recovery applies to kind = kill or hang of a node, without step or instruction");
  return Status::success();
}

// [[faults]]: an array of tables, each with the keys of fault_keys.
Status apply_faults(const toml::node& node, JobConfig& c, const std::string& where) {
  const auto* arr = node.as_array();
  if (!arr) return make_error(where, ": faults must be an array of tables ([[faults]])");
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const std::string at = where + ": faults[" + std::to_string(i) + "]";
    const auto* table = arr->get(i)->as_table();
    if (!table) return make_error(at, " must be a table ([[faults]])");
    FaultSpec f;
    auto keys = fault_keys(f);
    for (auto& [k, v] : *table) {
      auto it = keys.find(std::string(k.str()));
      if (it == keys.end()) return make_error(at, ": ", unknown_key(std::string(k.str()), keys));
      if (auto wrong = it->second(v); !wrong.empty()) return make_error(at, ": key ", it->first, " ", wrong);
    }
    TROUPE_TRY(check_fault(f, at));
    c.faults.push_back(f);
  }
  return Status::success();
}

// --fault kind=slow,actor=1,step=5,factor=1.5: the keys of [[faults]], comma-separated.
Status apply_fault_flag(const std::string& text, JobConfig& c) {
  const std::string where = "--fault " + text;
  FaultSpec f;
  auto keys = fault_keys(f);
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');)
    TROUPE_TRY(apply_assignment(item, keys, where, "key=value,key=value,..."));
  TROUPE_TRY(check_fault(f, where));
  c.faults.push_back(f);
  return Status::success();
}

// [[topology]]: an array of tables, each a domain and its nodes; a node in one domain at most.
Status apply_topology(const toml::node& node, JobConfig& c, const std::string& where) {
  const auto* arr = node.as_array();
  if (!arr) return make_error(where, ": topology must be an array of tables ([[topology]])");
  std::map<int, std::string> seen;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const std::string at = where + ": topology[" + std::to_string(i) + "]";
    const auto* table = arr->get(i)->as_table();
    if (!table) return make_error(at, " must be a table ([[topology]])");
    TopologyDomain d;
    std::map<std::string, Reader> keys{{"domain", string(d.domain)}, {"nodes", int_list(d.nodes, 0, 1 << 20)}};
    for (auto& [k, v] : *table) {
      auto it = keys.find(std::string(k.str()));
      if (it == keys.end()) return make_error(at, ": ", unknown_key(std::string(k.str()), keys));
      if (auto wrong = it->second(v); !wrong.empty()) return make_error(at, ": key ", it->first, " ", wrong);
    }
    if (d.domain.empty() || d.nodes.empty()) return make_error(at, ": needs domain (a name) and nodes (their ranks)");
    TROUPE_TRY(check_domain_name(d.domain, at + ": domain"));
    for (int n : d.nodes)
      if (auto [it, fresh] = seen.emplace(n, d.domain); !fresh)
        return make_error(at, ": node ", std::to_string(n), " is in domain ", it->second, " already");
    c.topology.push_back(std::move(d));
  }
  return Status::success();
}

// Walks the table; every leaf must be a known key with a value in range.
Status apply_table(const toml::table& table, const std::string& prefix, std::map<std::string, Reader>& keys,
                   const std::string& where, JobConfig& c) {
  for (auto& [k, node] : table) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (key == "faults") {
      TROUPE_TRY(apply_faults(node, c, where));
      continue;
    }
    if (key == "topology") {
      TROUPE_TRY(apply_topology(node, c, where));
      continue;
    }
    if (const auto* sub = node.as_table()) {
      TROUPE_TRY(apply_table(*sub, key, keys, where, c));
      continue;
    }
    auto it = keys.find(key);
    if (it == keys.end()) return make_error(where, ": ", unknown_key(key, keys));
    if (auto wrong = it->second(node); !wrong.empty()) return make_error(where, ": key ", key, " ", wrong);
  }
  return Status::success();
}

Status apply_override(const std::string& item, std::map<std::string, Reader>& keys) {
  return apply_assignment(item, keys, "--set " + item, "key=value");
}

// Constraints between keys (each key's own range is checked as it is read).
Status check_relations(const JobConfig& c) {
  const auto& t = c.train;
  const auto& where = c.source;
  if (t.optimizer != "adamw" && t.optimizer != "lamb")
    return make_error(where, ": train.optimizer must be adamw or lamb (got ", t.optimizer, ")");
  if (t.lr_schedule != "cosine" && t.lr_schedule != "constant")
    return make_error(where, ": train.lr_schedule must be cosine or constant (got ", t.lr_schedule, ")");
  if (t.device != "cpu" && t.device != "cuda")
    return make_error(where, ": train.device must be cpu or cuda (got ", t.device, ")");
  if (t.precision != "fp32" && t.precision != "bf16")
    return make_error(where, ": train.precision must be fp32 or bf16 (got ", t.precision, ")");
  if (t.recompute != "none" && t.recompute != "gelu")
    return make_error(where, ": train.recompute must be none or gelu (got ", t.recompute, ")");
  const std::string& transport = c.parallel.device_transport;
  if (transport != "auto" && transport != "nccl" && transport != "staged")
    return make_error(where, ": parallel.device_transport must be auto, nccl or staged (got ", transport, ")");
  if (transport == "nccl" && t.device != "cuda")
    return make_error(where, ": parallel.device_transport = \"nccl\" needs train.device = \"cuda\" (NCCL moves GPU memory)");
  if (t.min_lr > t.lr)
    return make_error(where, ": train.min_lr (", std::to_string(t.min_lr), ") must not exceed train.lr (",
                      std::to_string(t.lr), ")");
  if (static_cast<std::int64_t>(t.batch) * c.model.ctx > (1 << 26))
    return make_error(where, ": train.batch x model.ctx must be at most 2^26 tokens per microbatch");
  if (static_cast<std::int64_t>(c.parallel.dp) * c.parallel.pp * c.parallel.tp > (1 << 20))
    return make_error(where, ": parallel.dp x parallel.pp x parallel.tp must be at most 2^20 actors");
  if (c.checkpoint.every > 0 && c.checkpoint.dir.empty())
    return make_error(where, ": checkpoint.every needs checkpoint.dir (where to write them)");
  const std::int64_t actors = static_cast<std::int64_t>(c.parallel.dp) * c.parallel.pp * c.parallel.tp;
  for (std::size_t i = 0; i < c.faults.size(); ++i)
    if (c.faults[i].actor >= actors)
      return make_error(where, ": faults[", std::to_string(i), "]: actor ", std::to_string(c.faults[i].actor),
                        " is out of range (the job has ", std::to_string(actors), " stage actors)");
  if (c.health.peer_timeout_ms < 2 * c.health.heartbeat_ms)
    return make_error(where, ": health.peer_timeout_ms must be at least twice health.heartbeat_ms");
  return Status::success();
}

}  // namespace

Expected<JobConfig> parse_job_config(const std::string& text, const std::string& source,
                                     const std::vector<std::string>& overrides) {
  JobConfig config;
  config.source = source;
  config.text = text;
  config.overrides = overrides;
  auto keys = known_keys(config);
  toml::table table;
  try {
    table = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    return make_error(source, ":", std::to_string(b.line), ":", std::to_string(b.column), ": ",
                      std::string(e.description()));
  }
  TROUPE_TRY(apply_table(table, "", keys, source, config));
  const std::string add_fault = fault_override("");
  for (auto& o : overrides) {
    if (o.rfind(add_fault, 0) == 0) TROUPE_TRY(apply_fault_flag(o.substr(add_fault.size()), config));
    else TROUPE_TRY(apply_override(o, keys));
  }
  TROUPE_TRY(check_relations(config));
  return config;
}

Expected<JobConfig> load_job_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) return make_error(path, ": cannot open config");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return make_error(path, ": cannot read config");
  return parse_job_config(ss.str(), path, overrides);
}

Expected<std::vector<std::string>> topology_domains(const JobConfig& c, int nodes) {
  std::vector<std::string> out(static_cast<std::size_t>(std::max(nodes, 0)));
  for (const TopologyDomain& d : c.topology)
    for (int n : d.nodes) {
      if (n >= nodes)
        return make_error(c.source, ": topology: domain ", d.domain, " lists node ", std::to_string(n), " but the job has ",
                          std::to_string(nodes), " node", nodes == 1 ? "" : "s");
      out[static_cast<std::size_t>(n)] = d.domain;
    }
  return out;
}

int resolved_threads(const TrainSection& t) { return resolved_threads(t, 1); }

int resolved_threads(const TrainSection& t, int sharers) {
  if (t.threads > 0) return t.threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, sharers));
}

}  // namespace troupe
