// `shardtopk knn-graph` run as a user runs it, under mpiexec on CPU ranks: the graph equals a
// float64 brute force (l2, inner product, cosine; exact duplicates on purpose) at 1, 2 and 4
// ranks, bit-identical across rank counts and batch sizes; --exclude-self returns the k best
// rows other than the row itself (duplicates of it stay); an interrupted job continued by a rerun
// gives the file an uninterrupted run gives; a rerun with other arguments is refused naming the
// difference; bad arguments are named; a write that fails (a full disk) stops every rank, naming
// the file and the system's reason, and keeps the blocks written before it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <hdf5.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/types.hpp"
#include "test_support.hpp"
#include "tools/oracle.hpp"

namespace shardtopk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using test::CmdResult;

// N = 61 rows of small integers (exact scores in float32, many ties), with exact duplicates:
// rows 5, 17 and 40 are one vector, rows 8 and 9 another, row 60 repeats row 0.
class KnnGraph : public ::testing::Test {
 protected:
  static constexpr std::int64_t kN = 61, kDim = 4;

  void SetUp() override {
    corpus_ = test::small_ints(kN * kDim, 71, -2, 2);
    // No zero row (cosine) and no duplicate but the planted ones.
    auto row = [&](std::int64_t i) {
      return std::vector<float>(corpus_.begin() + i * kDim, corpus_.begin() + (i + 1) * kDim);
    };
    for (std::int64_t i = 0; i < kN; ++i) {
      auto taken = [&] {
        if (row(i) == std::vector<float>(kDim, 0.0f)) return true;
        for (std::int64_t j = 0; j < i; ++j)
          if (row(j) == row(i)) return true;
        return false;
      };
      while (taken()) corpus_[i * kDim] += 1;
    }
    copy_row(5, 17);
    copy_row(5, 40);
    copy_row(8, 9);
    copy_row(0, 60);
  }
  void copy_row(std::int64_t from, std::int64_t to) {
    std::copy_n(corpus_.begin() + from * kDim, kDim, corpus_.begin() + to * kDim);
  }

  CmdResult run(const std::string& cmd) { return test::run_command(cmd, dir_, false); }

  std::string write_corpus(const std::vector<std::int64_t>& ids = {}, const std::string& name = "corpus.h5") {
    const std::string path = dir_.file(name);
    H5Writer w(path);
    w.write_f32("train", corpus_.data(), kN, kDim);
    if (!ids.empty()) w.write_i64("ids", ids.data(), kN, 0);
    w.close();
    return path;
  }

  std::string write_config(const std::string& corpus, const std::string& metric, const std::string& extra = "") {
    const std::string path = dir_.file("c-" + metric + ".yaml");
    test::write_text(path, "corpus:\n  path: " + corpus + "\n" + extra + "search:\n  metric: " + metric +
                               "\nengine:\n  backend: cpu\n  threads: 1\ncomm:\n  backend: mpi\n  timeout_s: 20\n");
    return path;
  }

  // `mpiexec -n P shardtopk knn-graph -c CFG -o OUT ARGS`
  CmdResult graph(int ranks, const std::string& cfg, const std::string& out, const std::string& args) {
    return run(test::mpi_prefix(ranks) + " knn-graph -c " + cfg + " -o " + out + " " + args);
  }

  test::Answer read_graph(const std::string& out, std::int64_t k) {
    std::int64_t rows = 0, cols = 0;
    test::Answer a;
    a.ids = read_int64_matrix(out, "ids", &rows, &cols);
    a.scores = read_matrix(out, "scores").data;
    EXPECT_EQ(rows, kN);
    EXPECT_EQ(cols, k);
    return a;
  }

  std::int64_t rows_done(const std::string& out) {
    const FileInfo fi = inspect_file(out);
    const auto it = fi.int_attributes.find("rows_done");
    return it == fi.int_attributes.end() || it->second.size() != 1 ? -1 : it->second[0];
  }

  // float64 brute force, written for this test: row i's k best rows j != i (ids[j], or j) under
  // the ordering rule (oracle::better).
  test::Answer others_oracle(Metric m, const std::vector<std::int64_t>& ids, int k) {
    test::Answer a;
    for (std::int64_t i = 0; i < kN; ++i) {
      std::vector<std::pair<double, std::int64_t>> c;
      for (std::int64_t j = 0; j < kN; ++j)
        if (j != i)
          c.emplace_back(oracle::score(m, corpus_.data() + i * kDim, corpus_.data() + j * kDim, kDim),
                         ids.empty() ? j : ids[static_cast<size_t>(j)]);
      std::sort(c.begin(), c.end(), [&](const auto& x, const auto& y) {
        return oracle::better(m, x.first, x.second, y.first, y.second);
      });
      for (int r = 0; r < k; ++r) {
        a.ids.push_back(c[static_cast<size_t>(r)].second);
        a.scores.push_back(static_cast<float>(c[static_cast<size_t>(r)].first));
      }
    }
    return a;
  }

  // The ids and exact scores of `got` equal `want` (small integers: no rounding anywhere).
  void expect_equal(const test::Answer& got, const test::Answer& want, int k, const std::string& what) {
    ASSERT_EQ(got.ids.size(), want.ids.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < got.ids.size(); ++i)
      if (got.ids[i] != want.ids[i] || got.scores[i] != want.scores[i])
        if (++bad <= 5)
          ADD_FAILURE() << what << ": row " << i / k << " rank " << i % k << ": got id " << got.ids[i] << " score "
                        << got.scores[i] << ", want id " << want.ids[i] << " score " << want.scores[i];
    EXPECT_EQ(bad, 0) << what;
  }

  test::TempDir dir_;
  std::vector<float> corpus_;
};

// Every row's list against the float64 oracle with the corpus as queries: exact ids and scores
// (l2, inner product) or within ε (cosine), at 1, 2 and 4 ranks, with blocks that do not divide
// the rows and batches that do not divide the blocks; every file bit-identical to 1 rank's.
TEST_F(KnnGraph, EqualsTheFloat64OracleAtOneTwoAndFourRanks) {
  const std::string corpus = write_corpus();
  const int k = 6;
  for (const char* metric : {"l2", "inner_product", "cosine"}) {
    const std::string cfg = write_config(corpus, metric);
    const Metric m = parse_metric(metric);
    test::Answer first;
    for (int ranks : {1, 2, 4}) {
      const std::string out = dir_.file(std::string("g-") + metric + "-" + std::to_string(ranks) + ".h5");
      const std::string batch = ranks == 2 ? " --batch 1" : " --batch " + std::to_string(3 + ranks);
      const CmdResult r = graph(ranks, cfg, out, "-k 6 --block-rows 16" + batch);
      ASSERT_EQ(r.rc, 0) << r.err;
      EXPECT_EQ(rows_done(out), kN);
      const test::Answer got = read_graph(out, k);
      const std::string what = std::string(metric) + ", " + std::to_string(ranks) + " rank(s)";
      if (m == Metric::kCosine)
        test::expect_within_tolerance(m, corpus_, kN, nullptr, corpus_, kN, kDim, k, got, what);
      else
        test::expect_exact(m, corpus_, kN, nullptr, corpus_, kN, kDim, k, got, what);
      if (ranks == 1) first = got;
      else test::expect_bit_identical(got, first, what + " vs 1 rank");
    }
  }
}

// Row i's list is what `search` returns for row i as a query (the corpus file as the queries
// file), bit for bit.
TEST_F(KnnGraph, EachListIsWhatSearchReturnsForTheRow) {
  const std::string corpus = write_corpus();
  for (const char* metric : {"cosine", "inner_product"}) {
    const std::string cfg = write_config(corpus, metric);
    const std::string g = dir_.file(std::string("g-") + metric + ".h5"), r = dir_.file(std::string("r-") + metric + ".h5");
    ASSERT_EQ(graph(2, cfg, g, "-k 6 --block-rows 9 --batch 5").rc, 0);
    const CmdResult s =
        run(test::mpi_prefix(2) + " search -c " + cfg + " -q " + corpus + " --queries-dataset train -k 6 -o " + r);
    ASSERT_EQ(s.rc, 0) << s.err;
    test::Answer want;
    std::int64_t rows = 0, cols = 0;
    want.ids = read_int64_matrix(r, "ids", &rows, &cols);
    want.scores = read_matrix(r, "scores").data;
    test::expect_bit_identical(read_graph(g, 6), want, std::string("knn-graph vs search, ") + metric);
  }
}

// --exclude-self: the k best rows other than the row itself, by id: duplicates of a row stay in
// its list (distance 0 under l2), and without the flag a row may follow its duplicates with
// smaller ids in its own list. With an ids dataset the row's own id is the one left out.
TEST_F(KnnGraph, ExcludeSelfLeavesOutTheRowItselfAndKeepsItsDuplicates) {
  const int k = 5;
  {
    const std::string cfg = write_config(write_corpus(), "l2");
    const std::string out = dir_.file("plain.h5");
    ASSERT_EQ(graph(2, cfg, out, "-k 5 --block-rows 7 --batch 3").rc, 0);
    const test::Answer plain = read_graph(out, k);
    // Row 17 = rows 5 and 40: all at distance 0, ordered by id, the row itself second.
    EXPECT_EQ(std::vector<std::int64_t>(plain.ids.begin() + 17 * k, plain.ids.begin() + 17 * k + 3),
              (std::vector<std::int64_t>{5, 17, 40}));
    for (const char* metric : {"l2", "inner_product"}) {
      const std::string c = write_config(dir_.file("corpus.h5"), metric);
      const std::string o = dir_.file(std::string("ex-") + metric + ".h5");
      const CmdResult r = graph(2, c, o, "-k 5 --exclude-self --block-rows 7 --batch 3");
      ASSERT_EQ(r.rc, 0) << r.err;
      const test::Answer got = read_graph(o, k);
      expect_equal(got, others_oracle(parse_metric(metric), {}, k), k, std::string("exclude-self ") + metric);
      for (std::int64_t i = 0; i < kN; ++i)
        for (int j = 0; j < k; ++j) EXPECT_NE(got.ids[static_cast<size_t>(i * k + j)], i) << metric << " row " << i;
    }
    const test::Answer ex = read_graph(dir_.file("ex-l2.h5"), k);
    EXPECT_EQ(std::vector<std::int64_t>(ex.ids.begin() + 17 * k, ex.ids.begin() + 17 * k + 2),
              (std::vector<std::int64_t>{5, 40}));
    EXPECT_EQ(ex.scores[17 * k], 0.0f);
    EXPECT_EQ(ex.ids[8 * k], 9);
    EXPECT_EQ(ex.ids[9 * k], 8);
    EXPECT_EQ(ex.ids[60 * k], 0);
  }
  // Ids in reverse row order: ties now go to the later rows, and the row's id is left out.
  std::vector<std::int64_t> ids(kN);
  for (std::int64_t i = 0; i < kN; ++i) ids[static_cast<size_t>(i)] = 1000 - i;
  const std::string cfg = write_config(write_corpus(ids, "corpus-ids.h5"), "l2", "  ids_dataset: ids\n");
  const std::string out = dir_.file("ex-ids.h5");
  const CmdResult r = graph(4, cfg, out, "-k 5 --exclude-self --block-rows 10 --batch 4");
  ASSERT_EQ(r.rc, 0) << r.err;
  const test::Answer got = read_graph(out, k);
  expect_equal(got, others_oracle(Metric::kL2, ids, k), k, "exclude-self with an ids dataset");
  EXPECT_EQ(std::vector<std::int64_t>(got.ids.begin() + 5 * k, got.ids.begin() + 5 * k + 2),
            (std::vector<std::int64_t>{1000 - 40, 1000 - 17}));
}

// A job killed after some blocks leaves rows_done at a block boundary; the same command again
// (here at another rank count and batch, which the answer does not depend on) continues from
// there, and the file equals an uninterrupted run's, byte for byte. A complete file is left alone.
TEST_F(KnnGraph, ResumeAfterAnInterruptionGivesTheSameFile) {
  const std::string cfg = write_config(write_corpus(), "l2");
  const std::string whole = dir_.file("whole.h5"), out = dir_.file("resumed.h5");
  ASSERT_EQ(graph(1, cfg, whole, "-k 4 --exclude-self --block-rows 8").rc, 0);

  const CmdResult stopped = graph(2, cfg, out, "-k 4 --exclude-self --block-rows 8 --stop-after-blocks 3");
  EXPECT_NE(stopped.rc, 0);
  EXPECT_THAT(stopped.err, HasSubstr("stopping after 3 block(s)"));
  EXPECT_EQ(rows_done(out), 24);

  const CmdResult resumed = graph(4, cfg, out, "-k 4 --exclude-self --block-rows 5 --batch 2");
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("37 rows (continued from row 24)"));
  EXPECT_EQ(rows_done(out), kN);
  test::expect_bit_identical(read_graph(out, 4), read_graph(whole, 4), "resumed vs uninterrupted");
  EXPECT_TRUE(test::read_bytes(out) == test::read_bytes(whole)) << "the files differ byte for byte";

  const std::string timings = dir_.file("again.json");
  const CmdResult again = graph(1, cfg, out, "-k 4 --exclude-self --timings-json " + timings);
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("is complete (61 rows, k=4); nothing to do"));
  // --timings-json is written for a run with nothing to do too
  const std::string t = test::read_text(timings);
  EXPECT_THAT(t, AllOf(HasSubstr("\"rows_searched\": 0"), HasSubstr("\"start_row\": 61"), HasSubstr("\"k\": 4")))
      << t;
}

// An output another process has open (HDF5's file lock, as a job still writing it holds it) is
// refused with --overwrite and without, and is left byte for byte as it was; once it is closed,
// --overwrite starts over.
TEST_F(KnnGraph, AnOutputInUseIsRefusedAndLeftAsItWas) {
  const std::string cfg = write_config(write_corpus(), "l2");
  const std::string out = dir_.file("g.h5");
  ASSERT_NE(graph(1, cfg, out, "-k 4 --block-rows 8 --stop-after-blocks 2").rc, 0);
  ASSERT_EQ(rows_done(out), 16);
  const auto before = test::read_bytes(out);

  const hid_t writer = H5Fopen(out.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(writer, 0);
  {
    const int fd = ::open(out.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    const bool locked = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
    ::close(fd);
    if (!locked) {
      H5Fclose(writer);
      GTEST_SKIP() << "this HDF5 does not lock the files it opens (HDF5_USE_FILE_LOCKING=FALSE?)";
    }
  }
  for (const std::string args : {"-k 4 --block-rows 8 --overwrite", "-k 4 --block-rows 8"}) {
    const CmdResult r = graph(1, cfg, out, args);
    EXPECT_NE(r.rc, 0) << args;
    EXPECT_THAT(r.err, HasSubstr("output '" + out + "' is in use: another process has it open")) << args;
    EXPECT_TRUE(test::read_bytes(out) == before) << args << ": the file changed";
  }
  H5Fclose(writer);
  const CmdResult r = graph(2, cfg, out, "-k 4 --block-rows 8 --overwrite");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(rows_done(out), kN);
}

// A rerun with other arguments is refused before the ingest, naming each difference with both
// values; --overwrite starts over. A file that is not a knn-graph output is never continued.
TEST_F(KnnGraph, RerunWithOtherArgumentsIsRefusedNamingTheDifference) {
  const std::string corpus = write_corpus();
  const std::string cfg = write_config(corpus, "l2");
  const std::string out = dir_.file("g.h5");
  ASSERT_NE(graph(1, cfg, out, "-k 4 --block-rows 8 --stop-after-blocks 1").rc, 0);
  ASSERT_EQ(rows_done(out), 8);
  struct Case {
    std::string args, names;
  };
  const std::vector<Case> cases = {
      {"-k 5", "k (-k): 4 there, 5 here"},
      {"-k 4 --exclude-self", "--exclude-self (1: given): 0 there, 1 here"},
      {"-k 4 --set search.metric=inner_product", "metric (search.metric): 'l2' there, 'inner_product' here"},
      {"-k 4 --set engine.dtype=float16", "engine.dtype: 'float32' there, 'float16' here"},
  };
  for (const Case& c : cases) {
    const CmdResult r = graph(2, cfg, out, c.args);
    EXPECT_NE(r.rc, 0) << c.args;
    EXPECT_THAT(r.err, AllOf(HasSubstr("holds a knn-graph job with other arguments"), HasSubstr(c.names),
                             HasSubstr("--overwrite")))
        << c.args;
    EXPECT_EQ(test::count_of(r.err, c.names), 1) << "reported once, by rank 0:\n" << r.err;
    EXPECT_EQ(rows_done(out), 8) << "a refused run leaves the file as it was";
  }
  // Another engine (the file says cuda): refused once the corpus is loaded and the engine known.
  {
    const hid_t f = H5Fopen(out.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Adelete(f, "engine"), 0);
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    const hid_t sp = H5Screate(H5S_SCALAR);
    const hid_t at = H5Acreate2(f, "engine", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    const char* cuda = "cuda";
    EXPECT_GE(H5Awrite(at, t, &cuda), 0);
    H5Aclose(at);
    H5Sclose(sp);
    H5Tclose(t);
    H5Fclose(f);
  }
  CmdResult r = graph(2, cfg, out, "-k 4");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("engine (engine.backend): 'cuda' there, 'cpu' here")) << r.err;
  EXPECT_EQ(rows_done(out), 8);
  // The same shape of corpus with one value changed: another file.
  corpus_[3] += 1;
  write_corpus();
  r = graph(1, cfg, out, "-k 4");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("corpus file checksum (CRC-32C of its first and last MiB)")) << r.err;
  // --overwrite starts over, over the changed corpus.
  r = graph(1, cfg, out, "-k 4 --overwrite");
  ASSERT_EQ(r.rc, 0) << r.err;
  test::expect_exact(Metric::kL2, corpus_, kN, nullptr, corpus_, kN, kDim, 4, read_graph(out, 4), "overwritten");
  // Not a graph file: neither continued nor overwritten without --overwrite.
  const std::string other = dir_.file("other.h5");
  {
    H5Writer w(other);
    w.write_f32("train", corpus_.data(), kN, kDim);
  }
  r = graph(1, cfg, other, "-k 4");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("exists and is not a knn-graph file")) << r.err;
  test::write_text(dir_.file("text.h5"), "not hdf5\n");
  r = graph(1, cfg, dir_.file("text.h5"), "-k 4");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("exists and cannot be opened as HDF5")) << r.err;
  // A partial output whose ids dataset has another type (float32, same shape): not this job's
  // file (rows continued into it would be converted on the way in).
  const std::string typed = dir_.file("typed.h5");
  ASSERT_NE(graph(1, cfg, typed, "-k 4 --block-rows 8 --stop-after-blocks 1").rc, 0);
  {
    const hid_t f = H5Fopen(typed.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Ldelete(f, "ids", H5P_DEFAULT), 0);
    const hsize_t dims[2] = {static_cast<hsize_t>(kN), 4};
    const hid_t sp = H5Screate_simple(2, dims, nullptr);
    const hid_t ds = H5Dcreate2(f, "ids", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(ds, 0);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Fclose(f);
  }
  r = graph(1, cfg, typed, "-k 4");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("dataset 'ids' is not int64")) << r.err;
}

// A row whose scores as a query would overflow float32 (its norm times the largest row norm):
// every row is a query, so the largest row decides it at the start, after the ingest and before
// the output is opened (admission would refuse that row's batch only when it comes up, hours
// into a large job). The job stops on every rank naming the row; nothing is written.
TEST_F(KnnGraph, ARowThatCannotBeAQueryIsNamedAndStopsEveryRank) {
  for (std::int64_t j = 0; j < kDim; ++j) corpus_[30 * kDim + j] = 3.0e19f;
  const std::string corpus = write_corpus();
  const std::string cfg = write_config(corpus, "inner_product");
  for (int ranks : {1, 2}) {
    const std::string out = dir_.file("g" + std::to_string(ranks) + ".h5");
    const CmdResult r = graph(ranks, cfg, out, "-k 3 --batch 4 --block-rows 16");
    EXPECT_NE(r.rc, 0) << ranks << " rank(s): " << r.err;
    EXPECT_THAT(r.err, AllOf(HasSubstr("row id 30 has norm"), HasSubstr("every row is a query of the k-NN graph"),
                             HasSubstr("nothing was written")))
        << ranks << " rank(s)";
    EXPECT_FALSE(std::filesystem::exists(out)) << ranks << " rank(s)";
  }
}

// The output's file system fills up (a tmpfs of 200 KiB). Blocks are written on a helper thread
// while the next one is searched: the failed write still stops every rank, names the file, the
// rows and the system's reason, and leaves rows_done at a block boundary below which every row
// is what an uninterrupted run writes. Blocks of 1,024 rows at k = 10 (82 KB of ids: written
// through) and of 256 rows at k = 4 (8 KB: small writes libhdf5 would otherwise hold back and
// lose at the dataset's close, after rows_done had covered them).
TEST_F(KnnGraph, AWriteThatFailsStopsEveryRankAndKeepsTheBlocksBeforeIt) {
  const std::string mnt = dir_.file("small");
  ASSERT_EQ(::mkdir(mnt.c_str(), 0700), 0);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=200k") != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno) << "): needs root";
  struct Unmount {
    std::string dir;
    ~Unmount() { ::umount2(dir.c_str(), MNT_DETACH); }
  } unmount{mnt};
  constexpr std::int64_t kRows = 6000;
  const std::vector<float> rows = test::small_ints(kRows * kDim, 5, -3, 3);
  const std::string corpus = dir_.file("big.h5");
  {
    H5Writer w(corpus);
    w.write_f32("train", rows.data(), kRows, kDim);
    w.close();
  }
  const std::string cfg = write_config(corpus, "l2");
  struct Case {
    int k, block;
  };
  for (const Case c : {Case{10, 1024}, Case{4, 256}}) {
    const std::string args = "-k " + std::to_string(c.k) + " --block-rows " + std::to_string(c.block) + " --batch 256";
    const std::string whole = dir_.file("whole-" + std::to_string(c.k) + ".h5");
    ASSERT_EQ(graph(1, cfg, whole, args).rc, 0);
    std::int64_t wr = 0, wc = 0;
    const std::vector<std::int64_t> want = read_int64_matrix(whole, "ids", &wr, &wc);
    for (int ranks : {1, 2}) {
      SCOPED_TRACE(args + ", " + std::to_string(ranks) + " rank(s)");
      const std::string out = mnt + "/g" + std::to_string(ranks) + ".h5";
      const CmdResult r = graph(ranks, cfg, out, args);
      EXPECT_NE(r.rc, 0);
      EXPECT_THAT(r.err, AllOf(HasSubstr("'" + out + "': writing rows ["), HasSubstr("No space left on device")))
          << r.err;
      EXPECT_THAT(r.err, ::testing::Not(HasSubstr("HDF5-DIAG"))) << "HDF5's own error stack is printed";
      const std::int64_t done = rows_done(out);
      EXPECT_GE(done, 0);
      EXPECT_LT(done, kRows);
      EXPECT_EQ(done % c.block, 0) << done;
      if (done > 0) {
        std::int64_t gr = 0, gc = 0;
        const std::vector<std::int64_t> got = read_int64_matrix(out, "ids", &gr, &gc);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_TRUE(std::equal(got.begin(), got.begin() + done * c.k, want.begin()))
            << "rows below rows_done differ from an uninterrupted run";
      }
      ::unlink(out.c_str());
    }
  }
  // A disk full while the output is created (8 KiB: not even its metadata fits): the job stops
  // with its error, and the process ends by itself (libhdf5's clean-up at exit crashed on the
  // file whose close had failed).
  const std::string tiny = dir_.file("tiny");
  ASSERT_EQ(::mkdir(tiny.c_str(), 0700), 0);
  ASSERT_EQ(::mount("tmpfs", tiny.c_str(), "tmpfs", 0, "size=8k"), 0) << std::strerror(errno);
  const Unmount unmount_tiny{tiny};
  const CmdResult r = graph(1, cfg, tiny + "/g.h5", "-k 7 --block-rows 100");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("No space left on device"), ::testing::Not(HasSubstr("signal")),
                           ::testing::Not(HasSubstr("Segmentation"))))
      << r.err;
}

TEST_F(KnnGraph, BadArgumentsAreNamed) {
  const std::string corpus = write_corpus();
  const std::string cfg = write_config(corpus, "l2");
  const std::string out = dir_.file("g.h5");
  struct Case {
    std::string args, names;
  };
  const std::vector<Case> cases = {
      {"-k 0", "--k 0 out of range: allowed 1 .. 61"},
      {"-k 62", "--k 62 out of range: allowed 1 .. 61"},
      {"-k 61 --exclude-self", "--k 61 out of range: allowed 1 .. 60"},
      {"-k 3 --batch 0", "--batch 0 out of range"},
      {"-k 3 --block-rows 0", "--block-rows 0 out of range"},
      {"-k 3 --set storage.dir=" + dir_.file("st"), "storage.dir is set"},
  };
  for (const Case& c : cases) {
    const CmdResult r = graph(2, cfg, out, c.args);
    EXPECT_NE(r.rc, 0) << c.args;
    EXPECT_THAT(r.err, HasSubstr(c.names)) << c.args;
    EXPECT_EQ(test::count_of(r.err, c.names), 1) << r.err;
  }
  CmdResult r = graph(1, cfg, corpus, "-k 3 --overwrite");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("refusing to write '" + corpus + "': it is the corpus file"));
  r = graph(1, cfg, dir_.file("no/such/g.h5"), "-k 3");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("does not exist or is not writable"));
  // A corpus of one row has no neighbour to find once the row itself is left out.
  const std::string one = dir_.file("one.h5");
  {
    H5Writer w(one);
    w.write_f32("train", corpus_.data(), 1, kDim);
    w.close();
  }
  const std::string one_cfg = write_config(one, "l2");
  r = graph(1, one_cfg, out, "-k 1 --exclude-self");
  EXPECT_NE(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("has 1 row(s) and --exclude-self leaves no other row: a k-NN graph needs at least "
                               "one neighbour per row"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("allowed 1 .. 0")));
}

}  // namespace
}  // namespace shardtopk
