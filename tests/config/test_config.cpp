// YAML configuration: parsing, defaults, overrides and every error naming key and value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "shardtopk/config.hpp"
#include "shardtopk/error.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
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
        BadConfig{"unknown_key", "search:\n  kmax: 10\n", {"unknown key 'search.kmax'", "search.k_max"}},
        BadConfig{"unknown_section", "serach:\n  k_max: 10\n", {"unknown key 'serach'"}},
        BadConfig{"unknown_top_scalar", "verbose: true\n", {"unknown key 'verbose'"}},
        BadConfig{"wrong_type_int", "search:\n  k_max: ten\n", {"search.k_max", "expected an integer", "'ten'"}},
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
        BadConfig{"bad_comm", "comm:\n  backend: gloo\n", {"comm.backend", "'gloo'"}},
        BadConfig{"zero_timeout", "comm:\n  timeout_s: 0\n", {"comm.timeout_s", "> 0"}},
        BadConfig{"empty_path", "corpus:\n  path: ''\n", {"corpus.path", "empty"}},
        BadConfig{"small_body_limit", "service:\n  max_body_bytes: 100\n", {"service.max_body_bytes", "100", "0 = derived"}},
        BadConfig{"zero_io_threads", "service:\n  io_threads: 0\n", {"service.io_threads", "0 out of range"}},
        BadConfig{"zero_connections", "service:\n  max_connections: 0\n", {"service.max_connections", "0 out of range"}},
        BadConfig{"zero_idle_timeout", "service:\n  idle_timeout_s: 0\n", {"service.idle_timeout_s", "0 out of range"}},
        BadConfig{"small_header_limit", "service:\n  max_header_bytes: 100\n", {"service.max_header_bytes", "100"}},
        BadConfig{"zero_headers", "service:\n  max_headers: 0\n", {"service.max_headers", "0 out of range"}},
        BadConfig{"small_inflight", "service:\n  max_inflight_bytes: 1000\n", {"service.max_inflight_bytes", "1000"}},
        BadConfig{"negative_drain", "service:\n  drain_timeout_s: -1\n", {"service.drain_timeout_s", "-1", "0 .. 3600"}},
        BadConfig{"fast_heartbeat", "service:\n  heartbeat_ms: 1\n", {"service.heartbeat_ms", "1 out of range"}},
        BadConfig{"negative_lock_wait", "storage:\n  lock_wait_s: -1\n", {"storage.lock_wait_s", "-1", "0 .. 86400"}},
        BadConfig{"lock_wait_word", "storage:\n  lock_wait_s: forever\n", {"storage.lock_wait_s", "'forever'"}},
        BadConfig{"zero_keep_snapshots", "storage:\n  keep_snapshots: 0\n", {"storage.keep_snapshots", "0 out of range", "1 .. 1000"}},
        BadConfig{"negative_snapshot_interval", "storage:\n  snapshot_interval_s: -5\n",
                  {"storage.snapshot_interval_s", "-5", "0 .. 31536000"}},
        BadConfig{"io_direct_reads_word", "io:\n  direct_reads: maybe\n", {"io.direct_reads", "expected true or false", "'maybe'"}},
        BadConfig{"io_f16c_number", "io:\n  f16c: 2\n", {"io.f16c", "'2'"}},
        BadConfig{"io_f16c_empty", "io:\n  f16c:\n", {"io.f16c", "''"}},
        BadConfig{"io_unknown_key", "io:\n  threads: 2\n", {"unknown key 'io.threads'"}},
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

TEST(ConfigErrorsMisc, MissingFile) {
  EXPECT_THAT(error_of([] { load_config("/nonexistent/dir/c.yaml"); }),
              AllOf(HasSubstr("/nonexistent/dir/c.yaml"), HasSubstr("cannot be read")));
}

TEST(ConfigErrorsMisc, ValidateNeedsCorpusPath) {
  const Config c = parse_config("search: {k_max: 5}", "nopath.yaml");
  EXPECT_THAT(error_of([&] { validate(c); }), AllOf(HasSubstr("corpus.path"), HasSubstr("required")));
}

TEST(ConfigService, LimitsDefaultsAndTheDeprecatedThreadsKey) {
  Config c = parse_config("corpus: {path: x.h5}\n");
  EXPECT_EQ(c.service.max_body_bytes, 0);  // derived from batch_max x dim
  EXPECT_EQ(c.service.io_threads, 4);
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
  EXPECT_THAT(error_of([&] { apply_override(c, "search.kmax=5"); }), HasSubstr("unknown key 'search.kmax'"));
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
