#include "shardtopk/config.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "core/parse.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"

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

// A number of seconds in [0, hi].
double parse_seconds(const std::string& key, const std::string& v, long long hi, const std::string& where) {
  const double x = parse_number(v, where + "key '" + key + "'");
  SHARDTOPK_EXPECTS(std::isfinite(x) && x >= 0 && x <= static_cast<double>(hi), where, "key '", key, "': value ", v,
                    " out of range (allowed: 0 .. ", hi, " seconds)");
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

// corpus.attributes from comma-separated text ("a, meta/b"; YAML lists arrive joined by walk());
// on the command line a YAML flow list is taken too (--set corpus.attributes='[a, "meta/b"]').
std::vector<std::string> parse_attribute_list(const std::string& text, const std::string& where) {
  const std::string key = "corpus.attributes";
  auto trim = [](const std::string& t) {
    const auto b = t.find_first_not_of(" \t"), e = t.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : t.substr(b, e - b + 1);
  };
  std::string v = text;
  const std::string t = trim(text);
  SHARDTOPK_EXPECTS(t.empty() || (t.front() == '[') == (t.back() == ']'), where, "key '", key, "': '",
                    text, "' has an unmatched bracket (a list is [tenant, meta/year], or tenant,meta/year)");
  if (t.size() >= 2 && t.front() == '[' && t.back() == ']') v = t.substr(1, t.size() - 2);
  std::vector<std::string> out;
  if (v.find_first_not_of(" \t") == std::string::npos) return out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    if (item.size() >= 2 && (item.front() == '"' || item.front() == '\'') && item.back() == item.front())
      item = item.substr(1, item.size() - 2);
    SHARDTOPK_EXPECTS(!attribute_name(item).empty(), where, "key '", key, "': '", v,
                      "' has an empty dataset path (expected dataset paths such as tenant, meta/year)");
    for (const auto& prev : out)
      SHARDTOPK_EXPECTS(attribute_name(prev) != attribute_name(item), where, "key '", key, "': '", prev, "' and '",
                        item, "' are both named '", attribute_name(item),
                        "' (an attribute's name is the last component of its path; names must be unique)");
    out.push_back(item);
  }
  SHARDTOPK_EXPECTS(!v.empty() && v.back() != ',', where, "key '", key, "': '", v, "' ends with a comma");
  SHARDTOPK_EXPECTS(out.size() <= static_cast<std::size_t>(kFilterMaxAttributes), where, "key '", key, "': ",
                    out.size(), " attributes, at most ", kFilterMaxAttributes, " are supported");
  return out;
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
      {"corpus.attributes", [](Config& c, const std::string& v, const std::string& w) {
         c.corpus.attributes = parse_attribute_list(v, w);
       }},
      {"search.metric", [](Config& c, const std::string& v, const std::string& w) {
         if (v == "auto" || v.empty()) {
           c.search.metric.reset();
         } else {
           std::string deprecation;
           try {
             c.search.metric = parse_metric(v, w + "key 'search.metric'", &deprecation);
           } catch (const Error&) {
             throw Error(w + "key 'search.metric': unknown metric '" + v +
                         "' (allowed: inner_product, cosine, l2, auto)");
           }
           if (!deprecation.empty()) c.warnings.push_back(deprecation);
         }
       }},
      {"search.k_max", [](Config& c, const std::string& v, const std::string& w) {
         c.search.k_max = static_cast<int>(parse_int("search.k_max", v, 1, 1 << 20, w));
       }},
      {"search.batch_max", [](Config& c, const std::string& v, const std::string& w) {
         c.search.batch_max = static_cast<int>(parse_int("search.batch_max", v, 1, 1 << 20, w));
       }},
      {"search.max_filters", [](Config& c, const std::string& v, const std::string& w) {
         c.search.max_filters = static_cast<int>(parse_int("search.max_filters", v, 1, 65536, w));
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
      {"engine.cuda_graphs", [](Config& c, const std::string& v, const std::string& w) {
         c.engine.cuda_graphs = parse_bool("engine.cuda_graphs", v, w);
       }},
      {"engine.scan_l2_hints", [](Config& c, const std::string& v, const std::string& w) {
         c.engine.scan_l2_hints = parse_bool("engine.scan_l2_hints", v, w);
       }},
      {"engine.scan_rows", [](Config& c, const std::string& v, const std::string& w) {
         c.engine.scan_rows = parse_scan_rows(v, w + "key 'engine.scan_rows'");
       }},
      {"engine.scan_schedule", [](Config& c, const std::string& v, const std::string& w) {
         c.engine.scan_schedule = parse_scan_schedule(v, w + "key 'engine.scan_schedule'");
       }},
      {"engine.search_path", [](Config& c, const std::string& v, const std::string& w) {
         c.engine.search_path = parse_search_path(v, w + "key 'engine.search_path'");
       }},
      {"engine.filter_scan", [](Config& c, const std::string& v, const std::string& w) {
         c.engine.filter_scan = parse_filter_scan(v, w + "key 'engine.filter_scan'");
       }},
      {"engine.column_orders", [](Config& c, const std::string& v, const std::string& w) {
         c.engine.column_orders = parse_bool("engine.column_orders", v, w);
       }},
      {"engine.cpu_isa", [](Config& c, const std::string& v, const std::string& w) {
         c.engine.cpu_isa = parse_cpu_isa(v, w + "key 'engine.cpu_isa'");
       }},
      {"storage.dir", [](Config& c, const std::string& v, const std::string&) { c.storage.dir = v; }},
      {"storage.group_commit_window_us", [](Config& c, const std::string& v, const std::string& w) {
         c.storage.group_commit_window_us = parse_int("storage.group_commit_window_us", v, 0, 1000000, w);
       }},
      {"storage.segment_bytes", [](Config& c, const std::string& v, const std::string& w) {
         c.storage.segment_bytes = parse_int("storage.segment_bytes", v, 4096, 1LL << 40, w);
       }},
      {"storage.max_pending_bytes", [](Config& c, const std::string& v, const std::string& w) {
         c.storage.max_pending_bytes = parse_int("storage.max_pending_bytes", v, 4096, 1LL << 40, w);
       }},
      {"storage.snapshot_log_bytes", [](Config& c, const std::string& v, const std::string& w) {
         c.storage.snapshot_log_bytes = parse_int("storage.snapshot_log_bytes", v, 0, 1LL << 40, w);
       }},
      {"storage.capacity_rows", [](Config& c, const std::string& v, const std::string& w) {
         c.storage.capacity_rows = parse_int("storage.capacity_rows", v, 0, (1LL << 31) - 1, w);
       }},
      {"storage.lock_wait_s", [](Config& c, const std::string& v, const std::string& w) {
         c.storage.lock_wait_s = parse_seconds("storage.lock_wait_s", v, 86400, w);
       }},
      {"storage.keep_snapshots", [](Config& c, const std::string& v, const std::string& w) {
         c.storage.keep_snapshots = parse_int("storage.keep_snapshots", v, 1, 1000, w);
       }},
      {"storage.replay_step_bytes", [](Config& c, const std::string& v, const std::string& w) {
         c.storage.replay_step_bytes = parse_int("storage.replay_step_bytes", v, 1, 1LL << 34, w);
       }},
      {"storage.snapshot_interval_s", [](Config& c, const std::string& v, const std::string& w) {
         c.storage.snapshot_interval_s = parse_seconds("storage.snapshot_interval_s", v, 31536000, w);
       }},
      {"testing.fault", [](Config& c, const std::string& v, const std::string& w) {
         if (!v.empty() && !fault_injection_built())
           throw Error(w + "key 'testing.fault': this shardtopk was built without fault injection "
                           "(configure with -DSHARDTOPK_FAULT_INJECTION=ON; test builds only)");
         c.testing.fault = v.empty() ? FaultSpec{} : parse_fault(v, w + "key 'testing.fault'");
       }},
      {"testing.snapshot_block_rows", [](Config& c, const std::string& v, const std::string& w) {
         c.testing.snapshot_block_rows = parse_int("testing.snapshot_block_rows", v, 0, (1LL << 31) - 1, w);
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
      {"service.poll_us", [](Config& c, const std::string& v, const std::string& w) {
         c.service.poll_us = static_cast<int>(parse_int("service.poll_us", v, 0, 100000, w));
       }},
      {"service.answer_poll_us", [](Config& c, const std::string& v, const std::string& w) {
         c.service.answer_poll_us = static_cast<int>(parse_int("service.answer_poll_us", v, -1, 100000, w));
       }},
      {"service.peer_check_ms", [](Config& c, const std::string& v, const std::string& w) {
         c.service.peer_check_ms = static_cast<int>(parse_int("service.peer_check_ms", v, 1, 60000, w));
       }},
      {"service.max_body_bytes", [](Config& c, const std::string& v, const std::string& w) {
         c.service.max_body_bytes = parse_int("service.max_body_bytes", v, 0, 1LL << 32, w);
         SHARDTOPK_EXPECTS(c.service.max_body_bytes == 0 || c.service.max_body_bytes >= 1024, w,
                           "key 'service.max_body_bytes': value ", v,
                           " out of range (allowed: 0 = derived from search.batch_max x dim, or 1024 .. ", 1LL << 32, ")");
       }},
      {"service.io_threads", [](Config& c, const std::string& v, const std::string& w) {
         c.service.io_threads = static_cast<int>(parse_int("service.io_threads", v, 0, 64, w));
       }},
      {"service.max_connections", [](Config& c, const std::string& v, const std::string& w) {
         c.service.max_connections = static_cast<int>(parse_int("service.max_connections", v, 1, 1 << 20, w));
       }},
      {"service.idle_timeout_s", [](Config& c, const std::string& v, const std::string& w) {
         c.service.idle_timeout_s = static_cast<int>(parse_int("service.idle_timeout_s", v, 1, 86400, w));
       }},
      {"service.max_header_bytes", [](Config& c, const std::string& v, const std::string& w) {
         c.service.max_header_bytes = static_cast<int>(parse_int("service.max_header_bytes", v, 1024, 1 << 20, w));
       }},
      {"service.max_headers", [](Config& c, const std::string& v, const std::string& w) {
         c.service.max_headers = static_cast<int>(parse_int("service.max_headers", v, 1, 10000, w));
       }},
      {"service.max_inflight_bytes", [](Config& c, const std::string& v, const std::string& w) {
         c.service.max_inflight_bytes = parse_int("service.max_inflight_bytes", v, 0, 1LL << 40, w);
         SHARDTOPK_EXPECTS(c.service.max_inflight_bytes == 0 || c.service.max_inflight_bytes >= 65536, w,
                           "key 'service.max_inflight_bytes': value ", v,
                           " out of range (allowed: 0 = derived from the body limit, or 65536 .. ", 1LL << 40, ")");
       }},
      {"service.drain_timeout_s", [](Config& c, const std::string& v, const std::string& w) {
         const double x = parse_number(v, w + "key 'service.drain_timeout_s'");
         SHARDTOPK_EXPECTS(std::isfinite(x) && x >= 0 && x <= 3600, w, "key 'service.drain_timeout_s': value ", v,
                           " out of range (allowed: 0 .. 3600 seconds)");
         c.service.drain_timeout_s = x;
       }},
      {"service.heartbeat_ms", [](Config& c, const std::string& v, const std::string& w) {
         c.service.heartbeat_ms = static_cast<int>(parse_int("service.heartbeat_ms", v, 10, 60000, w));
       }},
      {"service.heartbeat_timeout_ms", [](Config& c, const std::string& v, const std::string& w) {
         c.service.heartbeat_timeout_ms = static_cast<int>(parse_int("service.heartbeat_timeout_ms", v, 20, 3600000, w));
       }},
      {"service.tls.cert_file", [](Config& c, const std::string& v, const std::string&) { c.service.tls_cert_file = v; }},
      {"service.tls.key_file", [](Config& c, const std::string& v, const std::string&) { c.service.tls_key_file = v; }},
      {"service.auth.keys_file", [](Config& c, const std::string& v, const std::string&) {
         c.service.auth_keys_file = v;
       }},
      {"service.auth.open_metrics", [](Config& c, const std::string& v, const std::string& w) {
         c.service.auth_open_metrics = parse_bool("service.auth.open_metrics", v, w);
       }},
      {"service.auth.allow_open_writes", [](Config& c, const std::string& v, const std::string& w) {
         c.service.auth_allow_open_writes = parse_bool("service.auth.allow_open_writes", v, w);
       }},
      {"service.audit_log", [](Config& c, const std::string& v, const std::string&) { c.service.audit_log = v; }},
      {"service.threads", [](Config& c, const std::string& v, const std::string& w) {
         // Deprecated: the event-driven front end has no thread per connection. Accepted so that
         // old configs still load; `serve` warns when it is set.
         c.service.threads = static_cast<int>(parse_int("service.threads", v, 0, 4096, w));
       }},
  };
  return s;
}

// Renamed keys: the old name still works, with a warning naming the new one.
const std::map<std::string, std::string>& deprecated_keys() {
  static const std::map<std::string, std::string> m = {};
  return m;
}

std::vector<std::string> sections() {
  std::vector<std::string> out;
  for (const auto& kv : setters()) {
    const std::string section = kv.first.substr(0, kv.first.find('.'));
    if (out.empty() || out.back() != section) out.push_back(section);  // setters() is sorted
  }
  return out;
}

bool is_section(const std::string& name) {
  for (const auto& kv : setters())
    if (kv.first.rfind(name + ".", 0) == 0) return true;
  return false;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// "unknown key 'search.kmax'; did you mean 'search.k_max'? (keys of 'search': ...)". The
// suggestion: a near key of the same section, else the key of the same name in another section,
// else the nearest key (or section) overall; then the names it was meant to be among (a known
// section's keys, or the sections). service.threads is accepted but ignored: never suggested.
std::string unknown_key(const std::string& key) {
  std::vector<std::string> keys = config_keys();
  keys.erase(std::remove(keys.begin(), keys.end(), "service.threads"), keys.end());
  const std::size_t dot = key.find('.');
  const std::string section = key.substr(0, dot);
  std::vector<std::string> same_section;
  for (const std::string& k : keys)
    if (k.rfind(section + ".", 0) == 0) same_section.push_back(k);
  auto section_keys = [&] {
    std::vector<std::string> names;
    for (const std::string& k : same_section) names.push_back(k.substr(section.size() + 1));
    return "(keys of '" + section + "': " + joined(names) + ")";
  };
  if (dot == std::string::npos && !same_section.empty())  // a section given a value ("search: 5", --set search=5)
    return "'" + key + "' is a section, not a key: give its keys " + section_keys();
  std::string near;
  if (dot != std::string::npos) {
    near = closest_name(key, same_section);
    for (const std::string& k : keys)
      if (near.empty() && k.substr(k.find('.')) == key.substr(dot)) near = k;
  }
  if (near.empty()) near = closest_name(key, dot == std::string::npos ? sections() : keys);
  std::string msg = "unknown key '" + key + "'";
  if (!near.empty()) msg += "; did you mean '" + near + "'?";
  if (dot != std::string::npos && !same_section.empty()) {
    msg += " " + section_keys();
  } else {
    msg += " (sections: " + joined(sections()) + "; every key: docs/CONFIG.md)";
  }
  return msg;
}

void set_key(Config& c, const std::string& key_in, const std::string& value, const std::string& where) {
  std::string key = key_in;
  const auto dep = deprecated_keys().find(key);
  if (dep != deprecated_keys().end()) {
    c.warnings.push_back(where + "key '" + key + "' is deprecated; use '" + dep->second + "'");
    key = dep->second;
  }
  auto it = setters().find(key);
  if (it == setters().end()) throw Error(where + unknown_key(key));
  it->second(c, value, where);
}

// `lines`: each key read so far (sections too, dotted from the top) and its line. yaml-cpp keeps
// every copy of a repeated key, so without it the last copy would silently win. Messages about a
// key start with "<source>:<line>: ", as compilers name a place in a file.
void walk(Config& c, const YAML::Node& node, const std::string& prefix, const std::string& source,
          std::map<std::string, int>& lines) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    const int line = it->first.Mark().line + 1;
    const std::string where = source + ":" + std::to_string(line) + ": ";
    SHARDTOPK_EXPECTS(it->first.IsScalar(), where, "a key ", (prefix.empty() ? "at the top level" : "in '" + prefix + "'"),
                      " is a ", (it->first.IsSequence() ? "list" : it->first.IsMap() ? "mapping" : "null"),
                      "; keys are plain names like search.k_max");
    const std::string name = it->first.as<std::string>();
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    const auto seen = lines.emplace(key, line);
    SHARDTOPK_EXPECTS(seen.second, where, "key '", key, "' given twice (lines ", seen.first->second, " and ", line,
                      "); give each key once");
    const YAML::Node v = it->second;  // a copy: a reference to the iterator's temporary dangles
    if (v.IsMap()) {
      SHARDTOPK_EXPECTS(setters().count(key) == 0, where, "key '", key, "': expected a single value, got a mapping");
      if (!is_section(key)) throw Error(where + unknown_key(key));
      walk(c, v, key, source, lines);
    } else if (v.IsScalar()) {
      set_key(c, key, v.Scalar(), where);
    } else if (v.IsNull()) {
      set_key(c, key, "", where);
    } else if (v.IsSequence() && key == "corpus.attributes") {
      std::string items;
      for (std::size_t i = 0; i < v.size(); ++i) {
        SHARDTOPK_EXPECTS(v[i].IsScalar() && !v[i].Scalar().empty(), where, "key '", key, "': item ", i + 1,
                          " is not a dataset path (line ", v[i].Mark().line + 1, ")");
        SHARDTOPK_EXPECTS(v[i].Scalar().find(',') == std::string::npos, where, "key '", key, "': dataset path '",
                          v[i].Scalar(), "' contains a comma, which attribute paths cannot");
        items += (i ? "," : "") + v[i].Scalar();
      }
      set_key(c, key, items, where);
    } else {
      SHARDTOPK_EXPECTS(setters().count(key) != 0, where, unknown_key(key));
      throw Error(where + "key '" + key + "': expected a single value, got a list");
    }
  }
}

// Counts the documents with content in `text`, up to 2. The parser is asked for at most three
// (YAML::LoadAll loops without end on some malformed input, such as ",q", where its parser stops
// advancing); a document of nothing but null does not count, as YAML::LoadAll counts.
int yaml_documents(const std::string& text) {
  struct Counter : YAML::EventHandler {
    bool content = false;
    void OnDocumentStart(const YAML::Mark&) override { content = false; }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override { content = true; }
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override { content = true; }
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
      content = true;
    }
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
      content = true;
    }
    void OnMapEnd() override {}
  };
  std::istringstream in(text);
  YAML::Parser parser(in);
  int documents = 0;
  for (int i = 0; i < 3 && documents < 2; ++i) {
    Counter c;
    if (!parser.HandleNextDocument(c)) break;
    documents += c.content ? 1 : 0;
  }
  return documents;
}

}  // namespace

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  for (const auto& kv : setters()) keys.push_back(kv.first);
  return keys;
}

Config parse_config(const std::string& yaml_text, const std::string& source) {
  const std::string where = source + ": ";
  YAML::Node root;
  try {
    // One document: YAML::Load reads the first of several and drops the rest unseen.
    SHARDTOPK_EXPECTS(yaml_documents(yaml_text) <= 1, where,
                      "the file holds more than one YAML document (separated by '---'); a config is one document");
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw Error(where + "invalid YAML: " + e.what());
  }
  Config c;
  c.source = source;
  if (root.IsNull()) return c;
  SHARDTOPK_EXPECTS(root.IsMap(), where, "expected a mapping of sections (corpus, search, engine, comm)");
  std::map<std::string, int> lines;
  walk(c, root, "", source, lines);
  return c;
}

Config load_config(const std::string& path) {
  struct stat st {};
  SHARDTOPK_EXPECTS(::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode), "config file '", path,
                    "' cannot be read: it is a directory");
  errno = 0;
  std::ifstream in(path);
  if (!in.good()) {
    const int err = errno;
    throw Error(detail::concat("config file '", path, "' cannot be read: ", std::strerror(err != 0 ? err : EIO)));
  }
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

bool fault_injection_built() {
#ifdef SHARDTOPK_FAULT_INJECTION
  return true;
#else
  return false;
#endif
}

FaultSpec parse_fault(const std::string& text, const std::string& what) {
  // kind:RANK:BATCH[:SECONDS]
  std::vector<std::string> f;
  std::string cur;
  for (char ch : text) {
    if (ch == ':') {
      f.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  f.push_back(cur);
  const std::string usage = "expected stall:RANK:BATCH:SECONDS, exit:RANK:BATCH or fail:RANK:BATCH";
  SHARDTOPK_EXPECTS(!f.empty(), what, ": '", text, "': ", usage);
  FaultSpec s;
  if (f[0] == "stall" && f.size() == 4) {
    s.kind = FaultSpec::kStall;
    s.seconds = parse_number(f[3], what + " seconds");
    SHARDTOPK_EXPECTS(std::isfinite(s.seconds) && s.seconds >= 0, what, ": '", text, "': seconds must be >= 0");
  } else if ((f[0] == "exit" || f[0] == "fail") && f.size() == 3) {
    s.kind = f[0] == "exit" ? FaultSpec::kExit : FaultSpec::kFail;
  } else {
    throw Error(what + ": '" + text + "': " + usage);
  }
  s.rank = static_cast<int>(parse_integer(f[1], what + " rank"));
  s.batch = parse_integer(f[2], what + " batch");
  SHARDTOPK_EXPECTS(s.rank >= 0 && s.batch >= 0, what, ": '", text, "': rank and batch must be >= 0");
  s.text = text;
  return s;
}

void validate(const Config& cfg) {
  const std::string where = cfg.source.empty() ? "" : cfg.source + ": ";
  SHARDTOPK_EXPECTS(!cfg.corpus.path.empty(), where, "key 'corpus.path' is required (the corpus HDF5 file)");
  SHARDTOPK_EXPECTS(!(cfg.engine.backend == EngineBackend::kCpu && cfg.comm.backend == CommBackend::kNccl),
                    where, "engine.backend 'cpu' with comm.backend 'nccl' is not supported: NCCL moves "
                    "device buffers; use comm.backend 'mpi' (or 'auto') with the CPU engine");
  SHARDTOPK_EXPECTS(cfg.service.heartbeat_timeout_ms >= 2 * cfg.service.heartbeat_ms, where,
                    "service.heartbeat_timeout_ms = ", cfg.service.heartbeat_timeout_ms,
                    " must be at least twice service.heartbeat_ms = ", cfg.service.heartbeat_ms,
                    " (one late heartbeat must not count as a stalled rank)");
  SHARDTOPK_EXPECTS(cfg.service.tls_cert_file.empty() == cfg.service.tls_key_file.empty(), where,
                    "service.tls.cert_file = '", cfg.service.tls_cert_file, "' and service.tls.key_file = '",
                    cfg.service.tls_key_file, "': give both (HTTPS) or neither (plain HTTP)");
}

std::string to_yaml(const Config& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "corpus" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "path" << YAML::Value << c.corpus.path;
  out << YAML::Key << "dataset" << YAML::Value << c.corpus.dataset;
  out << YAML::Key << "ids_dataset" << YAML::Value << c.corpus.ids_dataset;
  out << YAML::Key << "attributes" << YAML::Value << YAML::Flow << c.corpus.attributes;
  out << YAML::EndMap;
  out << YAML::Key << "search" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "metric" << YAML::Value << (c.search.metric ? to_string(*c.search.metric) : "auto");
  out << YAML::Key << "k_max" << YAML::Value << c.search.k_max;
  out << YAML::Key << "batch_max" << YAML::Value << c.search.batch_max;
  out << YAML::Key << "max_filters" << YAML::Value << c.search.max_filters;
  out << YAML::EndMap;
  out << YAML::Key << "engine" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "backend" << YAML::Value << to_string(c.engine.backend);
  out << YAML::Key << "dtype" << YAML::Value << to_string(c.engine.dtype);
  out << YAML::Key << "threads" << YAML::Value << c.engine.threads;
  out << YAML::Key << "read_chunk_rows" << YAML::Value << c.engine.read_chunk_rows;
  out << YAML::Key << "cuda_graphs" << YAML::Value << c.engine.cuda_graphs;
  out << YAML::Key << "scan_l2_hints" << YAML::Value << c.engine.scan_l2_hints;
  out << YAML::Key << "scan_rows" << YAML::Value << to_string(c.engine.scan_rows);
  out << YAML::Key << "scan_schedule" << YAML::Value << to_string(c.engine.scan_schedule);
  out << YAML::Key << "search_path" << YAML::Value << to_string(c.engine.search_path);
  out << YAML::Key << "filter_scan" << YAML::Value << to_string(c.engine.filter_scan);
  out << YAML::Key << "column_orders" << YAML::Value << c.engine.column_orders;
  out << YAML::Key << "cpu_isa" << YAML::Value << to_string(c.engine.cpu_isa);
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
  out << YAML::Key << "poll_us" << YAML::Value << c.service.poll_us;
  out << YAML::Key << "answer_poll_us" << YAML::Value << c.service.answer_poll_us;
  out << YAML::Key << "max_body_bytes" << YAML::Value << c.service.max_body_bytes;
  out << YAML::Key << "io_threads" << YAML::Value << c.service.io_threads;
  out << YAML::Key << "max_connections" << YAML::Value << c.service.max_connections;
  out << YAML::Key << "idle_timeout_s" << YAML::Value << c.service.idle_timeout_s;
  out << YAML::Key << "peer_check_ms" << YAML::Value << c.service.peer_check_ms;
  out << YAML::Key << "max_header_bytes" << YAML::Value << c.service.max_header_bytes;
  out << YAML::Key << "max_headers" << YAML::Value << c.service.max_headers;
  out << YAML::Key << "max_inflight_bytes" << YAML::Value << c.service.max_inflight_bytes;
  out << YAML::Key << "drain_timeout_s" << YAML::Value << c.service.drain_timeout_s;
  out << YAML::Key << "heartbeat_ms" << YAML::Value << c.service.heartbeat_ms;
  out << YAML::Key << "heartbeat_timeout_ms" << YAML::Value << c.service.heartbeat_timeout_ms;
  if (c.service.threads != 0) out << YAML::Key << "threads" << YAML::Value << c.service.threads;
  out << YAML::Key << "tls" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "cert_file" << YAML::Value << c.service.tls_cert_file;
  out << YAML::Key << "key_file" << YAML::Value << c.service.tls_key_file;
  out << YAML::EndMap;
  out << YAML::Key << "auth" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "keys_file" << YAML::Value << c.service.auth_keys_file;
  out << YAML::Key << "open_metrics" << YAML::Value << c.service.auth_open_metrics;
  out << YAML::Key << "allow_open_writes" << YAML::Value << c.service.auth_allow_open_writes;
  out << YAML::EndMap;
  out << YAML::Key << "audit_log" << YAML::Value << c.service.audit_log;
  out << YAML::EndMap;
  out << YAML::Key << "storage" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "dir" << YAML::Value << c.storage.dir;
  out << YAML::Key << "group_commit_window_us" << YAML::Value << c.storage.group_commit_window_us;
  out << YAML::Key << "segment_bytes" << YAML::Value << c.storage.segment_bytes;
  out << YAML::Key << "max_pending_bytes" << YAML::Value << c.storage.max_pending_bytes;
  out << YAML::Key << "capacity_rows" << YAML::Value << c.storage.capacity_rows;
  out << YAML::Key << "snapshot_log_bytes" << YAML::Value << c.storage.snapshot_log_bytes;
  out << YAML::Key << "lock_wait_s" << YAML::Value << c.storage.lock_wait_s;
  out << YAML::Key << "keep_snapshots" << YAML::Value << c.storage.keep_snapshots;
  out << YAML::Key << "replay_step_bytes" << YAML::Value << c.storage.replay_step_bytes;
  out << YAML::Key << "snapshot_interval_s" << YAML::Value << c.storage.snapshot_interval_s;
  out << YAML::EndMap;
  if (c.testing.fault.kind != FaultSpec::kNone || c.testing.snapshot_block_rows != 0) {
    out << YAML::Key << "testing" << YAML::Value << YAML::BeginMap;
    if (c.testing.fault.kind != FaultSpec::kNone) out << YAML::Key << "fault" << YAML::Value << c.testing.fault.text;
    if (c.testing.snapshot_block_rows != 0)
      out << YAML::Key << "snapshot_block_rows" << YAML::Value << c.testing.snapshot_block_rows;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return out.c_str();
}

}  // namespace shardtopk
