// YAML configuration: parsing, defaults, overrides and every error naming key and value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardtopk/config.hpp"
#include "core/parse.hpp"
#include "shardtopk/error.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using test::error_of;

const char* kFull = R"(
corpus:
  path: /data/corpus.h5
  dataset: emb/vectors
  ids_dataset: meta/ids
search:
  metric: l2
  k_max: 100
  batch_max: 32
engine:
  backend: cpu
  dtype: bfloat16
  threads: 3
  read_chunk_rows: 4096
comm:
  backend: mpi
  timeout_s: 12.5
)";

TEST(Config, ParsesEveryKey) {
  const Config c = parse_config(kFull, "full.yaml");
  EXPECT_EQ(c.corpus.path, "/data/corpus.h5");
  EXPECT_EQ(c.corpus.dataset, "emb/vectors");  // nested dataset path
  EXPECT_EQ(c.corpus.ids_dataset, "meta/ids");
  ASSERT_TRUE(c.search.metric.has_value());
  EXPECT_EQ(*c.search.metric, Metric::kL2);
  EXPECT_EQ(c.search.k_max, 100);
  EXPECT_EQ(c.search.batch_max, 32);
  EXPECT_EQ(c.engine.backend, EngineBackend::kCpu);
  EXPECT_EQ(c.engine.dtype, Dtype::kBFloat16);
  EXPECT_EQ(c.engine.threads, 3);
  EXPECT_EQ(c.engine.read_chunk_rows, 4096);
  EXPECT_EQ(c.comm.backend, CommBackend::kMpi);
  EXPECT_DOUBLE_EQ(c.comm.timeout_s, 12.5);
  EXPECT_EQ(c.source, "full.yaml");
  EXPECT_NO_THROW(validate(c));
}

TEST(Config, DefaultsWhenOmitted) {
  const Config c = parse_config("corpus:\n  path: x.h5\n");
  EXPECT_EQ(c.corpus.dataset, "train");
  EXPECT_EQ(c.corpus.ids_dataset, "");
  EXPECT_FALSE(c.search.metric.has_value());
  EXPECT_EQ(c.search.k_max, 1024);
  EXPECT_EQ(c.search.batch_max, 64);
  EXPECT_EQ(c.engine.backend, EngineBackend::kAuto);
  EXPECT_EQ(c.engine.dtype, Dtype::kFloat32);
  EXPECT_EQ(c.engine.threads, 0);
  EXPECT_EQ(c.engine.read_chunk_rows, 65536);
  EXPECT_EQ(c.comm.backend, CommBackend::kAuto);
  EXPECT_DOUBLE_EQ(c.comm.timeout_s, 60.0);
}

TEST(Config, MetricNamesAndAliases) {
  EXPECT_EQ(*parse_config("search: {metric: inner_product}").search.metric, Metric::kInnerProduct);
  EXPECT_EQ(*parse_config("search: {metric: cosine}").search.metric, Metric::kCosine);
  EXPECT_EQ(*parse_config("search: {metric: l2}").search.metric, Metric::kL2);
  EXPECT_FALSE(parse_config("search: {metric: auto}").search.metric.has_value());
  for (const char* m : {"inner_product", "cosine", "l2", "auto"})
    EXPECT_TRUE(parse_config(std::string("search: {metric: ") + m + "}").warnings.empty()) << m;
}

// The ann-benchmarks distance names work as search.metric, each with a deprecation warning that
// names the replacement; overrides are checked the same way.
TEST(Config, AnnBenchmarksMetricNamesAreDeprecatedAliases) {
  struct Alias {
    const char* name;
    Metric metric;
    const char* canonical;
  };
  for (const Alias a : {Alias{"euclidean", Metric::kL2, "l2"}, Alias{"angular", Metric::kCosine, "cosine"},
                        Alias{"dot", Metric::kInnerProduct, "inner_product"},
                        Alias{"ip", Metric::kInnerProduct, "inner_product"}}) {
    const Config c = parse_config(std::string("search: {metric: ") + a.name + "}", "a.yaml");
    EXPECT_EQ(*c.search.metric, a.metric) << a.name;
    ASSERT_EQ(c.warnings.size(), 1u) << a.name;
    EXPECT_THAT(c.warnings[0], AllOf(HasSubstr("a.yaml"), HasSubstr("search.metric"), HasSubstr(std::string("'") + a.name + "'"),
                                     HasSubstr("deprecated"), HasSubstr(std::string("write ") + a.canonical)));
    Config o;
    apply_override(o, std::string("search.metric=") + a.name);
    EXPECT_EQ(*o.search.metric, a.metric) << a.name;
    EXPECT_EQ(o.warnings.size(), 1u) << a.name;
  }
  EXPECT_THAT(error_of([] { parse_config("search: {metric: Euclidean}"); }),
              AllOf(HasSubstr("'Euclidean'"), HasSubstr("allowed: inner_product, cosine, l2, auto")));
}

TEST(Config, RoundTripsThroughToYaml) {
  const Config c = parse_config(kFull, "full.yaml");
  const Config d = parse_config(to_yaml(c), "again");
  EXPECT_EQ(d.corpus.path, c.corpus.path);
  EXPECT_EQ(d.corpus.dataset, c.corpus.dataset);
  EXPECT_EQ(d.corpus.ids_dataset, c.corpus.ids_dataset);
  EXPECT_EQ(d.search.metric, c.search.metric);
  EXPECT_EQ(d.search.k_max, c.search.k_max);
  EXPECT_EQ(d.search.batch_max, c.search.batch_max);
  EXPECT_EQ(d.engine.backend, c.engine.backend);
  EXPECT_EQ(d.engine.dtype, c.engine.dtype);
  EXPECT_EQ(d.engine.threads, c.engine.threads);
  EXPECT_EQ(d.engine.read_chunk_rows, c.engine.read_chunk_rows);
  EXPECT_EQ(d.comm.backend, c.comm.backend);
  EXPECT_DOUBLE_EQ(d.comm.timeout_s, c.comm.timeout_s);
}

// A list or mapping used as a key (found by the config fuzzer) is an Error naming it, not a
// yaml-cpp exception that would end the job on every rank.
TEST(Config, NonScalarKeysAreRefusedByName) {
  for (const char* text : {"[o] : x\n", "? {corpus: 1}\n: x\n", "search:\n  [k_max]: 3\n"}) {
    try {
      (void)parse_config(text, "c.yaml");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("keys are plain names"), std::string::npos) << e.what();
    }
  }
}

TEST(Config, LoadsFromFile) {
  test::TempDir dir;
  test::write_text(dir.file("c.yaml"), kFull);
  const Config c = load_config(dir.file("c.yaml"));
  EXPECT_EQ(c.search.k_max, 100);
  EXPECT_EQ(c.source, dir.file("c.yaml"));
}

// io.*: the corpus reader's options (ReadOptions), booleans written true or false.
TEST(Config, IoKeysParseDefaultAndRoundTrip) {
  const Config def = parse_config("corpus:\n  path: x.h5\n");
  EXPECT_TRUE(def.io.direct_reads);
  EXPECT_TRUE(def.io.f16c);
  const Config c = parse_config("corpus: {path: x.h5}\nio:\n  direct_reads: false\n  f16c: false\n", "io.yaml");
  EXPECT_FALSE(c.io.direct_reads);
  EXPECT_FALSE(c.io.f16c);
  const Config d = parse_config(to_yaml(c), "again");
  EXPECT_FALSE(d.io.direct_reads);
  EXPECT_FALSE(d.io.f16c);
  EXPECT_TRUE(parse_config(to_yaml(def), "again").io.direct_reads);
  Config o = def;
  apply_override(o, "io.direct_reads=false");
  EXPECT_FALSE(o.io.direct_reads);
  EXPECT_TRUE(o.io.f16c);
  apply_override(o, "io.f16c=false");
  apply_override(o, "io.direct_reads=true");
  EXPECT_TRUE(o.io.direct_reads);
  EXPECT_FALSE(o.io.f16c);
  EXPECT_THAT(error_of([&] { apply_override(o, "io.f16c=0"); }),
              AllOf(HasSubstr("io.f16c"), HasSubstr("expected true or false"), HasSubstr("'0'")));
  EXPECT_FALSE(o.io.f16c) << "a refused value changes nothing";
}

// ------------------------------------------------------------------------------ errors

struct BadConfig {
  const char* name;
  const char* yaml;
  std::vector<std::string> expect;  // substrings of the message
};
std::ostream& operator<<(std::ostream& os, const BadConfig& c) { return os << c.name << ": " << c.yaml; }

class ConfigErrors : public ::testing::TestWithParam<BadConfig> {};

TEST_P(ConfigErrors, ThrowsNamingKeyAndValue) {
  const BadConfig& c = GetParam();
  std::string msg;
  try {
    parse_config(c.yaml, "bad.yaml");
    FAIL() << "no error for " << c.name;
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_THAT(msg, HasSubstr("bad.yaml")) << "the message names the source";
  for (const auto& s : c.expect) EXPECT_THAT(msg, HasSubstr(s));
}

// Each row: the YAML, then what the message must contain.
INSTANTIATE_TEST_SUITE_P(
    Cases, ConfigErrors,
    ::testing::Values(
        // An unknown key: the file and line, the nearest valid name, and the names it was meant
        // to be among.
        BadConfig{"unknown_key", "search:\n  k_max: 10\n  kmax: 10\n",
                  {"bad.yaml:3: unknown key 'search.kmax'; did you mean 'search.k_max'?",
                   "(keys of 'search': batch_max, k_max, max_filters, metric)"}},
        BadConfig{"unknown_section", "corpus:\n  path: x.h5\nserach:\n  k_max: 10\n",
                  {"bad.yaml:3: unknown key 'serach'; did you mean 'search'?", "sections: comm, corpus, engine"}},
        BadConfig{"key_in_another_section", "search:\n  threads: 2\n",
                  {"bad.yaml:2: unknown key 'search.threads'; did you mean 'engine.threads'?"}},
        BadConfig{"unknown_top_scalar", "verbose: true\n", {"bad.yaml:1: unknown key 'verbose' (sections: "}},
        BadConfig{"unknown_dotted_top_key", "search.kmx: 3\n",
                  {"bad.yaml:1: unknown key 'search.kmx'; did you mean 'search.k_max'?"}},
        BadConfig{"a_section_given_a_value", "search: 5\n",
                  {"bad.yaml:1: 'search' is a section, not a key: give its keys (keys of 'search': batch_max, k_max, "
                   "max_filters, metric)"}},
        BadConfig{"a_section_given_a_list", "engine: [1]\n", {"bad.yaml:1: 'engine' is a section, not a key"}},
        BadConfig{"value_for_a_section", "search:\n  k_max:\n    x: 1\n",
                  {"bad.yaml:2: key 'search.k_max': expected a single value, got a mapping"}},
        BadConfig{"wrong_type_int", "search:\n  batch_max: 4\n  k_max: ten\n",
                  {"bad.yaml:3: key 'search.k_max'", "expected an integer", "'ten'"}},
        BadConfig{"wrong_type_float_for_int", "engine:\n  threads: 1.5\n", {"engine.threads", "'1.5'"}},
        BadConfig{"wrong_type_list", "search:\n  k_max: [1, 2]\n", {"search.k_max", "list"}},
        BadConfig{"wrong_type_number", "comm:\n  timeout_s: soon\n", {"comm.timeout_s", "expected a number", "'soon'"}},
        BadConfig{"int_beyond_int64", "search:\n  k_max: 99999999999999999999\n", {"search.k_max", "beyond the 64-bit integer range"}},
        BadConfig{"number_beyond_double", "comm:\n  timeout_s: 1e999\n", {"comm.timeout_s", "beyond the double range"}},
        BadConfig{"bad_metric", "search:\n  metric: hamming\n", {"search.metric", "'hamming'", "inner_product, cosine, l2"}},
        BadConfig{"negative_batch_max", "search:\n  batch_max: -4\n", {"search.batch_max", "-4", "out of range"}},
        BadConfig{"zero_batch_max", "search:\n  batch_max: 0\n", {"search.batch_max", "0 out of range"}},
        BadConfig{"k_max_zero", "search:\n  k_max: 0\n", {"search.k_max", "0 out of range", "1 .. 1048576"}},
        BadConfig{"k_max_too_big", "search:\n  k_max: 2000000\n", {"search.k_max", "2000000"}},
        BadConfig{"negative_threads", "engine:\n  threads: -1\n", {"engine.threads", "-1"}},
        BadConfig{"bad_dtype", "engine:\n  dtype: int8\n", {"engine.dtype", "'int8'", "float16"}},
        BadConfig{"bad_backend", "engine:\n  backend: tpu\n", {"engine.backend", "'tpu'"}},
        BadConfig{"bad_filter_scan", "engine:\n  filter_scan: sparse\n",
                  {"engine.filter_scan", "'sparse'", "auto, dense, gathered"}},
        BadConfig{"bad_comm", "comm:\n  backend: gloo\n", {"comm.backend", "'gloo'"}},
        BadConfig{"zero_timeout", "comm:\n  timeout_s: 0\n", {"comm.timeout_s", "> 0"}},
        BadConfig{"empty_path", "corpus:\n  path: ''\n", {"corpus.path", "empty"}},
        BadConfig{"small_body_limit", "service:\n  max_body_bytes: 100\n", {"service.max_body_bytes", "100", "0 = derived"}},
        BadConfig{"negative_poll", "service:\n  poll_us: -1\n", {"service.poll_us", "-1 out of range"}},
        BadConfig{"answer_poll_too_long", "service:\n  answer_poll_us: 100001\n",
                  {"service.answer_poll_us", "100001 out of range"}},
        BadConfig{"answer_poll_below_auto", "service:\n  answer_poll_us: -2\n",
                  {"service.answer_poll_us", "-2 out of range"}},
        BadConfig{"negative_io_threads", "service:\n  io_threads: -1\n", {"service.io_threads", "-1 out of range"}},
        BadConfig{"no_peer_check", "service:\n  peer_check_ms: 0\n", {"service.peer_check_ms", "0 out of range"}},
        BadConfig{"rare_peer_check", "service:\n  peer_check_ms: 60001\n",
                  {"service.peer_check_ms", "60001 out of range"}},
        BadConfig{"many_io_threads", "service:\n  io_threads: 65\n", {"service.io_threads", "65 out of range"}},
        BadConfig{"zero_connections", "service:\n  max_connections: 0\n", {"service.max_connections", "0 out of range"}},
        BadConfig{"zero_idle_timeout", "service:\n  idle_timeout_s: 0\n", {"service.idle_timeout_s", "0 out of range"}},
        BadConfig{"small_header_limit", "service:\n  max_header_bytes: 100\n", {"service.max_header_bytes", "100"}},
        BadConfig{"zero_headers", "service:\n  max_headers: 0\n", {"service.max_headers", "0 out of range"}},
        BadConfig{"small_inflight", "service:\n  max_inflight_bytes: 1000\n", {"service.max_inflight_bytes", "1000"}},
        BadConfig{"negative_drain", "service:\n  drain_timeout_s: -1\n", {"service.drain_timeout_s", "-1", "0 .. 3600"}},
        BadConfig{"fast_heartbeat", "service:\n  heartbeat_ms: 1\n", {"service.heartbeat_ms", "1 out of range"}},
        BadConfig{"open_metrics_word", "service:\n  auth:\n    open_metrics: yes\n",
                  {"service.auth.open_metrics", "expected true or false", "'yes'"}},
        BadConfig{"allow_open_writes_number", "service:\n  auth: {allow_open_writes: 1}\n",
                  {"service.auth.allow_open_writes", "'1'"}},
        BadConfig{"tls_unknown_key", "service:\n  tls:\n    ca_file: ca.pem\n", {"unknown key 'service.tls.ca_file'"}},
        BadConfig{"auth_key_list", "service:\n  auth:\n    keys_file: [a, b]\n", {"service.auth.keys_file", "list"}},
        BadConfig{"negative_lock_wait", "storage:\n  lock_wait_s: -1\n", {"storage.lock_wait_s", "-1", "0 .. 86400"}},
        BadConfig{"lock_wait_word", "storage:\n  lock_wait_s: forever\n", {"storage.lock_wait_s", "'forever'"}},
        BadConfig{"lock_wait_hex", "storage:\n  lock_wait_s: 0x10\n", {"storage.lock_wait_s", "expected a number", "'0x10'"}},
        BadConfig{"timeout_hex_float", "comm:\n  timeout_s: 0x1p3\n", {"comm.timeout_s", "expected a number", "'0x1p3'"}},
        BadConfig{"seconds_leading_blank", "comm:\n  timeout_s: \" 5\"\n", {"comm.timeout_s", "expected a number", "' 5'"}},
        BadConfig{"zero_keep_snapshots", "storage:\n  keep_snapshots: 0\n", {"storage.keep_snapshots", "0 out of range", "1 .. 1000"}},
        BadConfig{"negative_snapshot_interval", "storage:\n  snapshot_interval_s: -5\n",
                  {"storage.snapshot_interval_s", "-5", "0 .. 31536000"}},
        BadConfig{"io_direct_reads_word", "io:\n  direct_reads: maybe\n", {"io.direct_reads", "expected true or false", "'maybe'"}},
        BadConfig{"io_f16c_number", "io:\n  f16c: 2\n", {"io.f16c", "'2'"}},
        BadConfig{"io_f16c_empty", "io:\n  f16c:\n", {"io.f16c", "''"}},
        BadConfig{"io_unknown_key", "io:\n  threads: 2\n", {"unknown key 'io.threads'"}},
        BadConfig{"misspelt_section_of_a_list_key", "corpos:\n  attributes: [a]\n",
                  {"bad.yaml:1: unknown key 'corpos'; did you mean 'corpus'?"}},
        // A repeated key is refused wherever it is repeated, naming both lines.
        BadConfig{"duplicate_key", "search:\n  k_max: 10\n  batch_max: 4\n  k_max: 20\n",
                  {"key 'search.k_max' given twice (lines 2 and 4)"}},
        BadConfig{"duplicate_key_same_value", "search:\n  k_max: 10\n  k_max: 10\n", {"'search.k_max' given twice"}},
        BadConfig{"duplicate_section", "search:\n  k_max: 10\nengine:\n  threads: 1\nsearch:\n  batch_max: 4\n",
                  {"key 'search' given twice (lines 1 and 5)"}},
        BadConfig{"duplicate_flow_key", "search: {k_max: 10, k_max: 20}\n", {"'search.k_max' given twice"}},
        BadConfig{"duplicate_dotted_key", "search:\n  k_max: 10\nsearch.k_max: 20\n",
                  {"key 'search.k_max' given twice (lines 2 and 3)"}},
        BadConfig{"two_documents", "---\ncorpus:\n  path: a.h5\n---\ncorpus:\n  path: b.h5\n",
                  {"the file holds more than one YAML document (separated by '---'); a config is one document"}},
        BadConfig{"not_a_mapping", "- a\n- b\n", {"expected a mapping"}},
        BadConfig{"invalid_yaml", "search: {k_max: 3\n", {"invalid YAML"}}),
    [](const ::testing::TestParamInfo<BadConfig>& i) { return std::string(i.param.name); });

// "Did you mean": near names are offered, far ones are not; case does not count.
TEST(ClosestName, OffersOnlyNamesATypoAway) {
  const std::vector<std::string> known = {"metric", "dtype", "k_max", "batch_max", "backend"};
  EXPECT_EQ(closest_name("metrc", known), "metric");    // a deletion
  EXPECT_EQ(closest_name("mertic", known), "metric");   // a swap of neighbours
  EXPECT_EQ(closest_name("kmax", known), "k_max");
  EXPECT_EQ(closest_name("Backend", known), "backend");
  EXPECT_EQ(closest_name("batchmx", known), "batch_max");  // 2 edits, 7 characters
  EXPECT_EQ(closest_name("dt", known), "");             // 3 edits from dtype: too far for 2 characters
  EXPECT_EQ(closest_name("threads", known), "");
  EXPECT_EQ(closest_name("x", {}), "");
}

// docs/CONFIG.md's key table has one row for each config key and no row for anything else, and
// configs/example.yaml (which must parse) sets every key but the deprecated service.threads.
TEST(ConfigKeys, TheKeyTableAndTheExampleListEveryKey) {
  const std::string dir = SHARDTOPK_SOURCE_DIR;
  const std::string doc = test::read_text(dir + "/docs/CONFIG.md");
  const std::string example = test::read_text(dir + "/configs/example.yaml");
  ASSERT_FALSE(doc.empty());
  ASSERT_FALSE(example.empty());
  (void)load_config(dir + "/configs/example.yaml");
  const std::vector<std::string> keys = config_keys();
  for (const std::string& k : keys) {
    EXPECT_EQ(test::count_of(doc, "\n| `" + k + "` |"), 1) << "docs/CONFIG.md: one row for " << k;
    const std::string section = k.substr(0, k.find('.')), leaf = k.substr(k.find('.') + 1);
    // The section's block: from "\nsection:" to the next line that is not indented.
    const std::size_t at = example.find("\n" + section + ":");
    std::size_t end = at;
    while (end != std::string::npos && (end = example.find('\n', end + 1)) != std::string::npos &&
           end + 1 < example.size() && (example[end + 1] == ' ' || example[end + 1] == '#')) {
    }
    const std::string block = at == std::string::npos ? "" : example.substr(at, end == std::string::npos ? end : end - at);
    // A nested key (service.tls.cert_file): each part one level deeper, after its parent.
    std::size_t pos = 0;
    std::string indent = "  ", rest = leaf;
    while (pos != std::string::npos) {
      const std::size_t dot = rest.find('.');
      pos = block.find("\n" + indent + rest.substr(0, dot) + ":", pos);
      if (dot == std::string::npos) break;
      rest = rest.substr(dot + 1);
      indent += "  ";
    }
    if (k != "service.threads") EXPECT_NE(pos, std::string::npos) << "configs/example.yaml does not set " << k;
  }
  std::size_t rows = 0;
  for (std::size_t at = doc.find("\n| `"); at != std::string::npos; at = doc.find("\n| `", at + 1)) ++rows;
  EXPECT_EQ(rows, keys.size()) << "docs/CONFIG.md's table has rows that are not config keys";
}

TEST(ConfigErrorsMisc, MissingFile) {
  EXPECT_THAT(error_of([] { load_config("/nonexistent/dir/c.yaml"); }),
              AllOf(HasSubstr("/nonexistent/dir/c.yaml"), HasSubstr("cannot be read: No such file or directory")));
  EXPECT_THAT(error_of([] { load_config("/tmp"); }), HasSubstr("'/tmp' cannot be read: it is a directory"));
}

TEST(ConfigErrorsMisc, ValidateNeedsCorpusPath) {
  const Config c = parse_config("search: {k_max: 5}", "nopath.yaml");
  EXPECT_THAT(error_of([&] { validate(c); }), AllOf(HasSubstr("corpus.path"), HasSubstr("required")));
}

TEST(ConfigService, LimitsDefaultsAndTheDeprecatedThreadsKey) {
  Config c = parse_config("corpus: {path: x.h5}\n");
  EXPECT_EQ(c.service.max_body_bytes, 0);  // derived from batch_max x dim
  EXPECT_EQ(c.service.io_threads, 0);  // from the cores rank 0 may use
  EXPECT_EQ(c.service.poll_us, 100);
  EXPECT_EQ(parse_config("corpus: {path: x.h5}\nservice: {poll_us: 0}\n").service.poll_us, 0);
  EXPECT_EQ(c.service.answer_poll_us, -1);
  EXPECT_EQ(parse_config("corpus: {path: x.h5}\nservice: {answer_poll_us: 0}\n").service.answer_poll_us, 0);
  EXPECT_EQ(c.service.peer_check_ms, 1000);
  EXPECT_EQ(parse_config("corpus: {path: x.h5}\nservice: {peer_check_ms: 5}\n").service.peer_check_ms, 5);
  EXPECT_EQ(parse_config("corpus: {path: x.h5}\nservice: {io_threads: 6}\n").service.io_threads, 6);
  EXPECT_EQ(c.service.threads, 0);
  c = parse_config("corpus: {path: x.h5}\nservice:\n  threads: 96\n  max_body_bytes: 0\n  drain_timeout_s: 0.25\n"
                   "  heartbeat_ms: 50\n  heartbeat_timeout_ms: 100\n  max_connections: 12000\n");
  EXPECT_EQ(c.service.threads, 96);  // accepted (serve warns and ignores it)
  EXPECT_DOUBLE_EQ(c.service.drain_timeout_s, 0.25);
  EXPECT_EQ(c.service.max_connections, 12000);
  EXPECT_NO_THROW(validate(c));
  c.service.heartbeat_timeout_ms = 99;  // less than twice the interval: one late beat would end the job
  EXPECT_THAT(error_of([&] { validate(c); }), AllOf(HasSubstr("service.heartbeat_timeout_ms = 99"),
                                                    HasSubstr("twice service.heartbeat_ms = 50")));
}

// service.tls.*, service.auth.*, service.audit_log: off by default, parsed, round-tripped; the
// certificate and its key go together.
TEST(ConfigService, SecurityKeysDefaultParseAndRoundTrip) {
  Config c = parse_config("corpus: {path: x.h5}\n");
  EXPECT_TRUE(c.service.tls_cert_file.empty() && c.service.tls_key_file.empty());
  EXPECT_TRUE(c.service.auth_keys_file.empty() && c.service.audit_log.empty());
  EXPECT_FALSE(c.service.auth_open_metrics);
  EXPECT_FALSE(c.service.auth_allow_open_writes);
  c = parse_config("corpus: {path: x.h5}\nservice:\n  tls:\n    cert_file: /etc/s/cert.pem\n    key_file: /etc/s/key.pem\n"
                   "  auth:\n    keys_file: /etc/s/keys\n    open_metrics: true\n    allow_open_writes: true\n"
                   "  audit_log: /var/log/s/audit.log\n", "sec.yaml");
  EXPECT_NO_THROW(validate(c));
  const Config d = parse_config(to_yaml(c), "again");
  EXPECT_EQ(d.service.tls_cert_file, "/etc/s/cert.pem");
  EXPECT_EQ(d.service.tls_key_file, "/etc/s/key.pem");
  EXPECT_EQ(d.service.auth_keys_file, "/etc/s/keys");
  EXPECT_TRUE(d.service.auth_open_metrics);
  EXPECT_TRUE(d.service.auth_allow_open_writes);
  EXPECT_EQ(d.service.audit_log, "/var/log/s/audit.log");
  Config o = c;
  apply_override(o, "service.tls.key_file=");
  EXPECT_THAT(error_of([&] { validate(o); }),
              AllOf(HasSubstr("service.tls.cert_file = '/etc/s/cert.pem'"), HasSubstr("service.tls.key_file = ''"),
                    HasSubstr("give both")));
  apply_override(o, "service.tls.cert_file=");
  EXPECT_NO_THROW(validate(o));
  apply_override(o, "service.auth.open_metrics=false");
  EXPECT_FALSE(o.service.auth_open_metrics);
}

TEST(ConfigErrorsMisc, CpuEngineWithNcclIsRejected) {
  const Config c = parse_config("corpus: {path: x.h5}\nengine: {backend: cpu}\ncomm: {backend: nccl}\n");
  EXPECT_THAT(error_of([&] { validate(c); }), HasSubstr("nccl"));
}

// ------------------------------------------------------------------------------ overrides

TEST(ConfigOverride, SetsValuesWithTheSameChecks) {
  Config c = parse_config(kFull);
  apply_override(c, "search.k_max=7");
  apply_override(c, "corpus.dataset=a/b/c");
  apply_override(c, "search.metric=cosine");
  apply_override(c, "engine.dtype=float16");
  apply_override(c, "comm.timeout_s=0.5");
  apply_override(c, "search.metric=auto");
  EXPECT_EQ(c.engine.filter_scan, FilterScan::kAuto);
  apply_override(c, "engine.filter_scan=gathered");
  EXPECT_EQ(c.engine.filter_scan, FilterScan::kGathered);
  EXPECT_EQ(parse_config(to_yaml(c), "again").engine.filter_scan, FilterScan::kGathered);
  EXPECT_TRUE(c.engine.column_orders);
  apply_override(c, "engine.column_orders=false");
  EXPECT_FALSE(c.engine.column_orders);
  EXPECT_FALSE(parse_config(to_yaml(c), "again").engine.column_orders);
  EXPECT_EQ(c.search.k_max, 7);
  EXPECT_EQ(c.corpus.dataset, "a/b/c");
  EXPECT_FALSE(c.search.metric.has_value());
  EXPECT_EQ(c.engine.dtype, Dtype::kFloat16);
  EXPECT_DOUBLE_EQ(c.comm.timeout_s, 0.5);
  apply_override(c, "corpus.path=x=y.h5");  // only the first '=' splits
  EXPECT_EQ(c.corpus.path, "x=y.h5");
}

TEST(ConfigOverride, ErrorsNameKeyAndValue) {
  Config c = parse_config(kFull);
  EXPECT_THAT(error_of([&] { apply_override(c, "search.k_max"); }), HasSubstr("expected key=value"));
  EXPECT_THAT(error_of([&] { apply_override(c, "=5"); }), HasSubstr("expected key=value"));
  EXPECT_THAT(error_of([&] { apply_override(c, "search.kmax=5"); }),
              HasSubstr("override: unknown key 'search.kmax'; did you mean 'search.k_max'?"));
  EXPECT_THAT(error_of([&] { apply_override(c, "search=5"); }),
              HasSubstr("override: 'search' is a section, not a key"));
  EXPECT_THAT(error_of([&] { apply_override(c, "serach.k_max=5"); }),
              HasSubstr("unknown key 'serach.k_max'; did you mean 'search.k_max'?"));
  EXPECT_THAT(error_of([&] { apply_override(c, "colour=red"); }),
              AllOf(HasSubstr("unknown key 'colour' (sections: "), Not(HasSubstr("did you mean"))));
  EXPECT_THAT(error_of([&] { apply_override(c, "search.k_max=0"); }),
              AllOf(HasSubstr("search.k_max"), HasSubstr("out of range")));
  EXPECT_THAT(error_of([&] { apply_override(c, "search.batch_max=-1"); }),
              AllOf(HasSubstr("search.batch_max"), HasSubstr("-1")));
  EXPECT_THAT(error_of([&] { apply_override(c, "search.metric=manhattan"); }), HasSubstr("'manhattan'"));
  EXPECT_THAT(error_of([&] { apply_override(c, "search.k_max=12abc"); }), HasSubstr("'12abc'"));
  // A rejected override leaves the previous value.
  EXPECT_EQ(c.search.k_max, 100);
  EXPECT_EQ(c.search.batch_max, 32);
}

}  // namespace
}  // namespace shardtopk
