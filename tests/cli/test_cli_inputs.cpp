// Inputs that must be refused, run as a user runs shardtopk: float32 score overflow is refused
// up front (naming the query or row and the bound) and scores just below the bound are answered
// correctly; buffers too large for the machine are refused naming the buffer and its bytes (the
// figure `plan` shows); a stalled rank is named; small messages name the real cause.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "shardtopk/corpus_io.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/ingest.hpp"
#include "tools/oracle.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/types.hpp"
#include "cli_support.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

using test::CmdResult;

class CliInputs : public ::testing::Test {
 protected:
  CmdResult run(const std::string& cmd) { return test::run_command(cmd, dir_, true); }
  std::string mpi(int ranks) { return test::mpi_prefix(ranks); }
  std::string write_h5(const std::string& name, const std::string& dataset, const std::vector<float>& v,
                       std::int64_t dim) {
    const std::string path = dir_.file(name);
    H5Writer w(path);
    w.write_f32(dataset, v.data(), static_cast<std::int64_t>(v.size()) / dim, dim);
    w.close();
    return path;
  }
  // An ann-benchmarks style l2 file `name`: random train [n, dim] (seed) and test [nq, dim]
  // (seed + 1) rows and their float64 truth (squared distances, top tk) from the oracle.
  struct L2Truth {
    std::vector<float> corpus, q;
    std::vector<std::int64_t> tid;
    std::vector<double> tsc;
    std::string path;
  };
  L2Truth write_l2_truth(const std::string& name, std::int64_t n, std::int64_t dim, std::int64_t nq, int tk,
                         std::uint64_t seed) {
    L2Truth t;
    t.corpus = test::random_floats(n * dim, seed);
    t.q = test::random_floats(nq * dim, seed + 1);
    oracle::topk(Metric::kL2, t.corpus.data(), n, nullptr, t.q.data(), nq, dim, tk, &t.tid, &t.tsc);
    const std::vector<float> tdist(t.tsc.begin(), t.tsc.end());
    t.path = dir_.file(name);
    H5Writer w(t.path);
    w.write_f32("train", t.corpus.data(), n, dim);
    w.write_f32("test", t.q.data(), nq, dim);
    w.write_i64("neighbors", t.tid.data(), nq, tk);
    w.write_f32("distances", tdist.data(), nq, tk);
    w.set_attr("distance", std::string("euclidean"));
    w.set_attr("distance_units", std::string("squared"));
    w.close();
    return t;
  }
  std::string write_config(const std::string& corpus, const std::string& metric, const std::string& extra = "",
                           const std::string& name = "c.yaml") {
    const std::string path = dir_.file(name);
    test::write_text(path, "corpus:\n  path: " + corpus + "\nsearch:\n  metric: " + metric +
                               "\n  k_max: 64\n  batch_max: 4\nengine:\n  backend: cpu\n  threads: 1\n"
                               "comm:\n  backend: mpi\n  timeout_s: 20\n" + extra);
    return path;
  }
  // Search; on success read the result file back.
  CmdResult search(int ranks, const std::string& cfg, const std::string& q, int k, test::Answer* got = nullptr,
                   const std::string& extra = "") {
    const std::string out = dir_.file("r.h5");
    std::remove(out.c_str());
    CmdResult r = run(mpi(ranks) + " search --config " + cfg + " --queries " + q + " --k " + std::to_string(k) +
                      " --out " + out + extra);
    if (r.rc == 0 && got) {
      std::int64_t rows = 0, cols = 0;
      got->ids = read_int64_matrix(out, "ids", &rows, &cols);
      got->scores = read_matrix(out, "scores").data;
    }
    return r;
  }
  // Every returned id real, every score finite, within DESIGN.md's tolerance of the oracle.
  void expect_correct(Metric m, const std::vector<float>& corpus, std::int64_t dim, const std::vector<float>& q,
                      int k, const test::Answer& got, const std::string& what) {
    const std::int64_t n = static_cast<std::int64_t>(corpus.size()) / dim, nq = static_cast<std::int64_t>(q.size()) / dim;
    ASSERT_EQ(got.ids.size(), static_cast<size_t>(nq * k)) << what;
    for (size_t i = 0; i < got.ids.size(); ++i) {
      EXPECT_NE(got.ids[i], kPadId) << what << ": the reserved pad id at position " << i;
      EXPECT_TRUE(std::isfinite(got.scores[i])) << what << ": score " << got.scores[i] << " at position " << i;
    }
    test::expect_within_tolerance(m, corpus, n, nullptr, q, nq, dim, k, got, what);
  }
  test::TempDir dir_;
};

// ---------------------------------------------------------------- float32 score overflow

// 1e20·1e20 + 1e20·(−1e20) is +inf + −inf = NaN in float32: answered, the row would be dropped
// and the pad id come back with score −inf. Refused up front instead.
TEST_F(CliInputs, InnerProductOverflowIsRefusedNamingTheQueryAndTheBound) {
  const std::vector<float> corpus = {1e20f, -1e20f};
  const std::string cfg = write_config(write_h5("c.h5", "train", corpus, 2), "inner_product");
  const std::string q = write_h5("q.h5", "test", {1e20f, 1e20f}, 2);
  for (int ranks : {1, 2}) {
    const CmdResult r = search(ranks, cfg, q, 1);
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_THAT(r.err, AllOf(HasSubstr("queries [0, 1): query 0 of the batch has norm 1.41421e+20"),
                             HasSubstr("largest row norm 1.41421e+20 (id 0)"), HasSubstr("|q| * max|x| = 2e+40"),
                             HasSubstr("exceeds the float32 score bound 1.70141e+38 (FLT_MAX/2)"),
                             HasSubstr("largest admissible query norm is 1.2030")))
        << r.err;
    EXPECT_EQ(test::count_of(r.err, "score bound"), 1) << "rank 0 speaks once:\n" << r.err;
  }
}

// A query the engine refuses is named by the file, the dataset and its place: query 70 of 100
// in the config's batches of 4 is query 2 of the batch [68, 72).
TEST_F(CliInputs, ZeroNormCosineQueryIsNamedWithItsFileAndBatch) {
  std::vector<float> corpus(40 * 4), queries(100 * 4);
  for (std::size_t i = 0; i < corpus.size(); ++i) corpus[i] = static_cast<float>((i * 7) % 11) - 5.0f;
  for (std::size_t i = 0; i < queries.size(); ++i) queries[i] = static_cast<float>((i * 5) % 13) - 6.0f + 0.5f;
  for (int c = 0; c < 4; ++c) queries[70 * 4 + c] = 0.0f;
  const std::string cfg = write_config(write_h5("c.h5", "train", corpus, 4), "cosine");
  const std::string q = write_h5("q.h5", "test", queries, 4);
  for (int ranks : {1, 2}) {
    const CmdResult r = search(ranks, cfg, q, 5);
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr(q + " 'test', queries [68, 72): query 2 of the batch has zero norm")) << r.err;
  }
}

// 4 rows, K = 4: an overflowing score would put the pad id among real ids and misorder rows.
TEST_F(CliInputs, FourRowOverflowIsRefusedAndSmallQueriesOnTheSameCorpusAreExact) {
  const std::vector<float> corpus = {1e20f, -1e20f, 1, 2, 3e19f, 3e19f, -2e19f, 1e19f};
  const std::string cfg = write_config(write_h5("c.h5", "train", corpus, 2), "inner_product");
  for (int ranks : {1, 2, 3}) {
    const CmdResult r = search(ranks, cfg, write_h5("q.h5", "test", {1e20f, 1e20f}, 2), 4);
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_THAT(r.err, AllOf(HasSubstr("query 0 of the batch"), HasSubstr("score bound 1.70141e+38"))) << r.err;
  }
  // The same corpus with queries inside the bound: answered, every id real, in the float64 order.
  const std::vector<float> q = {1e17f, 1e17f, -1e18f, 2e17f, 1, -1};
  test::Answer got;
  const CmdResult r = search(2, cfg, write_h5("q2.h5", "test", q, 2), 4, &got);
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_correct(Metric::kInnerProduct, corpus, 2, q, 4, got, "ip, queries inside the bound");
}

// l2: the row's own squared norm overflows the bound, so no distance to it can be computed: the
// corpus is refused at start-up naming the row (on the rank that holds it).
TEST_F(CliInputs, L2CorpusWhoseRowCannotBeBoundedIsRefusedAtStartUpNamingTheRow) {
  const std::vector<float> corpus = {1, 2, 3, 4, 1e20f, -1e20f, 5, 6};
  const std::string cfg = write_config(write_h5("c.h5", "train", corpus, 2), "l2");
  const std::string q = write_h5("q.h5", "test", {1e20f, 1e20f}, 2);
  for (int ranks : {1, 2}) {
    const CmdResult r = search(ranks, cfg, q, 1);
    EXPECT_NE(r.rc, 0);
    EXPECT_THAT(r.err, AllOf(HasSubstr("corpus row 2 has norm 1.41421e+20"), HasSubstr("squared norm 2e+40"),
                             HasSubstr("exceeds the float32 score bound 1.70141e+38"),
                             HasSubstr("no l2 distance to it can be computed")))
        << r.err;
    if (ranks == 2) EXPECT_THAT(r.err, HasSubstr("rank 1: ")) << "row 2 lives on rank 1:\n" << r.err;
  }
}

// A start-up that fails after opening storage.dir (here: the corpus row above, refused during
// the ingest, on rank 0 or 1) removes the directory when it made it and nothing was written to
// it; a directory that was there before is left as it was.
TEST_F(CliInputs, FailedStartUpRemovesTheStorageDirectoryItCreated) {
  const std::vector<float> corpus = {1, 2, 3, 4, 1e20f, -1e20f, 5, 6};
  const std::string c = write_h5("c.h5", "train", corpus, 2);
  const std::string q = write_h5("q.h5", "test", {1, 1}, 2);
  const std::string store = dir_.file("store");
  const std::string cfg = write_config(c, "l2", "storage:\n  dir: " + store + "\n");
  for (int ranks : {1, 2}) {
    const CmdResult r = search(ranks, cfg, q, 1);
    EXPECT_NE(r.rc, 0);
    EXPECT_THAT(r.err, HasSubstr("corpus row 2 has norm")) << r.err;
    EXPECT_FALSE(std::filesystem::exists(store)) << ranks << " rank(s): the failed start-up left '" << store << "'";
  }
  std::filesystem::create_directory(store);  // made by the operator: kept, and nothing added but the store's files
  const CmdResult r = search(1, cfg, q, 1);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(std::filesystem::is_directory(store));
  EXPECT_TRUE(std::filesystem::exists(store + "/MANIFEST.json"));
}

// l2 with a corpus inside the bound but a query that is not.
TEST_F(CliInputs, L2QueryBeyondTheBoundIsRefused) {
  const std::vector<float> corpus = {1, 2, 3e18f, 4e18f};
  const std::string cfg = write_config(write_h5("c.h5", "train", corpus, 2), "l2");
  const CmdResult r = search(1, cfg, write_h5("q.h5", "test", {1, 1, 1e19f, -1e19f}, 2), 1);
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("query 1 of the batch has norm 1.41421e+19"), HasSubstr("(|q| + max|x|)^2"),
                           HasSubstr("(id 1)"), HasSubstr("score bound 1.70141e+38")))
      << r.err;
}

// Cosine normalises rows at ingest and queries per batch in float64: every score lies in
// [−1, 1], so the inputs above are answered, correctly.
TEST_F(CliInputs, CosineOnTheOverflowInputsIsAnsweredCorrectly) {
  const std::vector<float> corpus = {1e20f, -1e20f, 1, 2, 3e19f, 3e19f, -2e19f, 1e19f};
  const std::string cfg = write_config(write_h5("c.h5", "train", corpus, 2), "cosine");
  const std::vector<float> q = {1e20f, 1e20f, 3e38f, -3e38f};
  for (int ranks : {1, 2}) {
    test::Answer got;
    const CmdResult r = search(ranks, cfg, write_h5("q.h5", "test", q, 2), 4, &got);
    ASSERT_EQ(r.rc, 0) << r.err;
    expect_correct(Metric::kCosine, corpus, 2, q, 4, got, "cosine, np " + std::to_string(ranks));
  }
}

// Just below the bound the answer is correct; just above it is refused. B = FLT_MAX/2 ≈ 1.70141e38.
TEST_F(CliInputs, JustBelowTheBoundIsAnsweredCorrectlyAndJustAboveIsRefused) {
  {  // inner product: M = 2e19 (row 0); c·[1,1,1,1] has norm 2c; 2c·M ≤ B ⇔ c ≤ 4.2535e18
    const std::vector<float> corpus = {1e19f, 1e19f,  1e19f, 1e19f, 1e19f, -1e19f, 5e18f, 0,
                                       -1e19f, 2e18f, 3e18f, 1e19f, 3,     1,      2,     0};
    const std::string cfg = write_config(write_h5("c.h5", "train", corpus, 4), "inner_product");
    const float c = 4.25e18f;
    const std::vector<float> q = {c, c, c, c, c, -c, c, 0};
    for (int ranks : {1, 2}) {
      test::Answer got;
      const CmdResult r = search(ranks, cfg, write_h5("q.h5", "test", q, 4), 4, &got);
      ASSERT_EQ(r.rc, 0) << r.err;
      expect_correct(Metric::kInnerProduct, corpus, 4, q, 4, got, "ip just below the bound");
      EXPECT_GT(got.scores[0], 1.69e38f) << "the best score is close to the bound";
    }
    const float c2 = 4.26e18f;
    const CmdResult r = search(1, cfg, write_h5("q3.h5", "test", {c2, c2, c2, c2}, 4), 4);
    EXPECT_EQ(r.rc, 1);
    EXPECT_THAT(r.err, HasSubstr("score bound 1.70141e+38")) << r.err;
  }
  {  // l2: M = 1e19 (row 0); −c·[1,1,1,1] has norm 2c; (2c + M)² ≤ B ⇔ c ≤ 1.5219e18
    const std::vector<float> corpus = {5e18f, 5e18f, 5e18f, 5e18f, -1e18f, 2e18f, 0, 1, 1, 2, 3, 4, 3e18f, -3e18f, 0, 0};
    const std::string cfg = write_config(write_h5("c.h5", "train", corpus, 4), "l2");
    const float c = 1.52e18f;
    const std::vector<float> q = {-c, -c, -c, -c, c, c, -c, c};
    for (int ranks : {1, 3}) {
      test::Answer got;
      const CmdResult r = search(ranks, cfg, write_h5("q.h5", "test", q, 4), 4, &got);
      ASSERT_EQ(r.rc, 0) << r.err;
      expect_correct(Metric::kL2, corpus, 4, q, 4, got, "l2 just below the bound");
      EXPECT_GT(got.scores[3], 1.69e38f) << "the farthest row's distance is close to the bound";
    }
    const float c2 = 1.53e18f;
    const CmdResult r = search(1, cfg, write_h5("q3.h5", "test", {-c2, -c2, -c2, -c2}, 4), 4);
    EXPECT_EQ(r.rc, 1);
    EXPECT_THAT(r.err, HasSubstr("score bound 1.70141e+38")) << r.err;
  }
}

// ---------------------------------------------------------------- buffers too large

// Refused before the shard is read: row 30 (rank 1's shard at 2 ranks) holds a NaN that reading
// would report first. plan gives the same figure and the same refusal, and exits 3.
TEST_F(CliInputs, HugeLimitsAreRefusedBeforeReadingNamingTheBufferAndBytesThatPlanAlsoShows) {
  std::vector<float> corpus = test::small_ints(40 * 4, 61, -2, 3);
  corpus[30 * 4 + 2] = std::numeric_limits<float>::quiet_NaN();
  const std::string cfg = write_config(write_h5("c.h5", "train", corpus, 4), "l2");
  const std::string set = " --set search.k_max=1048576 --set search.batch_max=1048576";
  const std::string q = write_h5("q.h5", "test", test::small_ints(8, 62), 4);
  const CmdResult r2 = search(2, cfg, q, 5, nullptr, set);
  EXPECT_NE(r2.rc, 0);
  EXPECT_THAT(r2.err, AllOf(HasSubstr("ranks 0, 1: cpu engine: the rank's buffers need "), Not(HasSubstr("nan")),
                            Not(HasSubstr("row 30"))))
      << r2.err;
  const CmdResult r = search(1, cfg, q, 5, nullptr, set);
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(Not(HasSubstr("bad_alloc")), Not(HasSubstr("nan")))) << r.err;
  SearchConfig sc;  // what load_index builds: index_engine_limits, and the index's buffers beside the engine
  sc.batch_max = 1 << 20;
  sc.k_max = 1 << 20;
  // threads 1, world 1: the index's candidate buffers (queries, local, gathered, merged:
  // 2^20 × 4 × 4 B + 3 × 2^40 × 16 B + 2 × 16 B, the QueryCounts' two slots per query in the local
  // and gathered buffers 2 × 2 × 2^20 × 16 B, and 2^20 B of invalid-query flags) are the largest
  const std::uint64_t index_bytes = index_buffer_bytes(sc, 1, 4);
  EXPECT_EQ(index_bytes, 52776643067936u);
  EXPECT_THAT(r.err, AllOf(HasSubstr("the largest the index buffer [queries and candidates of the data path] of "
                                     "52776643067936 bytes"),
                           HasSubstr("lower search.batch_max (1048576) or search.k_max (1048576)")))
      << r.err;
  const std::string lead = "the rank's buffers need ";
  const auto start = r.err.find(lead);
  ASSERT_NE(start, std::string::npos) << r.err;
  const std::string total = r.err.substr(start + lead.size(), r.err.find(' ', start + lead.size()) - start - lead.size());
  EXPECT_EQ(total, std::to_string(cpu_engine_host_bytes(40, 4, Dtype::kFloat32, index_engine_limits(sc), 1) +
                                  index_bytes));
  const CmdResult p = run(std::string(SHARDTOPK_BIN) + " plan --config " + cfg + " --ranks 1" + set);
  EXPECT_EQ(p.rc, 3) << "plan says it does not fit, as search does:\n" << p.out << p.err;
  std::istringstream lines(p.out);
  std::string line;
  bool found = false;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string rank, lo, rows, peak, engine, limit, fits;
    if (f >> rank >> lo >> rows >> peak >> engine >> limit >> fits && rank == "0") {
      EXPECT_EQ(engine, total) << "plan's engine_bytes is the figure the engine refused:\n" << p.out;
      EXPECT_EQ(fits, "NO") << p.out;
      found = true;
    }
  }
  EXPECT_TRUE(found) << p.out;
  // plan's reason is search's refusal, word for word
  const auto from = r.err.find("cpu engine: ");
  ASSERT_NE(from, std::string::npos) << r.err;
  const std::string reason = r.err.substr(from, r.err.find('\n', from) - from);
  EXPECT_THAT(p.out, HasSubstr("does not fit: rank 0: " + reason)) << p.out;
  // the same config with the default limits fits, by both
  const CmdResult ok = run(std::string(SHARDTOPK_BIN) + " plan --config " + cfg + " --ranks 2");
  EXPECT_EQ(ok.rc, 0) << ok.out << ok.err;
  EXPECT_THAT(ok.out, AllOf(HasSubstr("  yes"), Not(HasSubstr("NO")), Not(HasSubstr("does not fit")))) << ok.out;
  // Ranks on one machine share its memory: a k_max whose buffers take about 70 % of it (on each
  // of 2 ranks) fits one rank and two on two machines, not two on one
  const std::uint64_t phys = host_memory_bytes();
  SearchConfig per_k;
  per_k.batch_max = 4096;
  per_k.k_max = 1000;
  const double bytes_per_k = static_cast<double>(rank_resident_bytes(false, 40, 4, Dtype::kFloat32, per_k, 2, 1)) / 1000;
  const auto k = static_cast<std::int64_t>(0.7 * static_cast<double>(phys) / bytes_per_k);
  const std::string big = " --set engine.threads=1 --set search.batch_max=4096 --set search.k_max=" + std::to_string(k);
  const CmdResult one = run(std::string(SHARDTOPK_BIN) + " plan --config " + cfg + " --ranks 1" + big);
  EXPECT_EQ(one.rc, 0) << one.out << one.err;
  const CmdResult two = run(std::string(SHARDTOPK_BIN) + " plan --config " + cfg + " --ranks 2" + big);
  EXPECT_EQ(two.rc, 3) << two.out << two.err;
  EXPECT_THAT(two.out, AllOf(HasSubstr(" of memory for its 2 ranks: "), HasSubstr("lower search.batch_max (4096)")))
      << two.out;
  const CmdResult apart = run(std::string(SHARDTOPK_BIN) + " plan --config " + cfg + " --ranks 2 --ranks-per-node 1" + big);
  EXPECT_EQ(apart.rc, 0) << "one rank per machine has the machine to itself:\n" << apart.out << apart.err;
  const CmdResult negative = run(std::string(SHARDTOPK_BIN) + " plan --config " + cfg + " --ranks 2 --ranks-per-node -1");
  EXPECT_NE(negative.rc, 0);
  EXPECT_THAT(negative.err, HasSubstr("--ranks-per-node -1 out of range")) << negative.err;
}

// ---------------------------------------------------------------- the stalled rank

TEST_F(CliInputs, StalledRankIsNamed) {
  if (!SHARDTOPK_FAULTS_BUILT) GTEST_SKIP() << "built without fault injection (-DSHARDTOPK_FAULT_INJECTION=ON)";
  const std::vector<float> corpus = test::small_ints(30 * 4, 63, -2, 3);
  const std::string cfg = write_config(write_h5("c.h5", "train", corpus, 4), "l2");
  const std::string q = write_h5("q.h5", "test", test::small_ints(12 * 4, 64), 4);
  struct Case {
    int ranks, stalled;
  };
  for (const Case c : {Case{2, 1}, Case{3, 2}, Case{3, 0}}) {
    const CmdResult r = run(mpi(c.ranks) + " search --config " + cfg + " --queries " + q +
                            " --k 3 --set comm.timeout_s=2 --set testing.fault=stall:" + std::to_string(c.stalled) +
                            ":1:60");
    EXPECT_NE(r.rc, 0);
    EXPECT_LT(r.seconds, 2.0 + 15.0);
    EXPECT_THAT(r.err, AllOf(HasSubstr("did not complete within 2 s"),
                             HasSubstr("rank " + std::to_string(c.stalled) + " did not arrive"),
                             HasSubstr("stalled or dead")))
        << r.err;
    for (int other = 0; other < c.ranks; ++other)
      if (other != c.stalled)
        EXPECT_THAT(r.err, Not(HasSubstr("rank " + std::to_string(other) + " did not arrive"))) << r.err;
  }
}

// ---------------------------------------------------------------- small faults

TEST_F(CliInputs, KZeroOrNegativeIsOutOfRangeWithoutAKMaxHint) {
  const std::string cfg = write_config(write_h5("c.h5", "train", test::small_ints(40, 65), 4), "l2");
  const std::string q = write_h5("q.h5", "test", test::small_ints(8, 66), 4);
  for (const std::string k : {"0", "-3"}) {
    const CmdResult r = run(mpi(2) + " search --config " + cfg + " --queries " + q + " --k " + k);
    EXPECT_EQ(r.rc, 1);
    EXPECT_THAT(r.err, AllOf(HasSubstr("--k " + k + " out of range: allowed 1 .. 64"), HasSubstr("at least 1"),
                             Not(HasSubstr("raise")), Not(HasSubstr("search.k_max="))))
        << r.err;
  }
}

TEST_F(CliInputs, KLargerThanTheCorpusIsRefusedFromTheHeaderBeforeLoading) {
  // Row 7 holds a NaN: loading would fail on it. The K error comes first, so nothing was loaded.
  std::vector<float> corpus = test::small_ints(10 * 4, 67);
  corpus[7 * 4 + 1] = std::numeric_limits<float>::quiet_NaN();
  const std::string cfg = write_config(write_h5("c.h5", "train", corpus, 4), "l2");
  const CmdResult r = search(2, cfg, write_h5("q.h5", "test", test::small_ints(8, 68), 4), 11);
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("--k 11 is larger than the corpus"), HasSubstr("dataset 'train' has 10 rows"),
                           HasSubstr("from the file header"), Not(HasSubstr("nan"))))
      << r.err;
  EXPECT_EQ(test::count_of(r.err, "larger than the corpus"), 1) << r.err;
}

TEST_F(CliInputs, EvalOfWiderResultsUsesTheTruthsK) {
  const std::string corpus_path = write_l2_truth("c.h5", 60, 4, 5, 5, 69).path;
  const std::string cfg = write_config(corpus_path, "l2");
  ASSERT_EQ(search(1, cfg, corpus_path, 9).rc, 0);
  const CmdResult r = run(std::string(SHARDTOPK_BIN) + " eval -r " + dir_.file("r.h5") + " -t " + corpus_path);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("K=5"), HasSubstr("has K=9 columns but the truth has 5 neighbours per query"),
                           HasSubstr("recall@5    1.0000"), HasSubstr("recall@1    1.0000")))
      << r.out;
}

// eval with the wrong truth file names that mistake (not the metric); with the right truth file
// and another metric it names search.metric.
TEST_F(CliInputs, EvalHintFitsTheMistake) {
  const std::string corpus_path = write_l2_truth("c.h5", 60, 4, 5, 5, 81).path;
  const std::string other = write_l2_truth("other.h5", 70, 4, 5, 5, 82).path;  // another corpus
  ASSERT_EQ(search(1, write_config(corpus_path, "inner_product"), corpus_path, 5).rc, 0);
  CmdResult r = run(std::string(SHARDTOPK_BIN) + " eval -r " + dir_.file("r.h5") + " -t " + other);
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("'" + other + "' is not the ground truth of these results"),
                           HasSubstr("searched over corpus '" + corpus_path + "' [60 x 4]"),
                           Not(HasSubstr("search.metric"))))
      << r.err;
  r = run(std::string(SHARDTOPK_BIN) + " eval -r " + dir_.file("r.h5") + " -t " + corpus_path);
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("searched with metric inner_product"),
                           HasSubstr("search again with --set search.metric=l2"), Not(HasSubstr("not the ground truth"))))
      << r.err;
  // the same metric but another corpus: refused too (recall would mean nothing)
  ASSERT_EQ(search(1, write_config(corpus_path, "l2"), corpus_path, 5).rc, 0);
  r = run(std::string(SHARDTOPK_BIN) + " eval -r " + dir_.file("r.h5") + " -t " + other);
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("is not the ground truth of these results")) << r.err;
  // the two files swapped, or a corpus given as the results: the flag and what it expects
  r = run(std::string(SHARDTOPK_BIN) + " eval -r " + corpus_path + " -t " + dir_.file("r.h5"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("--results '" + corpus_path + "' has no dataset 'ids': expected a result file "
                               "written by `search --out`"))
      << r.err;
  r = run(std::string(SHARDTOPK_BIN) + " eval -r " + dir_.file("r.h5") + " -t " + dir_.file("r.h5"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("--truth '" + dir_.file("r.h5") + "' has no dataset 'neighbors'")) << r.err;
}

// import raw: a raw file has no header. --rows is checked against the size and names the
// dimension that fits; without it the inferred shape is a warning that asks for --rows. The
// 2,048,000-byte bge-m3 file is [500 x 1024], and 1000 divides it too (512 rows).
TEST_F(CliInputs, ImportRawChecksTheStatedRowCount) {
  const std::string f = std::string(SHARDTOPK_SOURCE_DIR) + "/tests/data/bge-m3/paragraphs-1024.f32";
  const std::string imp = std::string(SHARDTOPK_BIN) + " import raw --truth-k 0 --corpus " + f;
  CmdResult r = run(imp + " --dim 1000 --rows 500 -o " + dir_.file("a.h5"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("size 2048000 bytes is not --rows 500 x --dim 1000 x 4 bytes = 2000000"),
                           HasSubstr("is --dim 1024?")))
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("a.h5")));
  // 500 + 2^52 rows of 4,096 bytes wrap around 2^64 to the file's size: still refused
  r = run(imp + " --dim 1024 --rows 4503599627371000 -o " + dir_.file("a.h5"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("is not --rows 4503599627371000 x --dim 1024 x 4 bytes = 1.845e+19")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("a.h5")));
  r = run(imp + " --dim 1000 -o " + dir_.file("b.h5"));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("no --rows given"), HasSubstr("[512 rows x 1000 dims]"), HasSubstr("--rows 512")))
      << r.err;
  r = run(imp + " --dim 1024 --rows 500 --queries " + f + " --query-rows 499 -o " + dir_.file("c.h5"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("is not --query-rows 499 x --dim 1024")) << r.err;
  r = run(imp + " --dim 1024 --rows 500 --queries " + f + " --query-rows 500 --metric angular -o " + dir_.file("d.h5"));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, AllOf(Not(HasSubstr("no --rows")), HasSubstr("'angular' is a deprecated alias of 'cosine'")))
      << r.err;
  EXPECT_EQ(inspect_dataset(dir_.file("d.h5"), "train").dims, (std::vector<std::int64_t>{500, 1024}));
}

// An output path that names an input (import's raw files, eval's files) or something that is
// not a regular file (a directory, a FIFO: opening one for HDF5 would block) is refused before
// anything is read or written, and the input is left as it was.
TEST_F(CliInputs, OutputsThatAreInputsOrNotFilesAreRefused) {
  const std::string f = std::string(SHARDTOPK_SOURCE_DIR) + "/tests/data/bge-m3/paragraphs-1024.f32";
  const std::string raw = dir_.file("c.f32");
  std::filesystem::copy_file(f, raw);
  const std::vector<unsigned char> before = test::read_bytes(raw);
  const std::string imp = std::string(SHARDTOPK_BIN) + " import raw --truth-k 0 --dim 1024 --rows 500 --corpus " + raw;
  CmdResult r = run(imp + " -o " + raw);
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("refusing to write '" + raw + "': it is the corpus file")) << r.err;
  EXPECT_TRUE(test::read_bytes(raw) == before) << "the raw corpus was changed";
  const std::string queries = dir_.file("q.f32");
  std::filesystem::copy_file(f, queries);
  r = run(imp + " --queries " + queries + " --query-rows 500 -o " + queries);
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("it is the queries file")) << r.err;

  const std::string corpus_path = write_l2_truth("t.h5", 60, 4, 5, 5, 83).path;
  ASSERT_EQ(search(1, write_config(corpus_path, "l2"), corpus_path, 5).rc, 0);
  const std::vector<unsigned char> truth_before = test::read_bytes(corpus_path);
  r = run(std::string(SHARDTOPK_BIN) + " eval -r " + dir_.file("r.h5") + " -t " + corpus_path + " --json " + corpus_path);
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("it is the truth file")) << r.err;
  EXPECT_TRUE(test::read_bytes(corpus_path) == truth_before) << "the truth file was changed";

  const std::string fifo = dir_.file("fifo.h5"), folder = dir_.file("out");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_TRUE(std::filesystem::create_directory(folder));
  const std::string cfg = write_config(corpus_path, "l2");
  for (const std::string& cmd : {" search -c " + cfg + " -q " + corpus_path + " -k 3 -o ",
                                 " knn-graph -c " + cfg + " -k 3 -o ", " knn-graph -c " + cfg + " -k 3 --overwrite -o "}) {
    r = run(test::mpi_prefix(1) + cmd + fifo);  // would block in open() on a FIFO
    EXPECT_NE(r.rc, 0) << cmd;
    EXPECT_THAT(r.err, HasSubstr("cannot write '" + fifo + "': it is a FIFO")) << cmd << r.err;
    EXPECT_LT(r.seconds, 30.0) << cmd;
    r = run(test::mpi_prefix(1) + cmd + folder);
    EXPECT_NE(r.rc, 0) << cmd;
    EXPECT_THAT(r.err, HasSubstr("cannot write '" + folder + "': it is a directory")) << cmd << r.err;
  }
  // The config file, and the two outputs of one run, before either exists (as absolute and
  // relative paths of one file)
  const std::string cfg_before = test::read_text(cfg);
  r = run(test::mpi_prefix(1) + " search -c " + cfg + " -q " + corpus_path + " -k 3 --timings-json " + cfg);
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("it is the config file")) << r.err;
  EXPECT_EQ(test::read_text(cfg), cfg_before);
  const std::string both = dir_.file("both.h5");
  r = run("cd " + dir_.path() + " && " + test::mpi_prefix(1) + " search -c " + cfg + " -q " + corpus_path +
          " -k 3 -o " + both + " --timings-json ./both.h5");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("it is the -o output file")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(both));
  r = run(test::mpi_prefix(1) + " knn-graph -c " + cfg + " -k 3 -o " + both + " --timings-json " + both);
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("it is the output file")) << r.err;
  // Text may go to a device: the timings to /dev/null (an HDF5 output may not)
  r = run(test::mpi_prefix(1) + " search -c " + cfg + " -q " + corpus_path + " -k 3 --timings-json /dev/null");
  EXPECT_EQ(r.rc, 0) << r.err;
  r = run(test::mpi_prefix(1) + " search -c " + cfg + " -q " + corpus_path + " -k 3 -o /dev/null");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("cannot write '/dev/null': it is a device")) << r.err;
  // Nothing is written inside a storage directory (its snapshot could be overwritten)
  const std::string st = dir_.file("st");
  std::filesystem::create_directory(st);
  r = run(test::mpi_prefix(1) + " search -c " + cfg + " --set storage.dir=" + st + " -q " + corpus_path +
          " -k 3 -o " + st + "/snapshot-00000000000000000001.h5");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("it is inside storage.dir '" + st + "'")) << r.err;
  // ... nor into another storage directory, one the config does not name (its manifest is kept)
  test::write_text(st + "/MANIFEST.json", "{}");
  for (const std::string& name : {"MANIFEST.json", "answers.h5"}) {
    r = run(test::mpi_prefix(1) + " search -c " + cfg + " -q " + corpus_path + " -k 3 -o " + st + "/" + name);
    EXPECT_NE(r.rc, 0);
    EXPECT_THAT(r.err, HasSubstr("folder '" + st + "' is a storage directory (it holds MANIFEST.json)")) << r.err;
  }
  EXPECT_EQ(test::read_text(st + "/MANIFEST.json"), "{}");
  EXPECT_FALSE(std::filesystem::exists(st + "/answers.h5"));
}

// eval judges near ties by the truth file's own rows (float64), never by the scores a result
// file claims, and a repeated id is never a hit.
TEST_F(CliInputs, EvalCountsRepeatedAndWrongIdsAsMisses) {
  const std::int64_t n = 40, dim = 4, nq = 3, tk = 3;
  const L2Truth t = write_l2_truth("t.h5", n, dim, nq, static_cast<int>(tk), 91);
  const std::vector<float>& corpus = t.corpus;
  const std::vector<float>& q = t.q;
  const std::vector<std::int64_t>& tid = t.tid;
  const std::vector<double>& tsc = t.tsc;
  const std::string& truth = t.path;
  // A result file whose ids repeat the best one, or name a far row, with the *true* K-th's
  // distance written as its score (so the file's own scores would pass as near ties).
  auto result = [&](const std::string& name, bool repeat) {
    std::vector<std::int64_t> ids = tid;
    std::vector<float> sc(tsc.begin(), tsc.end());
    std::vector<std::pair<double, std::int64_t>> all;
    for (std::int64_t r = 0; r < n; ++r) all.push_back({oracle::score(Metric::kL2, q.data(), corpus.data() + r * dim, dim), r});
    std::sort(all.begin(), all.end());
    for (std::int64_t i = 0; i < nq; ++i) {
      if (repeat) ids[i * tk + 1] = ids[i * tk + 2] = ids[i * tk];
      sc[i * tk + 2] = static_cast<float>(tsc[i * tk + 2]);
    }
    if (!repeat) ids[2] = all.back().second;  // query 0's farthest row, claiming the K-th's distance
    H5Writer w(dir_.file(name));
    w.write_i64("ids", ids.data(), nq, tk);
    w.write_f32("scores", sc.data(), nq, tk);
    w.set_attr("metric", std::string("l2"));
    w.close();
    return dir_.file(name);
  };
  const CmdResult dup = run(std::string(SHARDTOPK_BIN) + " eval -r " + result("dup.h5", true) + " -t " + truth);
  ASSERT_EQ(dup.rc, 0) << dup.err;
  EXPECT_THAT(dup.out, AllOf(HasSubstr("recall@1    1.0000"), HasSubstr("recall@3    0.3333"),
                             HasSubstr("of which repeated ids: 6")))
      << dup.out;
  const CmdResult far = run(std::string(SHARDTOPK_BIN) + " eval -r " + result("far.h5", false) + " -t " + truth);
  ASSERT_EQ(far.rc, 0) << far.err;
  EXPECT_THAT(far.out, AllOf(HasSubstr("recall@3    0.8889"), HasSubstr("misses at K: 1"))) << far.out;
}

// An output path that is the corpus or the queries file is refused before anything is written.
TEST_F(CliInputs, SearchRefusesToOverwriteItsInputs) {
  const std::string c = write_h5("c.h5", "train", test::small_ints(20 * 4, 93), 4);
  const std::string cfg = write_config(c, "l2");
  const CmdResult r = run(mpi(1) + " search --config " + cfg + " --queries " + c + " --queries-dataset train --k 3 -o " + c);
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("refusing to write")) << r.err;
  EXPECT_TRUE(inspect_dataset(c, "train").dims.size() == 2) << "the corpus must be untouched";
}

TEST_F(CliInputs, DebugLogLevelLogsShardPlanAndBatchTimingsAndABadLevelWarnsOnce) {
  const std::string cfg = write_config(write_h5("c.h5", "train", test::small_ints(50 * 4, 71), 4), "l2");
  const std::string q = write_h5("q.h5", "test", test::small_ints(6 * 4, 72), 4);
  const std::string cmd = mpi(2) + " search --config " + cfg + " --queries " + q + " --k 3";
  CmdResult r = run("SHARDTOPK_LOG_LEVEL=debug " + cmd);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("shard plan: rank 0 of 2 holds rows [0, 25)"),
                           HasSubstr("shard plan: rank 1 of 2 holds rows [25, 50)"),
                           HasSubstr("batch 0: queries [0, 4), k=3"), HasSubstr("batch 1: queries [4, 6), k=3"),
                           HasSubstr("score range: largest corpus row norm")))
      << r.err;
  r = run("SHARDTOPK_LOG_LEVEL=info " + cmd);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, AllOf(Not(HasSubstr("shard plan:")), Not(HasSubstr("batch 0:")))) << r.err;
  r = run("SHARDTOPK_LOG_LEVEL=loud " + cmd);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(test::count_of(r.err, "SHARDTOPK_LOG_LEVEL='loud' is not a level"), 1) << "once per job:\n" << r.err;
}

TEST_F(CliInputs, PlanLabelsTheLoadingPeakAndTheEngineBytes) {
  const std::vector<float> corpus = test::small_ints(41 * 4, 73);
  const std::string cfg = write_config(write_h5("c.h5", "train", corpus, 4), "l2");
  const CmdResult r = run(std::string(SHARDTOPK_BIN) + " plan --config " + cfg + " --ranks 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("load_peak_host_bytes"), HasSubstr("engine_bytes"),
                           HasSubstr("peak host memory while loading a shard"), Not(HasSubstr(" host_bytes"))))
      << r.out;
  // rank 1 holds 20 rows: the engine figure is cpu_engine_host_bytes, the peak adds the rows read
  SearchConfig sc;
  sc.batch_max = 4;
  sc.k_max = 64;
  // engine_bytes: the engine's and the index's buffers (queries, candidates) on that rank
  const std::uint64_t eng =
      cpu_engine_host_bytes(20, 4, Dtype::kFloat32, index_engine_limits(sc), 1) + index_buffer_bytes(sc, 2, 4);
  EXPECT_THAT(r.out, HasSubstr(" " + std::to_string(20 * (4 * 4 + 8) + eng) + " ")) << r.out;
  EXPECT_THAT(r.out, HasSubstr(" " + std::to_string(eng) + " ")) << r.out;
}

// With the CUDA engine, inner-product and l2 shards are streamed (no host copy of the shard):
// the peak is the ids plus one or two pinned blocks of engine.read_chunk_rows rows; cosine
// shards are read into one host array first. Rank 1 holds 20 rows of 4 columns.
TEST_F(CliInputs, PlanCountsStreamedLoadsAsIdsPlusPinnedBlocks) {
  const std::vector<float> corpus = test::small_ints(41 * 4, 73);
  const std::string h5 = write_h5("c.h5", "train", corpus, 4);
  const std::string cuda = " --set engine.backend=cuda --set engine.read_chunk_rows=8";
  CmdResult r = run(std::string(SHARDTOPK_BIN) + " plan --config " + write_config(h5, "l2") + " --ranks 2" + cuda);
  EXPECT_THAT(r.out, AllOf(HasSubstr(" " + std::to_string(20 * 8 + 2 * 8 * 4 * 4) + " "),
                           HasSubstr("streamed: ids and pinned blocks of engine.read_chunk_rows rows")))
      << r.out << r.err;
  r = run(std::string(SHARDTOPK_BIN) + " plan --config " + write_config(h5, "l2") + " --ranks 2" +
          " --set engine.backend=cuda --set engine.read_chunk_rows=64");  // one block: one buffer
  EXPECT_THAT(r.out, HasSubstr(" " + std::to_string(20 * 8 + 20 * 4 * 4) + " ")) << r.out << r.err;
  r = run(std::string(SHARDTOPK_BIN) + " plan --config " + write_config(h5, "cosine", "", "cos.yaml") +
          " --ranks 2" + cuda);
  EXPECT_THAT(r.out, AllOf(HasSubstr(" " + std::to_string(20 * (4 * 4 + 8)) + " "), Not(HasSubstr("streamed:"))))
      << r.out << r.err;
}

TEST_F(CliInputs, ReadmeShowsTheHelpCommandWithItsPath) {
  const std::string readme = test::read_text(std::string(SHARDTOPK_SOURCE_DIR) + "/README.md");
  ASSERT_FALSE(readme.empty());
  for (size_t at = readme.find("shardtopk --help"); at != std::string::npos;
       at = readme.find("shardtopk --help", at + 1))
    EXPECT_TRUE(at >= 6 && readme.compare(at - 6, 6, "build/") == 0)
        << "README: `shardtopk --help` is not on PATH after setup; write build/shardtopk: ..."
        << readme.substr(at > 40 ? at - 40 : 0, 80);
  const CmdResult r = run(std::string(SHARDTOPK_BIN) + " --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_THAT(r.out, HasSubstr("search"));
}

// A mistyped flag or command is what the user hears about, with the nearest valid name, not the
// required option or command its typo left out.
TEST_F(CliInputs, AnUnknownFlagOrCommandIsNamedFirstWithTheNearestValidName) {
  const std::string bin = SHARDTOPK_BIN, cfg = std::string(SHARDTOPK_SOURCE_DIR) + "/configs/example.yaml";
  struct Case {
    std::string args, expect;
  };
  for (const Case& c : std::vector<Case>{
           {" plan -c " + cfg + " --rank 2", "unknown option '--rank' for 'shardtopk plan'; did you mean '--ranks'?"},
           {" plan -c " + cfg + " --rank=2", "unknown option '--rank' for 'shardtopk plan'; did you mean '--ranks'?"},
           {" search --confg " + cfg + " -q q.h5", "unknown option '--confg' for 'shardtopk search'; did you mean '--config'?"},
           {" serve -c " + cfg + " --prot-file p", "unknown option '--prot-file' for 'shardtopk serve'; did you mean '--port-file'?"},
           {" import raw --corpus a.f32 --dim 4 -o o.h5 --metrik l2",
            "unknown option '--metrik' for 'shardtopk import raw'; did you mean '--metric'?"},
           {" --verbose search -c " + cfg + " -q q.h5", "unknown option '--verbose' for 'shardtopk'"},
           {" serch -c " + cfg + " -q q.h5",
            "unknown command 'serch'; did you mean 'search'? (commands: search, knn-graph, serve, info, eval, plan, keygen, storage, import)"},
           {" import fashion-minst -o o.h5", "unknown command 'import fashion-minst'; did you mean 'fashion-mnist'?"},
           {"", "'shardtopk' needs a command: search, knn-graph, serve, info, eval, plan, keygen, storage, import"},
       }) {
    const CmdResult r = run(bin + c.args);
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.err;
    EXPECT_THAT(r.err, AllOf(HasSubstr("shardtopk: error: " + c.expect), Not(HasSubstr("is required"))))
        << c.args;
  }
  // Far from every name: no guess.
  const CmdResult r = run(bin + " info --xyzzy f.h5");
  EXPECT_THAT(r.err, AllOf(HasSubstr("unknown option '--xyzzy' for 'shardtopk info'"), Not(HasSubstr("did you mean"))));
}

}  // namespace
}  // namespace shardtopk
