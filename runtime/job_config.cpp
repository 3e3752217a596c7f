// Job config parsing with toml++ against a table of known keys.
#include "runtime/job_config.hpp"

#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>
#include <toml++/toml.h>

namespace troupe {
namespace {

// Reads one TOML value into a config field; returns false on a type mismatch.
using Reader = std::function<bool(const toml::node&)>;

template <class T>
Reader integer(T& field) {
  return [&field](const toml::node& n) {
    auto v = n.value<std::int64_t>();
    if (!v || !n.is_integer()) return false;
    field = static_cast<T>(*v);
    return true;
  };
}
Reader real(double& field) {
  return [&field](const toml::node& n) {
    auto v = n.value<double>();
    if (!v) return false;
    field = *v;
    return true;
  };
}
Reader boolean(bool& field) {
  return [&field](const toml::node& n) {
    if (!n.is_boolean()) return false;
    field = *n.value<bool>();
    return true;
  };
}
Reader string(std::string& field) {
  return [&field](const toml::node& n) {
    if (!n.is_string()) return false;
    field = *n.value<std::string>();
    return true;
  };
}
Reader int_list(std::vector<int>& field) {
  return [&field](const toml::node& n) {
    const auto* arr = n.as_array();
    if (!arr) return false;
    field.clear();
    for (auto& e : *arr) {
      if (!e.is_integer()) return false;
      field.push_back(static_cast<int>(*e.value<std::int64_t>()));
    }
    return true;
  };
}

std::map<std::string, Reader> known_keys(JobConfig& c) {
  auto& m = c.model;
  auto& p = c.parallel;
  auto& t = c.train;
  auto& d = c.data;
  return {
      {"model.layers", integer(m.layers)}, {"model.heads", integer(m.heads)}, {"model.dim", integer(m.dim)},
      {"model.ctx", integer(m.ctx)}, {"model.vocab", integer(m.vocab)},
      {"model.parallel_block", boolean(m.parallel_block)}, {"model.window", integer(m.window)},
      {"parallel.dp", integer(p.dp)}, {"parallel.pp", integer(p.pp)}, {"parallel.tp", integer(p.tp)},
      {"parallel.schedule", string(p.schedule)}, {"parallel.chunks", integer(p.chunks)},
      {"parallel.microbatches", integer(p.microbatches)}, {"parallel.layers", int_list(p.layers)}, {"parallel.stage_actor", string(p.stage_actor)},
      {"parallel.bucket_mb", real(p.bucket_mb)}, {"parallel.max_activations", real(p.max_activations)},
      {"train.steps", integer(t.steps)}, {"train.batch", integer(t.batch)},
      {"train.optimizer", string(t.optimizer)}, {"train.lr", real(t.lr)}, {"train.min_lr", real(t.min_lr)},
      {"train.warmup_steps", integer(t.warmup_steps)}, {"train.lr_schedule", string(t.lr_schedule)},
      {"train.weight_decay", real(t.weight_decay)}, {"train.beta1", real(t.beta1)},
      {"train.beta2", real(t.beta2)}, {"train.eps", real(t.eps)}, {"train.grad_clip", real(t.grad_clip)},
      {"train.seed", integer(t.seed)}, {"train.threads", integer(t.threads)},
      {"train.eval_every", integer(t.eval_every)}, {"train.eval_windows", integer(t.eval_windows)},
      {"train.log_every", integer(t.log_every)}, {"data.train", string(d.train)}, {"data.val", string(d.val)},
  };
}

// Walks the table; every leaf must be a known key of the right type.
Status apply_table(const toml::table& table, const std::string& prefix, std::map<std::string, Reader>& keys,
                   const std::string& where) {
  for (auto& [k, node] : table) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const auto* sub = node.as_table()) {
      TROUPE_TRY(apply_table(*sub, key, keys, where));
      continue;
    }
    auto it = keys.find(key);
    if (it == keys.end()) return make_error(where, ": unknown key ", key);
    if (!it->second(node)) return make_error(where, ": key ", key, " has the wrong type");
  }
  return Status::success();
}

Status apply_override(const std::string& item, std::map<std::string, Reader>& keys) {
  const auto eq = item.find('=');
  if (eq == std::string::npos || eq == 0) return make_error("--set ", item, ": expected key=value");
  const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
  auto it = keys.find(key);
  if (it == keys.end()) return make_error("--set ", item, ": unknown key ", key);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", value}};  // a bare word: a string
  }
  if (!it->second(*parsed.get("v"))) return make_error("--set ", item, ": wrong type for ", key);
  return Status::success();
}

Status check_ranges(const JobConfig& c) {
  const auto& t = c.train;
  auto where = c.source;
  if (t.steps < 0) return make_error(where, ": train.steps must be >= 0");
  if (t.batch < 1) return make_error(where, ": train.batch must be >= 1");
  if (t.optimizer != "adamw" && t.optimizer != "lamb")
    return make_error(where, ": train.optimizer must be adamw or lamb (got ", t.optimizer, ")");
  if (t.lr_schedule != "cosine" && t.lr_schedule != "constant")
    return make_error(where, ": train.lr_schedule must be cosine or constant (got ", t.lr_schedule, ")");
  if (t.threads < 0) return make_error(where, ": train.threads must be >= 0");
  if (t.lr <= 0) return make_error(where, ": train.lr must be > 0");
  if (c.parallel.microbatches < 1) return make_error(where, ": parallel.microbatches must be >= 1");
  if (!(c.parallel.bucket_mb > 0)) return make_error(where, ": parallel.bucket_mb must be > 0");
  if (!(c.parallel.max_activations >= 0)) return make_error(where, ": parallel.max_activations must be >= 0");
  if (c.parallel.dp < 1 || c.parallel.pp < 1 || c.parallel.tp < 1)
    return make_error(where, ": parallel.dp, parallel.pp and parallel.tp must be >= 1");
  return Status::success();
}

}  // namespace

Expected<JobConfig> parse_job_config(const std::string& text, const std::string& source,
                                     const std::vector<std::string>& overrides) {
  JobConfig config;
  config.source = source;
  auto keys = known_keys(config);
  toml::table table;
  try {
    table = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    return make_error(source, ":", std::to_string(b.line), ":", std::to_string(b.column), ": ",
                      std::string(e.description()));
  }
  TROUPE_TRY(apply_table(table, "", keys, source));
  for (auto& o : overrides) TROUPE_TRY(apply_override(o, keys));
  TROUPE_TRY(check_ranges(config));
  return config;
}

Expected<JobConfig> load_job_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) return make_error(path, ": cannot open config");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_job_config(ss.str(), path, overrides);
}

int resolved_threads(const TrainSection& t) { return resolved_threads(t, 1); }

int resolved_threads(const TrainSection& t, int sharers) {
  if (t.threads > 0) return t.threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, sharers));
}

}  // namespace troupe
