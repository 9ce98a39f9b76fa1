// The `shardtopk` command line, run as a user runs it (under mpiexec for search): a bad row in
// one rank's shard ends the job promptly naming the rank and the row, a wrong query dimension
// names both dimensions, `info` lists datasets, `search --out` writes ids, scores and attributes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardtopk/corpus_io.hpp"
#include "tools/oracle.hpp"
#include "shardtopk/types.hpp"
#include "cli_support.hpp"
#include "filter_support.hpp"
#include "filtered_oracle.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/storage.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

using test::CmdResult;

class Cli : public ::testing::Test {
 protected:
  static constexpr std::int64_t kN = 50, kDim = 4, kQ = 6;

  void SetUp() override {
    corpus_ = test::small_ints(kN * kDim, 51, -2, 3);
    test::fix_zero_rows(&corpus_, kDim);  // usable under cosine too
    queries_ = test::small_ints(kQ * kDim, 52, -2, 2);
  }

  CmdResult run(const std::string& cmd) { return test::run_command(cmd, dir_, false); }

  std::string mpi(int ranks) { return test::mpi_prefix(ranks); }

  std::string write_corpus(const std::vector<float>& corpus, std::int64_t dim = kDim) {
    const std::string path = dir_.file("corpus.h5");
    H5Writer w(path);
    w.write_f32("train", corpus.data(), static_cast<std::int64_t>(corpus.size()) / dim, dim);
    w.write_f32("test", queries_.data(), kQ, kDim);
    w.set_attr("distance", std::string("euclidean"));
    w.close();
    return path;
  }

  std::string write_queries(const std::vector<float>& q, std::int64_t dim, const std::string& name = "q.h5") {
    const std::string path = dir_.file(name);
    H5Writer w(path);
    w.write_f32("test", q.data(), static_cast<std::int64_t>(q.size()) / dim, dim);
    w.close();
    return path;
  }

  std::string write_config(const std::string& corpus, const std::string& metric = "l2",
                           const std::string& extra = "", const std::string& name = "c.yaml") {
    const std::string path = dir_.file(name);
    test::write_text(path, "corpus:\n  path: " + corpus + "\nsearch:\n  metric: " + metric +
                               "\n  k_max: 32\n  batch_max: 4\nengine:\n  backend: cpu\n  threads: 1\n"
                               "comm:\n  backend: mpi\n  timeout_s: 20\n" + extra);
    return path;
  }

  test::TempDir dir_;
  std::vector<float> corpus_, queries_;
};

TEST_F(Cli, NanRowInRankOnesShardEndsTheJobPromptlyNamingRankAndRow) {
  // 2 ranks: rank 0 holds rows [0, 25), rank 1 rows [25, 50); row 37 is rank 1's only.
  corpus_[37 * kDim + 2] = std::numeric_limits<float>::quiet_NaN();
  const std::string cfg = write_config(write_corpus(corpus_));
  const std::string q = write_queries(queries_, kDim);
  const CmdResult r = run(mpi(2) + " search --config " + cfg + " --queries " + q + " --k 5");
  EXPECT_NE(r.rc, 0);
  EXPECT_LT(r.seconds, 30.0) << "the job must end promptly, not wait for a timeout";
  EXPECT_THAT(r.err, HasSubstr("rank 1"));
  EXPECT_THAT(r.err, AllOf(HasSubstr("corpus row 37 "), HasSubstr("nan"), HasSubstr("column 2")));
  EXPECT_EQ(test::count_of(r.err, "corpus row 37 "), 1) << "reported once, not once per rank:\n" << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("rank 0: "))) << r.err;
  std::printf("stderr of the failed job:\n%s\n", r.err.c_str());
}

// Invariant 7: a rank that stalls past comm.timeout_s mid-search, or dies mid-search, ends the
// whole job promptly and non-zero; the stall is reported by the rank that timed out, naming it.
TEST_F(Cli, StalledRankEndsTheJobWithinTheTimeout) {
  if (!SHARDTOPK_FAULTS_BUILT) GTEST_SKIP() << "built without fault injection (-DSHARDTOPK_FAULT_INJECTION=ON)";
  const std::string cfg = write_config(write_corpus(corpus_));
  const std::string q = write_queries(queries_, kDim);
  const CmdResult r = run(mpi(2) + " search --config " + cfg + " --queries " + q +
                          " --k 5 --set comm.timeout_s=2 --set testing.fault=stall:1:1:60");
  EXPECT_NE(r.rc, 0);
  EXPECT_LT(r.seconds, 2.0 + 15.0) << "must end within comm.timeout_s plus a few seconds";
  EXPECT_THAT(r.err, AllOf(HasSubstr("rank 0: "), HasSubstr("did not complete within 2 s"),
                           HasSubstr("stalled or dead")))
      << r.err;
}

TEST_F(Cli, RankThatExitsMidSearchEndsTheJob) {
  if (!SHARDTOPK_FAULTS_BUILT) GTEST_SKIP() << "built without fault injection (-DSHARDTOPK_FAULT_INJECTION=ON)";
  const std::string cfg = write_config(write_corpus(corpus_));
  const std::string q = write_queries(queries_, kDim);
  const CmdResult r = run(mpi(2) + " search --config " + cfg + " --queries " + q +
                          " --k 5 --set comm.timeout_s=5 --set testing.fault=exit:1:1");
  EXPECT_NE(r.rc, 0);
  EXPECT_LT(r.seconds, 5.0 + 15.0);
  EXPECT_THAT(r.err, HasSubstr("rank 1 exits during batch 1")) << r.err;
}

// Ranges and pages from the command line (inner product, small integers: exact): --min-score's
// per-query totals (--timings-json) and rows (--out, with counts) are the float64 oracle's; a
// second page after the first page's last (score, id) continues the order; the other metric's
// bound and a malformed --search-after are refused naming them.
TEST_F(Cli, RangesAndPagesFromTheCommandLine) {
  const std::string cfg = write_config(write_corpus(corpus_), "inner_product");
  const std::string q = write_queries(queries_, kDim);
  constexpr int kLimit = 5;
  const double bound = 3.0;
  std::vector<std::vector<std::int64_t>> order(kQ);  // each query's whole order, by the oracle
  std::vector<std::vector<double>> score(kQ);
  for (int i = 0; i < kQ; ++i)
    oracle::topk(Metric::kInnerProduct, corpus_.data(), kN, nullptr, queries_.data() + i * kDim, 1, kDim,
                 static_cast<int>(kN), &order[i], &score[i]);
  const std::string out = dir_.file("r.h5");
  const CmdResult r = run(mpi(2) + " search -c " + cfg + " -q " + q + " --min-score 3 --limit " +
                          std::to_string(kLimit) + " --timings-json " + dir_.file("t.json") + " --out " + out);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("range min_score 3: rows within it per query"));
  const nlohmann::json t = nlohmann::json::parse(test::read_text(dir_.file("t.json")));
  std::int64_t rows = 0, cols = 0;
  const std::vector<std::int64_t> ids = read_int64_matrix(out, "ids", &rows, &cols);
  ASSERT_EQ(cols, kLimit);
  const std::vector<std::int64_t> counts = read_int64_vector(out, "counts");
  ASSERT_EQ(counts.size(), static_cast<size_t>(kQ));
  for (int i = 0; i < kQ; ++i) {
    const auto within = std::count_if(score[i].begin(), score[i].end(), [&](double s) { return s >= bound; });
    EXPECT_EQ(t["totals"][i].get<std::int64_t>(), within) << "query " << i;
    ASSERT_EQ(counts[i], std::min<std::int64_t>(kLimit, within)) << "query " << i;
    for (int j = 0; j < counts[i]; ++j) EXPECT_EQ(ids[i * kLimit + j], order[i][j]) << "query " << i << " at " << j;
  }
  // page 2 of query 0: after its 4th row
  const std::string after = nlohmann::json(score[0][3]).dump() + "," + std::to_string(order[0][3]);
  const CmdResult p = run(mpi(2) + " search -c " + cfg + " -q " + q + " --max-queries 1 --k 6 --search-after " + after +
                          " --out " + out);
  ASSERT_EQ(p.rc, 0) << p.err;
  const std::vector<std::int64_t> page = read_int64_matrix(out, "ids", &rows, &cols);
  ASSERT_EQ(page.size(), 6u);
  for (int j = 0; j < 6; ++j) EXPECT_EQ(page[j], order[0][4 + j]) << "page 2 at " << j;
  CmdResult bad = run(mpi(1) + " search -c " + cfg + " -q " + q + " --max-distance 2");
  EXPECT_NE(bad.rc, 0);
  EXPECT_THAT(bad.err, HasSubstr("--max-distance is for l2")) << bad.err;
  EXPECT_THAT(bad.err, Not(HasSubstr(" read its "))) << "refused after the ingest:\n" << bad.err;
  bad = run(mpi(1) + " search -c " + cfg + " -q " + q + " --search-after 0.5");
  EXPECT_NE(bad.rc, 0);
  EXPECT_THAT(bad.err, HasSubstr("--search-after '0.5': give SCORE,ID")) << bad.err;
  bad = run(mpi(1) + " search -c " + cfg + " -q " + q + " --search-after 1e40,5");
  EXPECT_NE(bad.rc, 0);
  EXPECT_THAT(bad.err, HasSubstr("--search-after '1e40,5': the score 1e40 is beyond float32's range")) << bad.err;
}

// An output is never a file the corpus's rows come from: here the corpus's 'train' is an HDF5
// external link into another file, which `search -o` and `knn-graph -o --overwrite` refuse to
// replace (it was truncated and replaced by the answers), byte for byte unchanged.
TEST_F(Cli, AnOutputIsNeverTheFileAnExternalLinkReadsRowsFrom) {
  const std::string target = dir_.file("rows.h5");
  {
    H5Writer w(target);
    w.write_f32("vectors", corpus_.data(), kN, kDim);
    w.close();
  }
  const std::string link = dir_.file("linked.h5");
  {
    H5Writer w(link);
    w.write_f32("test", queries_.data(), kQ, kDim);
    w.close();
    const hid_t f = H5Fopen(link.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Lcreate_external("rows.h5", "vectors", f, "train", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(f);
  }
  const std::string cfg = write_config(link);
  const std::vector<unsigned char> before = test::read_bytes(target);
  CmdResult r = run(mpi(1) + " search -c " + cfg + " -q " + link + " -k 3 -o " + target);
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("it is the corpus's linked data file")) << r.err;
  r = run(mpi(1) + " knn-graph -c " + cfg + " -k 3 --overwrite -o " + target);
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("it is the corpus's linked data file")) << r.err;
  EXPECT_TRUE(test::read_bytes(target) == before) << "the file holding the corpus's rows was changed";
  // the same search to another file runs
  r = run(mpi(1) + " search -c " + cfg + " -q " + link + " -k 3 -o " + dir_.file("answers.h5"));
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST_F(Cli, QueriesWithTheWrongDimensionNameBothDimensions) {
  const std::string cfg = write_config(write_corpus(corpus_));
  const std::string q = write_queries(test::small_ints(3 * 5, 53), 5);
  for (int ranks : {1, 2}) {
    const CmdResult r = run(mpi(ranks) + " search --config " + cfg + " --queries " + q + " --k 5");
    EXPECT_NE(r.rc, 0);
    EXPECT_LT(r.seconds, 30.0);
    EXPECT_THAT(r.err, AllOf(HasSubstr("queries have dimension 5"), HasSubstr("corpus has 4"))) << r.err;
    EXPECT_EQ(test::count_of(r.err, "queries have dimension 5"), 1) << r.err;
    EXPECT_THAT(r.err, Not(HasSubstr(" read its "))) << "refused after the ingest:\n" << r.err;
  }
}

TEST_F(Cli, BadQueryFileAndArgumentsAreNamed) {
  const std::string cfg = write_config(write_corpus(corpus_));
  auto bad = queries_;
  bad[4 * kDim + 1] = std::numeric_limits<float>::infinity();
  const std::string q_inf = write_queries(bad, kDim, "inf.h5");
  CmdResult r = run(mpi(2) + " search --config " + cfg + " --queries " + q_inf + " --k 5");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("query 4 "), HasSubstr("inf"))) << r.err;

  const std::string q = write_queries(queries_, kDim);
  r = run(mpi(2) + " search --config " + cfg + " --queries " + q + " --k 0");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("--k 0 out of range"), HasSubstr("allowed 1 .. 32"))) << r.err;

  // K > k_max is refused before the corpus is read, with the key to raise
  r = run(mpi(2) + " search --config " + cfg + " --queries " + q + " --k 51");  // K > N = 50 (k_max 32)
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("--k 51 out of range"), HasSubstr("--set search.k_max=51"))) << r.err;
  EXPECT_EQ(test::count_of(r.err, "--k 51 out of range"), 1) << r.err;

  // an output folder that does not exist is refused before the search, not after it
  r = run(mpi(1) + " search --config " + cfg + " --queries " + q + " --k 5 -o " + dir_.file("no/such/dir/r.h5"));
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("does not exist or is not writable")) << r.err;

  r = run(mpi(1) + " search --config " + cfg + " --queries " + q + " --k 5 --batch -3");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("--batch -3 out of range"), HasSubstr("or 0 for search.batch_max"))) << r.err;

  // argument errors found by the option parser read like the others: prefix, value, where to look, exit 2
  r = run(std::string(SHARDTOPK_BIN) + " search --config " + cfg + " --queries " + q + " --k abc");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("shardtopk: error: "), HasSubstr("abc"), HasSubstr("--help"))) << r.err;
  r = run(std::string(SHARDTOPK_BIN) + " search --config " + dir_.file("absent.yaml") + " --queries " + q);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("shardtopk: error: "), HasSubstr("absent.yaml"))) << r.err;

  r = run(mpi(1) + " search --config " + cfg + " --queries " + dir_.file("absent.h5") + " --k 5");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("--queries: cannot open"), HasSubstr("absent.h5"), Not(HasSubstr("corpus.path"))))
      << r.err;
  // a missing queries file under data/: the importer hint, not corpus.path
  r = run("cd " + dir_.path() + " && " + mpi(1) + " search --config " + cfg + " --queries data/q.h5 --k 5");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("--queries: cannot open 'data/q.h5'"), Not(HasSubstr("corpus.path")))) << r.err;
  // a missing corpus is a config mistake: the key, the config and the override are named
  r = run(mpi(2) + " search --config " + cfg + " --queries " + q + " --k 5 --set corpus.path=" + dir_.file("gone.h5"));
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("corpus.path '" + dir_.file("gone.h5") + "': No such file"), HasSubstr(cfg),
                           HasSubstr("--set corpus.path=FILE")))
      << r.err;
  EXPECT_EQ(test::count_of(r.err, "corpus.path '"), 1) << "rank 0 speaks for all:\n" << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("beside it"))) << r.err;
  // a file beside it whose name begins with the missing one's (the demo's q1000 import) is named
  test::write_text(dir_.file("gone-q1000.h5"), "x");
  r = run(mpi(1) + " search --config " + cfg + " --queries " + q + " --k 5 --set corpus.path=" + dir_.file("gone.h5"));
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("No such file or directory; beside it: '" + dir_.file("gone-q1000.h5") + "';")) << r.err;
  // serve says so before it opens its port (rank 0 for all), and plan alike; a storage.dir
  // whose manifest names a snapshot needs no corpus file (plan reads the snapshot)
  r = run(mpi(2) + " serve --config " + cfg + " --set service.port=0 --set corpus.path=" + dir_.file("gone.h5"));
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("corpus.path '" + dir_.file("gone.h5") + "': No such file or directory; beside it: '" +
                                     dir_.file("gone-q1000.h5") + "';"),
                           Not(HasSubstr("listening"))))
      << r.err;
  EXPECT_EQ(test::count_of(r.err, "corpus.path '"), 1) << "rank 0 speaks for all:\n" << r.err;
  r = run(std::string(SHARDTOPK_BIN) + " plan --config " + cfg + " --ranks 2 --set corpus.path=" + dir_.file("gone.h5"));
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("corpus.path '" + dir_.file("gone.h5") + "': No such file or directory; beside it:"))
      << r.err;

  r = run(mpi(1) + " search --config " + cfg + " --queries " + q + " --queries-dataset nope --k 5");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("has no dataset 'nope'"), HasSubstr("test [6,4] float32"))) << r.err;

  const std::string bad_cfg = write_config(dir_.file("corpus.h5"), "l2", "search2:\n  x: 1\n", "bad.yaml");
  r = run(mpi(2) + " search --config " + bad_cfg + " --queries " + q + " --k 5");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("unknown key 'search2'")) << r.err;
  EXPECT_EQ(test::count_of(r.err, "unknown key 'search2'"), 1) << "rank 0 speaks for all:\n" << r.err;

  r = run(mpi(1) + " search --config " + cfg + " --queries " + q + " --k 5 --set search.metric=taxicab");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("'taxicab'"), HasSubstr("allowed: inner_product, cosine, l2, auto"))) << r.err;
}

// search.metric: the ann-benchmarks names are deprecated aliases: the same answer as the
// canonical name, with one warning per job (rank 0) that names the replacement.
// CLI11 reads integers with strtoll in base 0, which saturates past 64 bits and reads a leading
// 0 as octal: the 64-bit options take decimal text in range, so "010" queries are 10, not 8.
TEST_F(Cli, SixtyFourBitOptionsTakeDecimalTextInRange) {
  const std::string cfg = write_config(write_corpus(corpus_));
  const std::string q = write_queries(test::small_ints(12 * kDim, 55, -2, 2), kDim);
  const std::string base = mpi(1) + " search --config " + cfg + " --queries " + q + " --k 3";
  CmdResult r = run(base + " --max-queries 99999999999999999999");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("--max-queries: '99999999999999999999' is outside -9223372036854775808 .. "
                               "9223372036854775807"))
      << r.err;
  r = run(base + " --max-queries 0x10");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("--max-queries: '0x10' is not a decimal integer")) << r.err;
  const std::string out = dir_.file("ten.h5");
  r = run(base + " --max-queries 010 --out " + out);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::int64_t rows = 0, cols = 0;
  read_int64_matrix(out, "ids", &rows, &cols);
  EXPECT_EQ(rows, 10);
  EXPECT_EQ(cols, 3);
  r = run(base + " --max-queries -1 --out " + out);
  ASSERT_EQ(r.rc, 0) << r.err;
  read_int64_matrix(out, "ids", &rows, &cols);
  EXPECT_EQ(rows, 12);
}

TEST_F(Cli, DeprecatedMetricAliasGivesTheSameAnswerAndOneWarning) {
  const std::string corpus = write_corpus(corpus_);
  const std::string q = write_queries(queries_, kDim);
  std::vector<test::Answer> got;
  for (const char* m : {"l2", "euclidean"}) {
    const std::string out = dir_.file(std::string(m) + ".h5");
    const CmdResult r = run(mpi(2) + " search --config " + write_config(corpus, m) + " --queries " + q +
                            " --k 5 --out " + out);
    ASSERT_EQ(r.rc, 0) << r.err;
    if (std::string(m) == "euclidean") {
      EXPECT_EQ(test::count_of(r.err, "'euclidean' is a deprecated alias of 'l2'"), 1) << r.err;
      EXPECT_THAT(r.err, HasSubstr("write l2")) << r.err;
    } else {
      EXPECT_THAT(r.err, Not(HasSubstr("deprecated"))) << r.err;
    }
    std::int64_t rows = 0, cols = 0;
    test::Answer a;
    a.ids = read_int64_matrix(out, "ids", &rows, &cols);
    a.scores = read_matrix(out, "scores").data;
    got.push_back(a);
  }
  test::expect_bit_identical(got[1], got[0], "search.metric euclidean vs l2");
}

TEST_F(Cli, ZeroNormQueryUnderCosineIsNamed) {
  const std::string cfg = write_config(write_corpus(corpus_), "cosine");
  auto q = test::small_ints(4 * kDim, 54, 1, 2);
  std::fill(q.begin() + 2 * kDim, q.begin() + 3 * kDim, 0.0f);
  const CmdResult r = run(mpi(2) + " search --config " + cfg + " --queries " + write_queries(q, kDim) + " --k 3");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("query 2 "), HasSubstr("zero norm"))) << r.err;
}

TEST_F(Cli, InfoListsDatasetsAndAttributes) {
  const std::string path = write_corpus(corpus_);
  CmdResult r = run(std::string(SHARDTOPK_BIN) + " info " + path);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("train"), HasSubstr("[50, 4]"), HasSubstr("test"), HasSubstr("[6, 4]"),
                           HasSubstr("float32"), HasSubstr("distance = euclidean")));
  r = run(std::string(SHARDTOPK_BIN) + " info --json " + path);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("\"train\""), HasSubstr("\"euclidean\"")));
  r = run(std::string(SHARDTOPK_BIN) + " info " + dir_.file("absent.h5"));
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("cannot open"), HasSubstr("absent.h5")));
  // info has no config: a missing file under data/ points at the importer, not at corpus.path
  r = run("cd " + dir_.path() + " && " + SHARDTOPK_BIN + " info data/absent.h5");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("cannot open 'data/absent.h5'"), HasSubstr("launch/import_datasets.sh"),
                           Not(HasSubstr("corpus.path"))))
      << r.err;
}

// info --json gives numeric attributes as JSON numbers (integers exactly, beyond 6 digits too),
// strings as strings; the table prints the same values.
TEST_F(Cli, InfoJsonGivesNumbersAsNumbers) {
  const std::string path = dir_.file("attrs.h5");
  H5Writer w(path);
  w.write_f32("train", corpus_.data(), kN, kDim);
  w.set_attr("rows", static_cast<std::int64_t>(1234567891));
  w.set_attr("ratio", 0.25);
  w.set_attr("name", std::string("42"));
  w.close();
  CmdResult r = run(std::string(SHARDTOPK_BIN) + " info --json " + path);
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& a = j.at("attributes");
  EXPECT_TRUE(a.at("rows").is_number_integer()) << a.dump();
  EXPECT_EQ(a.at("rows").get<std::int64_t>(), 1234567891);
  EXPECT_TRUE(a.at("ratio").is_number_float()) << a.dump();
  EXPECT_EQ(a.at("ratio").get<double>(), 0.25);
  EXPECT_TRUE(a.at("name").is_string()) << a.dump();
  EXPECT_EQ(j.at("datasets").at(0).at("shape"), nlohmann::json({kN, kDim}));
  r = run(std::string(SHARDTOPK_BIN) + " info " + path);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("rows = 1234567891"), HasSubstr("ratio = 0.25"), HasSubstr("name = 42"))) << r.out;
}

TEST_F(Cli, SearchOutWritesIdsScoresAndAttributes) {
  const std::string corpus = write_corpus(corpus_);
  const std::string cfg = write_config(corpus);
  const std::string q = write_queries(queries_, kDim);
  const std::string out = dir_.file("r.h5");
  const int k = 7;
  const CmdResult r = run(mpi(2) + " search --config " + cfg + " --queries " + q + " --k " + std::to_string(k) + " --out " +
                    out + " --timings-json " + dir_.file("t.json"));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::int64_t rows = 0, cols = 0;
  const auto ids = read_int64_matrix(out, "ids", &rows, &cols);
  EXPECT_EQ(rows, kQ);
  EXPECT_EQ(cols, k);
  const HostMatrix scores = read_matrix(out, "scores");
  EXPECT_EQ(scores.rows, kQ);
  EXPECT_EQ(scores.cols, k);
  // Small integers: the ids and squared distances are exactly the oracle's.
  test::Answer got{ids, scores.data};
  test::expect_exact(Metric::kL2, corpus_, kN, nullptr, queries_, kQ, kDim, k, got, "search --out");

  const FileInfo fi = inspect_file(out);
  const auto attr = [&](const std::string& key) {
    const auto it = fi.attributes.find(key);
    return it == fi.attributes.end() ? std::string("<missing>") : it->second;
  };
  EXPECT_EQ(attr("metric"), "l2");
  EXPECT_EQ(attr("k"), "7");
  EXPECT_EQ(attr("world_size"), "2");
  EXPECT_EQ(attr("engine"), "cpu");
  EXPECT_EQ(attr("comm"), "mpi");
  EXPECT_EQ(attr("dtype"), "float32");
  EXPECT_EQ(attr("corpus_path"), corpus);
  EXPECT_EQ(attr("version"), version());
  EXPECT_EQ(read_string_attribute(out, "corpus_dataset"), "train");
  EXPECT_EQ(read_string_attribute(out, "metric"), "l2");
  EXPECT_THAT(test::read_text(dir_.file("t.json")), HasSubstr("\"world_size\": 2"));
}

TEST_F(Cli, RankCountAndBatchSizeDoNotChangeTheResultFile) {
  // 1 rank with batches of 4 (search.batch_max), 3 ranks, 2 ranks with --batch 1: identical
  // ids and bit-identical scores in the result files.
  const std::string cfg = write_config(write_corpus(corpus_), "inner_product");
  const std::string q = write_queries(test::random_floats(kQ * kDim, 55), kDim);
  struct Variant {
    int ranks;
    std::string extra;
  };
  const std::vector<Variant> variants = {{1, ""}, {3, ""}, {2, " --batch 1"}};
  std::vector<test::Answer> got;
  for (const auto& v : variants) {
    const std::string out = dir_.file("r" + std::to_string(got.size()) + ".h5");
    const CmdResult r = run(mpi(v.ranks) + " search --config " + cfg + " --queries " + q + " --k 9 --out " + out + v.extra);
    ASSERT_EQ(r.rc, 0) << r.err;
    std::int64_t rows = 0, cols = 0;
    test::Answer a;
    a.ids = read_int64_matrix(out, "ids", &rows, &cols);
    a.scores = read_matrix(out, "scores").data;
    got.push_back(a);
  }
  test::expect_bit_identical(got[1], got[0], "3 ranks vs 1");
  test::expect_bit_identical(got[2], got[0], "2 ranks, batch 1 vs 1 rank, batch 4");
}

// All values of a float32 dataset as libhdf5 reads them (padding scores are infinite, which the
// product's readers refuse as corpus values).
std::vector<float> read_f32_raw(const std::string& path, const std::string& name) {
  std::vector<float> v;
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return v;
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  if (d >= 0) {
    const hid_t sp = H5Dget_space(d);
    v.resize(static_cast<size_t>(H5Sget_simple_extent_npoints(sp)));
    if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) v.clear();
    H5Sclose(sp);
    H5Dclose(d);
  }
  H5Fclose(f);
  return v;
}

// search --filter-json (text or @FILE): one filter for every query; the result file holds
// counts [Q] and, past each count, padding; answers equal the float64 oracle over the rows that
// pass, at 1 and 2 ranks; a bad filter is refused before the ingest naming the attribute; eval
// refuses filtered results; plan and info show the attributes.
TEST_F(Cli, SearchWithAFilterWritesCountsAndMatchesTheOracle) {
  const std::string corpus = dir_.file("attr.h5");
  std::vector<std::int64_t> tenant(kN);
  std::vector<double> weight(kN);
  for (std::int64_t r = 0; r < kN; ++r) {
    tenant[r] = r / 10;
    weight[r] = 0.5 * static_cast<double>(r % 4);
  }
  {
    H5Writer w(corpus);
    w.write_f32("train", corpus_.data(), kN, kDim);
    w.write_f32("test", queries_.data(), kQ, kDim);
    w.write_i64("tenant", tenant.data(), kN, 0);
    w.write_f64("meta/weight", weight.data(), kN, 0);
    w.close();
  }
  const std::string cfg = dir_.file("attr.yaml");
  test::write_text(cfg, "corpus:\n  path: " + corpus + "\n  attributes: [tenant, meta/weight]\nsearch:\n  metric: l2\n"
                        "  k_max: 32\n  batch_max: 4\nengine:\n  backend: cpu\n  threads: 1\n"
                        "comm:\n  backend: mpi\n  timeout_s: 20\n");
  const std::string filter = R"({"all": [{"in": {"tenant": [1, 3]}}, {"not": {"eq": {"weight": 1.5}}}]})";  // 14 rows
  const AttributeTable table({{"tenant", AttributeType::kInt64, tenant, {}}, {"weight", AttributeType::kFloat64, {}, weight}},
                             test::iota_ids(kN), 1);
  const test::Subset pass = test::passing_rows(corpus_, kN, kDim, nullptr, [&](std::int64_t r) {
    return test::oracle_passes(nlohmann::json::parse(filter), table, r);
  });
  ASSERT_EQ(pass.n, 14);
  test::write_text(dir_.file("f.json"), filter);
  constexpr int k = 20;  // more than the 14 rows that pass
  for (const std::string& arg : {"'" + filter + "'", "@" + dir_.file("f.json")}) {
    for (int ranks : {1, 2}) {
      const std::string out = dir_.file("r.h5");
      const CmdResult r = run(mpi(ranks) + " search -c " + cfg + " -q " + corpus + " -k " + std::to_string(k) +
                              " --filter-json " + arg + " --out " + out);
      ASSERT_EQ(r.rc, 0) << r.err;
      EXPECT_THAT(r.out, HasSubstr("filter: 84 of 120 results (queries with fewer than k: 6)"));
      std::int64_t rows = 0, cols = 0;
      const std::vector<std::int64_t> ids = read_int64_matrix(out, "ids", &rows, &cols);
      const std::vector<float> scores = read_f32_raw(out, "scores");
      const std::vector<std::int64_t> counts = read_int64_vector(out, "counts");
      ASSERT_EQ(scores.size(), static_cast<size_t>(kQ * k));
      ASSERT_EQ(rows, kQ);
      ASSERT_EQ(cols, k);
      ASSERT_EQ(counts.size(), static_cast<size_t>(kQ));
      EXPECT_EQ(read_string_vector(out, "filter"), std::vector<std::string>{nlohmann::json::parse(filter).dump()});
      for (int q = 0; q < kQ; ++q)
        test::expect_filtered_answer(Metric::kL2, pass, kDim, queries_.data() + q * kDim, k, ids.data() + q * k,
                                     scores.data() + q * k, static_cast<int>(counts[q]), /*exact=*/true,
                                     arg.substr(0, 1) + " " + std::to_string(ranks) + " rank(s), query " + std::to_string(q));
      const CmdResult ev = run(test::mpi_prefix(1) + " eval -r " + out + " -t " + corpus);
      EXPECT_NE(ev.rc, 0);
      EXPECT_THAT(ev.err, HasSubstr("results of a filtered search"));
    }
  }
  // Bad filters: refused before the ingest, naming the attribute or the value.
  const CmdResult bad = run(mpi(2) + " search -c " + cfg + " -q " + corpus + " -k 5 --filter-json '{\"eq\": {\"tenat\": 1}}'");
  EXPECT_NE(bad.rc, 0);
  EXPECT_THAT(bad.err, HasSubstr("--filter-json: filter: unknown attribute 'tenat' (known: tenant, weight)"));
  EXPECT_THAT(bad.err, Not(HasSubstr("engine cpu built"))) << "refused after the ingest";
  const CmdResult bad_type = run(mpi(1) + " search -c " + cfg + " -q " + corpus + " -k 5 --filter-json '{\"eq\": {\"tenant\": 1.5}}'");
  EXPECT_NE(bad_type.rc, 0);
  EXPECT_THAT(bad_type.err, HasSubstr("1.5"));
  const CmdResult no_file = run(mpi(1) + " search -c " + cfg + " -q " + corpus + " -k 5 --filter-json @" + dir_.file("none.json"));
  EXPECT_NE(no_file.rc, 0);
  EXPECT_THAT(no_file.err, HasSubstr("none.json: cannot read the file"));
  const CmdResult folder = run(mpi(1) + " search -c " + cfg + " -q " + corpus + " -k 5 --filter-json @" + dir_.path());
  EXPECT_NE(folder.rc, 0);
  EXPECT_THAT(folder.err, HasSubstr(": it is a directory; name the file that holds the filter")) << folder.err;
  // An empty filter text is refused, not taken as "no filter" (the search would run unfiltered).
  // an attribute the corpus lacks is the config's mistake, named as such (not the filter's)
  const CmdResult no_column = run(mpi(1) + " search -c " + cfg + " -q " + corpus +
                                  " -k 5 --set corpus.attributes=[tenant,nope] --filter-json '{\"eq\": {\"tenant\": 1}}'");
  EXPECT_NE(no_column.rc, 0);
  EXPECT_THAT(no_column.err, AllOf(HasSubstr("corpus.attributes: '" + corpus + "' has no dataset 'nope'"),
                                   Not(HasSubstr("--filter-json"))))
      << no_column.err;
  const CmdResult empty = run(mpi(1) + " search -c " + cfg + " -q " + corpus + " -k 5 --filter-json ''");
  EXPECT_NE(empty.rc, 0);
  EXPECT_THAT(empty.err, HasSubstr("--filter-json: empty filter; omit the option for an unfiltered search"));
  EXPECT_THAT(empty.err, Not(HasSubstr("engine cpu built"))) << "refused after the ingest";
  // plan and info show the attributes
  const CmdResult plan = run(test::mpi_prefix(1) + " plan -c " + cfg + " -n 2");
  EXPECT_EQ(plan.rc, 0) << plan.err;
  EXPECT_THAT(plan.out, HasSubstr("attributes (corpus.attributes; filters name these): tenant (int64), weight (float64)"));
  const CmdResult info = run(test::mpi_prefix(1) + " info " + corpus);
  EXPECT_EQ(info.rc, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("name them in corpus.attributes): meta/weight, tenant"));
}

// `storage info` and `storage verify` on a directory another process holds: the facts, exit 0
// on a good directory, 3 for a torn log tail only, 1 for damage (named), JSON alike.
TEST_F(Cli, StorageInfoAndVerifyReportAndExitByWhatTheyFind) {
  const std::string dir = dir_.file("store");
  StorageOptions o;
  o.dir = dir;
  o.dim = kDim;
  o.metric = Metric::kL2;
  auto st = std::make_unique<Storage>(o);
  st->record_capacity(3048);
  const std::vector<std::int64_t> ids{1, 2, 3};
  for (int i = 0; i < 3; ++i) {
    UpsertRows u;
    u.rows = 1;
    u.ids = &ids[static_cast<std::size_t>(i)];
    u.vectors = corpus_.data() + i * kDim;
    st->upsert(u);
  }
  const std::string bin = SHARDTOPK_BIN;
  CmdResult r = run(bin + " storage info " + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("dim 4, metric l2"), HasSubstr("3048 row slots"),
                           HasSubstr("3 record(s) after the snapshot"), HasSubstr("last seq 3")));
  r = run(bin + " storage info --json " + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("log_records"), 3);
  r = run(bin + " storage verify " + dir);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("every check passed"));
  st.reset();
  const std::string seg = dir + "/wal-00000000000000000001.log";
  const auto size = std::filesystem::file_size(seg);
  std::filesystem::resize_file(seg, size - 3);
  r = run(bin + " storage verify " + dir);  // closed cleanly: the cut record was acknowledged
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("1 acknowledged record(s), seq 3 .. 3, are missing"));
  {  // as a crash leaves the manifest: the cut record is not known to be acknowledged
    std::string m = test::read_text(dir + "/MANIFEST.json");
    const auto at = m.find("  \"log_seq\"");
    ASSERT_NE(at, std::string::npos) << m;
    m.erase(at, m.find('\n', at) + 1 - at);
    test::write_text(dir + "/MANIFEST.json", m);
  }
  r = run(bin + " storage verify " + dir);
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("TORN     wal-00000000000000000001.log: a start-up cuts "));
  std::filesystem::resize_file(seg, size);  // zeros: still only a tail
  test::flip_bit(seg, 40, 0);               // inside record 1, followed by later group commits
  r = run(bin + " storage verify --json " + dir);
  EXPECT_EQ(r.rc, 1) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j.at("problems").empty()) << r.out;
  EXPECT_EQ(j.at("problems").at(0).at("kind"), "damage");
  EXPECT_THAT(j.at("problems").at(0).at("what").get<std::string>(), HasSubstr("at offset 32"));
  // A path that does not exist (mistyped) is not a storage directory either: exit 4, not 1
  // ("damaged": restore from a backup)
  r = run(bin + " storage verify " + dir_.file("absent"));
  EXPECT_EQ(r.rc, 4) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("does not exist: not a storage directory, nothing was verified; exit 4"));
  // `storage info` of that path says it does not exist (not that it is no directory)
  r = run(bin + " storage info " + dir_.file("absent"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("absent' does not exist"));
  // A file where the directory should be is a mistake named as such
  test::write_text(dir_.file("plain"), "x");
  r = run(bin + " storage verify " + dir_.file("plain"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("is not a directory"));
  // An empty directory is not damaged: it is not a storage directory (exit 4).
  std::filesystem::create_directories(dir_.file("empty"));
  r = run(bin + " storage verify " + dir_.file("empty"));
  EXPECT_EQ(r.rc, 4) << r.out;
  EXPECT_THAT(r.out, HasSubstr("EMPTY    not a storage directory"));
  EXPECT_THAT(r.out, Not(HasSubstr("DAMAGED")));
  r = run(bin + " storage verify --json " + dir_.file("empty"));
  EXPECT_EQ(r.rc, 4) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("empty"), true);
  r = run(bin + " storage info " + dir_.file("empty"));
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("manifest   none: not a storage directory"));
}

}  // namespace
}  // namespace shardtopk
