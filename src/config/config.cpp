#include "shardtopk/config.hpp"

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "common/parse.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {
namespace {

// One setter per key: the single place that knows each key's type and range. Values arrive as
// text (from YAML scalars or --set key=value overrides), so both paths share the checks.
using Setter = std::function<void(Config&, const std::string& value, const std::string& where)>;

long long parse_int(const std::string& key, const std::string& v, long long lo, long long hi,
                    const std::string& where) {
  const long long x = parse_integer(v, where + "key '" + key + "'");
  SHARDTOPK_EXPECTS(x >= lo && x <= hi, where, "key '", key, "': value ", x, " out of range (allowed: ",
                    lo, " .. ", hi, ")");
  return x;
}

double parse_positive_double(const std::string& key, const std::string& v, const std::string& where) {
  const double x = parse_number(v, where + "key '" + key + "'");
  SHARDTOPK_EXPECTS(std::isfinite(x) && x > 0, where, "key '", key, "': value ", v,
                    " out of range (allowed: a number > 0)");
  return x;
}

bool parse_bool(const std::string& key, const std::string& v, const std::string& where) {
  if (v == "true") return true;
  if (v == "false") return false;
  throw Error(where + "key '" + key + "': expected true or false, got '" + v + "'");
}

std::string nonempty(const std::string& key, const std::string& v, const std::string& where) {
  SHARDTOPK_EXPECTS(!v.empty(), where, "key '", key, "': must not be empty");
  return v;
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> s = {
      {"corpus.path", [](Config& c, const std::string& v, const std::string& w) {
         c.corpus.path = nonempty("corpus.path", v, w);
       }},
      {"corpus.dataset", [](Config& c, const std::string& v, const std::string& w) {
         c.corpus.dataset = nonempty("corpus.dataset", v, w);
       }},
      {"corpus.ids_dataset", [](Config& c, const std::string& v, const std::string&) {
         c.corpus.ids_dataset = v;
       }},
      {"search.metric", [](Config& c, const std::string& v, const std::string& w) {
         if (v == "auto" || v.empty()) {
           c.search.metric.reset();
         } else {
           try {
             c.search.metric = parse_metric(v, w + "key 'search.metric'");
           } catch (const Error&) {
             throw Error(w + "key 'search.metric': unknown metric '" + v +
                         "' (allowed: inner_product, cosine, l2, auto)");
           }
         }
       }},
      {"search.k_max", [](Config& c, const std::string& v, const std::string& w) {
         c.search.k_max = static_cast<int>(parse_int("search.k_max", v, 1, 1 << 20, w));
       }},
      {"search.batch_max", [](Config& c, const std::string& v, const std::string& w) {
         c.search.batch_max = static_cast<int>(parse_int("search.batch_max", v, 1, 1 << 20, w));
       }},
      {"engine.backend", [](Config& c, const std::string& v, const std::string& w) {
         c.engine.backend = parse_engine_backend(v, w + "key 'engine.backend'");
       }},
      {"engine.dtype", [](Config& c, const std::string& v, const std::string& w) {
         c.engine.dtype = parse_dtype(v, w + "key 'engine.dtype'");
       }},
      {"engine.threads", [](Config& c, const std::string& v, const std::string& w) {
         c.engine.threads = static_cast<int>(parse_int("engine.threads", v, 0, 4096, w));
       }},
      {"engine.read_chunk_rows", [](Config& c, const std::string& v, const std::string& w) {
         c.engine.read_chunk_rows = parse_int("engine.read_chunk_rows", v, 1, 1LL << 31, w);
       }},
      {"io.direct_reads", [](Config& c, const std::string& v, const std::string& w) {
         c.io.direct_reads = parse_bool("io.direct_reads", v, w);
       }},
      {"io.f16c", [](Config& c, const std::string& v, const std::string& w) {
         c.io.f16c = parse_bool("io.f16c", v, w);
       }},
      {"comm.backend", [](Config& c, const std::string& v, const std::string& w) {
         c.comm.backend = parse_comm_backend(v, w + "key 'comm.backend'");
       }},
      {"comm.timeout_s", [](Config& c, const std::string& v, const std::string& w) {
         c.comm.timeout_s = parse_positive_double("comm.timeout_s", v, w);
       }},
      {"service.host", [](Config& c, const std::string& v, const std::string& w) {
         c.service.host = nonempty("service.host", v, w);
         SHARDTOPK_EXPECTS(v.find_first_of(" \t/") == std::string::npos, w, "key 'service.host': '", v,
                           "' is not a host name or IP address (e.g. 127.0.0.1, 0.0.0.0)");
       }},
      {"service.port", [](Config& c, const std::string& v, const std::string& w) {
         c.service.port = static_cast<int>(parse_int("service.port", v, 0, 65535, w));
       }},
      {"service.batch_window_us", [](Config& c, const std::string& v, const std::string& w) {
         c.service.batch_window_us = static_cast<int>(parse_int("service.batch_window_us", v, 0, 1000000, w));
       }},
      {"service.max_body_bytes", [](Config& c, const std::string& v, const std::string& w) {
         c.service.max_body_bytes = parse_int("service.max_body_bytes", v, 1024, 1LL << 32, w);
       }},
      {"service.threads", [](Config& c, const std::string& v, const std::string& w) {
         c.service.threads = static_cast<int>(parse_int("service.threads", v, 1, 4096, w));
       }},
  };
  return s;
}

std::string allowed_keys() {
  std::string out;
  for (const auto& kv : setters()) out += (out.empty() ? "" : ", ") + kv.first;
  return out;
}

void set_key(Config& c, const std::string& key, const std::string& value, const std::string& where) {
  auto it = setters().find(key);
  SHARDTOPK_EXPECTS(it != setters().end(), where, "unknown key '", key, "' (known keys: ",
                    allowed_keys(), ")");
  it->second(c, value, where);
}

void walk(Config& c, const YAML::Node& node, const std::string& prefix, const std::string& where) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    SHARDTOPK_EXPECTS(it->first.IsScalar(), where, "a key ", (prefix.empty() ? "at the top level" : "in '" + prefix + "'"),
                      " is a ", (it->first.IsSequence() ? "list" : it->first.IsMap() ? "mapping" : "null"),
                      " (line ", it->first.Mark().line + 1, "); keys are plain names like search.k_max");
    const std::string name = it->first.as<std::string>();
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    const YAML::Node v = it->second;  // a copy: a reference to the iterator's temporary dangles
    if (v.IsMap()) {
      bool is_section = false;
      for (const auto& kv : setters())
        if (kv.first.rfind(key + ".", 0) == 0) is_section = true;
      SHARDTOPK_EXPECTS(is_section, where, "unknown key '", key, "' (known keys: ", allowed_keys(), ")");
      walk(c, v, key, where);
    } else if (v.IsScalar()) {
      set_key(c, key, v.Scalar(), where);
    } else if (v.IsNull()) {
      set_key(c, key, "", where);
    } else {
      throw Error(where + "key '" + key + "': expected a single value, got a list");
    }
  }
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& source) {
  const std::string where = source + ": ";
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw Error(where + "invalid YAML: " + e.what());
  }
  Config c;
  c.source = source;
  if (root.IsNull()) return c;
  SHARDTOPK_EXPECTS(root.IsMap(), where, "expected a mapping of sections (corpus, search, engine, comm)");
  walk(c, root, "", where);
  return c;
}

Config load_config(const std::string& path) {
  std::ifstream in(path);
  SHARDTOPK_EXPECTS(in.good(), "config file '", path, "' cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path);
}

void apply_override(Config& cfg, const std::string& kv) {
  const auto eq = kv.find('=');
  SHARDTOPK_EXPECTS(eq != std::string::npos && eq > 0, "override '", kv,
                    "': expected key=value (e.g. search.k_max=100)");
  set_key(cfg, kv.substr(0, eq), kv.substr(eq + 1), "override: ");
}

void validate(const Config& cfg) {
  const std::string where = cfg.source.empty() ? "" : cfg.source + ": ";
  SHARDTOPK_EXPECTS(!cfg.corpus.path.empty(), where, "key 'corpus.path' is required (the corpus HDF5 file)");
  SHARDTOPK_EXPECTS(!(cfg.engine.backend == EngineBackend::kCpu && cfg.comm.backend == CommBackend::kNccl),
                    where, "engine.backend 'cpu' with comm.backend 'nccl' is not supported: NCCL moves "
                    "device buffers; use comm.backend 'mpi' (or 'auto') with the CPU engine");
}

std::string to_yaml(const Config& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "corpus" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "path" << YAML::Value << c.corpus.path;
  out << YAML::Key << "dataset" << YAML::Value << c.corpus.dataset;
  out << YAML::Key << "ids_dataset" << YAML::Value << c.corpus.ids_dataset;
  out << YAML::EndMap;
  out << YAML::Key << "search" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "metric" << YAML::Value << (c.search.metric ? to_string(*c.search.metric) : "auto");
  out << YAML::Key << "k_max" << YAML::Value << c.search.k_max;
  out << YAML::Key << "batch_max" << YAML::Value << c.search.batch_max;
  out << YAML::EndMap;
  out << YAML::Key << "engine" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "backend" << YAML::Value << to_string(c.engine.backend);
  out << YAML::Key << "dtype" << YAML::Value << to_string(c.engine.dtype);
  out << YAML::Key << "threads" << YAML::Value << c.engine.threads;
  out << YAML::Key << "read_chunk_rows" << YAML::Value << c.engine.read_chunk_rows;
  out << YAML::EndMap;
  out << YAML::Key << "io" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "direct_reads" << YAML::Value << c.io.direct_reads;
  out << YAML::Key << "f16c" << YAML::Value << c.io.f16c;
  out << YAML::EndMap;
  out << YAML::Key << "comm" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "backend" << YAML::Value << to_string(c.comm.backend);
  out << YAML::Key << "timeout_s" << YAML::Value << c.comm.timeout_s;
  out << YAML::EndMap;
  out << YAML::Key << "service" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "host" << YAML::Value << c.service.host;
  out << YAML::Key << "port" << YAML::Value << c.service.port;
  out << YAML::Key << "batch_window_us" << YAML::Value << c.service.batch_window_us;
  out << YAML::Key << "max_body_bytes" << YAML::Value << c.service.max_body_bytes;
  out << YAML::Key << "threads" << YAML::Value << c.service.threads;
  out << YAML::EndMap;
  out << YAML::EndMap;
  return out.c_str();
}

}  // namespace shardtopk
