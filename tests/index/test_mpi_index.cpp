// ShardedIndex end to end under MPI (one binary, registered in CTest for P = 1, 2, 3, 4).
//
// Every rank runs every test: the index's calls are collective. Rank 0 writes the fixture HDF5
// files into a per-run folder whose name it broadcasts; the others wait at a barrier. Only rank
// 0 prints gtest's normal output; other ranks print their failures only, tagged "[rank r]", and
// the exit code is the worst over all ranks.
//
// Checks (DESIGN.md): ids identical to the single-process answer and scores bit-identical
// (invariant 3), exact ids against the float64 oracle on small-integer data with ties (4), ties
// broken on global ids from an `ids` dataset (2), each rank's candidates come only from its own
// rows, padding when K exceeds a shard, P > N, and bad input: a clear error naming the value on
// every rank, no crash, and the index still answers the next good batch (6).
#include <cstdlib>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "h5_raw.hpp"
#include "mpi_gtest.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/space.hpp"
#include "index/index_impl.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/ingest.hpp"
#include "tools/oracle.hpp"
#include "shardtopk/shard_plan.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using test::Answer;

int g_rank = 0, g_world = 1;
std::string g_dir;  // per-run fixture folder (same path on every rank)

// A fixture file name unique to the running test.
std::string fixture(const std::string& stem) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name() + "." + stem + ".h5";
  for (char& ch : name)
    if (ch == '/') ch = '_';
  return g_dir + "/" + name;
}

// Rank 0 runs `write`; everybody waits until it is done.
void on_root(const std::function<void()>& write) {
  if (g_rank == 0) {
    try {
      write();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "writing a fixture failed: " << e.what();  // still reach the barrier
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

Config base_config(const std::string& path, std::optional<Metric> metric, int k_max, int batch_max) {
  Config c;
  c.source = "test";
  c.corpus.path = path;
  c.search.metric = metric;
  c.search.k_max = k_max;
  c.search.batch_max = batch_max;
  // SHARDTOPK_TEST_ENGINE=cuda runs the same tests with the CUDA engine and NCCL (one GPU per
  // rank; bench/gpu_run.sh does this). The CUDA engine's scores are bit-identical to the CPU
  // engine's, so the in-process CPU reference below holds for both.
  const char* eng = std::getenv("SHARDTOPK_TEST_ENGINE");
  const bool cuda = eng && std::string(eng) == "cuda";
  c.engine.backend = cuda ? EngineBackend::kCuda : EngineBackend::kCpu;
  c.engine.threads = 1;
  c.engine.read_chunk_rows = 4;  // several hyperslab reads per shard
  const char* comm = std::getenv("SHARDTOPK_TEST_COMM");
  c.comm.backend = comm ? parse_comm_backend(comm) : (cuda ? CommBackend::kAuto : CommBackend::kMpi);
  c.comm.timeout_s = 60;
  return c;
}

// Collective search; the answer is meaningful on rank 0 only.
Answer index_search(ShardedIndex& idx, const std::vector<float>& queries, std::int64_t q0, int batch, int k) {
  Answer a;
  a.ids.assign(static_cast<size_t>(batch) * k, -1);
  a.scores.assign(a.ids.size(), NAN);
  idx.search(g_rank == 0 ? queries.data() + q0 * idx.info().dim : nullptr, batch, k, g_rank == 0 ? a.ids.data() : nullptr,
             g_rank == 0 ? a.scores.data() : nullptr);
  return a;
}

// What an engine of the same backend (one arithmetic per backend: DESIGN.md invariant 3) gives
// over rows [lo, hi) of the corpus in one process: rows normalised for cosine as the index does
// at ingest, queries prepared by the engine.
std::vector<Candidate> engine_candidates(const std::vector<float>& corpus, std::int64_t lo, std::int64_t hi,
                                         std::int64_t dim, const std::vector<std::int64_t>& ids, Metric m, Dtype dt,
                                         const float* queries, int batch, int k, const EngineInfo& like) {
  std::vector<float> shard(corpus.begin() + lo * dim, corpus.begin() + hi * dim);
  if (m == Metric::kCosine) normalize_rows(shard.data(), hi - lo, dim, lo, "corpus row");
  const ShardInput in{shard.data(), hi - lo, dim, ids.data() + lo};
  EngineOptions opt;
  opt.threads = 1;
  opt.device = like.device;
  auto e = like.name == "cuda" ? make_cuda_engine(in, m, dt, EngineLimits{batch, k}, opt)
                                      : make_cpu_engine(in, m, dt, EngineLimits{batch, k}, opt);
  return test::EngineRunner(*e).search(queries, batch, k);
}

Answer to_answer(const std::vector<Candidate>& c, Metric m) {
  Answer a;
  for (const auto& x : c) {
    a.ids.push_back(x.id);
    a.scores.push_back(reported_score(m, x.score));
  }
  return a;
}

// This rank's candidates of the last search come from its own rows only: they equal (bit for
// bit) a single engine over exactly rows shard_rows(n, P, rank), padded past the shard's size.
void expect_local_candidates_from_own_rows(ShardedIndex& idx, const std::vector<float>& corpus, std::int64_t n,
                                           std::int64_t dim, const std::vector<std::int64_t>& ids, Metric m, Dtype dt,
                                           const float* queries, int batch, int k) {
  const RowRange rr = shard_rows(n, g_world, g_rank);
  const IndexInfo info = idx.info();
  EXPECT_EQ(info.ingest.rows.lo, rr.lo);
  EXPECT_EQ(info.ingest.rows.hi, rr.hi);
  EXPECT_EQ(info.engine.rows, rr.size());
  const std::vector<Candidate> local = IndexAccess::last_local_candidates(idx);
  ASSERT_EQ(local.size(), static_cast<size_t>(batch) * k);
  const std::vector<std::int64_t> mine(ids.begin() + rr.lo, ids.begin() + rr.hi);
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < k; ++j) {
      const Candidate& c = local[static_cast<size_t>(b) * k + j];
      if (j < rr.size()) {
        EXPECT_NE(std::find(mine.begin(), mine.end(), c.id), mine.end())
            << "[rank " << g_rank << "] query " << b << " slot " << j << ": id " << c.id << " is not in rows ["
            << rr.lo << ", " << rr.hi << ")";
      } else {
        EXPECT_EQ(c.id, kPadId) << "[rank " << g_rank << "] slot " << j << " past the shard's " << rr.size() << " rows";
      }
    }
  const auto expect = engine_candidates(corpus, rr.lo, rr.hi, dim, ids, m, dt, queries, batch, k, info.engine);
  test::expect_bit_identical(to_answer(local, m), to_answer(expect, m), "rank " + std::to_string(g_rank) + " local");
}

// ------------------------------------------------------------------------------ correct answers

enum class Data { kRandom, kSmallInt, kConstant };
enum class OnDisk { kF32, kF32Chunked, kF16, kF64 };

struct IndexCase {
  std::string name;
  Metric metric;
  Dtype dtype;  // engine storage
  Data data;
  OnDisk disk;
  std::int64_t n, dim, nq;
  int k, batch;
  bool ids_dataset = false;  // shuffled, offset int64 global ids
  std::string dataset = "train";
};
std::ostream& operator<<(std::ostream& os, const IndexCase& c) {
  return os << c.name << ": " << to_string(c.metric) << " " << to_string(c.dtype) << " N=" << c.n << " D=" << c.dim
            << " Q=" << c.nq << " K=" << c.k << " batch=" << c.batch << (c.ids_dataset ? " ids" : "") << " dataset "
            << c.dataset;
}

class MpiIndex : public ::testing::TestWithParam<IndexCase> {};

TEST_P(MpiIndex, SameAnswerAsOneProcessAndTheOracle) {
  const IndexCase c = GetParam();
  std::vector<float> corpus = c.data == Data::kRandom     ? test::random_floats(c.n * c.dim, 21)
                              : c.data == Data::kSmallInt ? test::small_ints(c.n * c.dim, 21, -1, 2)
                                                          : std::vector<float>(c.n * c.dim, 1.0f);
  std::vector<float> queries =
      c.data == Data::kRandom ? test::random_floats(c.nq * c.dim, 22) : test::small_ints(c.nq * c.dim, 22, -2, 2);
  if (c.metric == Metric::kCosine) {
    test::fix_zero_rows(&corpus, c.dim);
    test::fix_zero_rows(&queries, c.dim);
  }
  if (c.disk == OnDisk::kF16) corpus = test::round_to(Dtype::kFloat16, corpus);  // what the file holds
  std::vector<std::int64_t> ids = test::iota_ids(c.n);
  if (c.ids_dataset) {
    ids = test::iota_ids(c.n, 1'000'000'007LL);
    for (auto& x : ids) x = x * 3 - 500;  // offset, spaced
    std::mt19937_64 rng(23);
    std::shuffle(ids.begin(), ids.end(), rng);
  }
  const std::string path = fixture("corpus");
  on_root([&] {
    H5Writer w(path);
    switch (c.disk) {
      case OnDisk::kF32: w.write_f32(c.dataset, corpus.data(), c.n, c.dim); break;
      case OnDisk::kF32Chunked: w.write_f32(c.dataset, corpus.data(), c.n, c.dim, 3); break;
      case OnDisk::kF16: w.write_f16(c.dataset, corpus.data(), c.n, c.dim); break;
      case OnDisk::kF64: {
        std::vector<double> d(corpus.begin(), corpus.end());
        w.write_f64(c.dataset, d.data(), c.n, c.dim);
        break;
      }
    }
    if (c.ids_dataset) w.write_i64("ids", ids.data(), c.n, 0);
    w.close();
  });

  Config cfg = base_config(path, c.metric, c.k, c.batch);
  cfg.corpus.dataset = c.dataset;
  cfg.engine.dtype = c.dtype;
  if (c.ids_dataset) cfg.corpus.ids_dataset = "ids";
  auto idx_holder = load_index(cfg, false);
  ShardedIndex& idx = *idx_holder;
  const IndexInfo info = idx.info();
  EXPECT_EQ(info.world_size, g_world);
  EXPECT_EQ(info.rank, g_rank);
  EXPECT_EQ(info.rows, c.n);
  EXPECT_EQ(info.dim, c.dim);
  EXPECT_EQ(info.metric, c.metric);
  EXPECT_EQ(info.engine.name, cfg.engine.backend == EngineBackend::kCuda ? "cuda" : "cpu");

  // Batches of c.batch (the last one short), checking each rank's local candidates per batch.
  Answer got;
  for (std::int64_t q0 = 0; q0 < c.nq; q0 += c.batch) {
    const int b = static_cast<int>(std::min<std::int64_t>(c.batch, c.nq - q0));
    const Answer a = index_search(idx, queries, q0, b, c.k);
    got.ids.insert(got.ids.end(), a.ids.begin(), a.ids.end());
    got.scores.insert(got.scores.end(), a.scores.begin(), a.scores.end());
    expect_local_candidates_from_own_rows(idx, corpus, c.n, c.dim, ids, c.metric, c.dtype, queries.data() + q0 * c.dim,
                                          b, c.k);
  }
  // One query at a time gives the same bits (batch composition independence through the index).
  Answer alone;
  for (std::int64_t q = 0; q < std::min<std::int64_t>(c.nq, 3); ++q) {
    const Answer a = index_search(idx, queries, q, 1, c.k);
    alone.ids.insert(alone.ids.end(), a.ids.begin(), a.ids.end());
    alone.scores.insert(alone.scores.end(), a.scores.begin(), a.scores.end());
  }
  if (g_rank != 0) return;

  // The single-process answer: one engine of the index's backend over the whole corpus, bit for bit.
  Answer single;
  for (std::int64_t q0 = 0; q0 < c.nq; q0 += c.batch) {
    const int b = static_cast<int>(std::min<std::int64_t>(c.batch, c.nq - q0));
    const Answer a = to_answer(
        engine_candidates(corpus, 0, c.n, c.dim, ids, c.metric, c.dtype, queries.data() + q0 * c.dim, b, c.k,
                          info.engine),
        c.metric);
    single.ids.insert(single.ids.end(), a.ids.begin(), a.ids.end());
    single.scores.insert(single.scores.end(), a.scores.begin(), a.scores.end());
  }
  test::expect_bit_identical(got, single, c.name + ": P=" + std::to_string(g_world) + " vs one process");
  Answer head;
  head.ids.assign(got.ids.begin(), got.ids.begin() + alone.ids.size());
  head.scores.assign(got.scores.begin(), got.scores.begin() + alone.scores.size());
  test::expect_bit_identical(alone, head, c.name + ": batch 1 vs batch " + std::to_string(c.batch));

  // The float64 oracle on the values the engine holds.
  const bool exact = c.data != Data::kRandom && c.metric != Metric::kCosine;
  const std::vector<float> oc = test::round_to(c.dtype, corpus);
  if (exact) {
    test::expect_exact(c.metric, oc, c.n, ids.data(), queries, c.nq, c.dim, c.k, got, c.name);
  } else if (c.dtype == Dtype::kFloat32 || c.metric != Metric::kCosine) {
    test::expect_within_tolerance(c.metric, oc, c.n, ids.data(), queries, c.nq, c.dim, c.k, got, c.name);
  } else {
    const auto unit = test::round_to(c.dtype, test::normalized(corpus, c.n, c.dim));
    test::expect_within_tolerance(Metric::kInnerProduct, unit, c.n, ids.data(), test::normalized(queries, c.nq, c.dim),
                                  c.nq, c.dim, c.k, got, c.name);
  }
  if (c.data == Data::kConstant) {
    // every row ties: the answer is the K smallest global ids, in order
    std::vector<std::int64_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    for (std::int64_t q = 0; q < c.nq; ++q)
      EXPECT_EQ(std::vector<std::int64_t>(got.ids.begin() + q * c.k, got.ids.begin() + (q + 1) * c.k),
                std::vector<std::int64_t>(sorted.begin(), sorted.begin() + c.k))
          << "query " << q;
  }
}

const Metric kIp = Metric::kInnerProduct, kCos = Metric::kCosine, kL2 = Metric::kL2;

// Cases: the three metrics on random data; small-integer data with many ties (exact ids);
// every row equal with a shuffled offset `ids` dataset (ties decide on global ids); K larger
// than a shard (padding); P > N (N = 3); K = N; each on-disk dtype and chunked storage; a
// nested dataset path; float16/bfloat16 engine storage; a large answer (256 queries × k = 600).
INSTANTIATE_TEST_SUITE_P(
    Cases, MpiIndex,
    ::testing::Values(
        IndexCase{"ip_random", kIp, Dtype::kFloat32, Data::kRandom, OnDisk::kF32, 103, 19, 9, 10, 4},
        IndexCase{"cos_random", kCos, Dtype::kFloat32, Data::kRandom, OnDisk::kF32Chunked, 103, 19, 9, 10, 4},
        IndexCase{"l2_random", kL2, Dtype::kFloat32, Data::kRandom, OnDisk::kF64, 103, 19, 9, 10, 9},
        IndexCase{"ip_smallint_ties", kIp, Dtype::kFloat32, Data::kSmallInt, OnDisk::kF32, 120, 3, 7, 25, 3},
        IndexCase{"l2_smallint_ties_ids", kL2, Dtype::kFloat32, Data::kSmallInt, OnDisk::kF32Chunked, 120, 3, 7, 25, 7,
                  true},
        IndexCase{"ip_all_equal_ids", kIp, Dtype::kFloat32, Data::kConstant, OnDisk::kF32, 50, 4, 3, 20, 2, true},
        IndexCase{"l2_all_equal_ids_f16", kL2, Dtype::kFloat16, Data::kConstant, OnDisk::kF16, 50, 4, 3, 20, 3, true},
        IndexCase{"padding_k_gt_shard", kIp, Dtype::kFloat32, Data::kSmallInt, OnDisk::kF32, 10, 5, 4, 8, 4},
        IndexCase{"p_gt_n", kL2, Dtype::kFloat32, Data::kSmallInt, OnDisk::kF32, 3, 4, 5, 3, 5},
        IndexCase{"p_gt_n_ids", kIp, Dtype::kFloat32, Data::kConstant, OnDisk::kF32, 3, 2, 2, 2, 2, true},
        IndexCase{"k_equals_n", kIp, Dtype::kFloat32, Data::kSmallInt, OnDisk::kF64, 37, 9, 5, 37, 5},
        IndexCase{"nested_dataset", kCos, Dtype::kFloat32, Data::kRandom, OnDisk::kF32Chunked, 41, 33, 6, 5, 6, false,
                  "emb/vectors"},
        IndexCase{"ip_f16_disk_and_engine", kIp, Dtype::kFloat16, Data::kRandom, OnDisk::kF16, 77, 24, 6, 7, 4},
        IndexCase{"cos_bf16_engine", kCos, Dtype::kBFloat16, Data::kRandom, OnDisk::kF32, 77, 24, 6, 7, 4},
        IndexCase{"l2_smallint_bf16", kL2, Dtype::kBFloat16, Data::kSmallInt, OnDisk::kF32, 64, 7, 6, 11, 6, true},
        // a large answer: 256 × 600 (1.8 MB) out of the export
        IndexCase{"large_answer", kIp, Dtype::kFloat32, Data::kSmallInt, OnDisk::kF32, 600, 4, 256, 600,
                  256}),
    [](const ::testing::TestParamInfo<IndexCase>& i) { return i.param.name; });

TEST(MpiIndexMetric, ResolvedFromTheFileWhenTheConfigLeavesItUnset) {
  const std::string path = fixture("corpus");
  const auto v = test::small_ints(20 * 3, 61, 1, 3);
  struct Row {
    const char* distance;  // "" = no attribute
    Metric expect;
  };
  for (const Row& r : {Row{"angular", kCos}, Row{"euclidean", kL2}, Row{"dot", kIp}, Row{"", kIp}}) {
    on_root([&] {
      H5Writer w(path);
      w.write_f32("train", v.data(), 20, 3);
      if (*r.distance) w.set_attr("distance", std::string(r.distance));
      w.close();
    });
    {
      auto idx_holder = load_index(base_config(path, std::nullopt, 8, 4), false);
      ShardedIndex& idx = *idx_holder;
      EXPECT_EQ(idx.info().metric, r.expect) << "distance='" << r.distance << "'";
    }
    // The config wins over the file.
    {
      auto idx_holder = load_index(base_config(path, kL2, 8, 4), false);
      ShardedIndex& idx = *idx_holder;
      EXPECT_EQ(idx.info().metric, kL2);
    }
    MPI_Barrier(MPI_COMM_WORLD);  // nobody reads the file while rank 0 rewrites it
  }
}

// ------------------------------------------------------------------------------ start-up errors

// The message every rank gets when the index refuses to start ("<started>" when it did not).
std::string startup_error(const Config& cfg) {
  try {
    auto idx_holder = load_index(cfg, false);
    return "<started>";
  } catch (const RemoteError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a RemoteError> ") + e.what();
  }
}

class MpiIndexStartupErrors : public ::testing::Test {
 protected:
  // A valid corpus [n, 4] of small integers, plus whatever `extra` adds, written by rank 0.
  std::string write_corpus(const std::function<void(H5Writer&, std::vector<float>&)>& extra, std::int64_t n = 50) {
    const std::string path = fixture("corpus");
    on_root([&] {
      std::vector<float> v = test::small_ints(n * 4, 31, 1, 3);
      H5Writer w(path);
      extra(w, v);
      w.write_f32("train", v.data(), n, 4);
      w.close();
    });
    return path;
  }
};

TEST_F(MpiIndexStartupErrors, MissingFile) {
  const std::string path = g_dir + "/does-not-exist.h5";
  // Every rank fails alike: one line naming all of them ("rank 0: " alone, "ranks 0, 1, ...: ").
  const std::string want = g_world == 1 ? std::string("rank 0: ") : std::string("ranks 0, 1");
  const std::string msg = startup_error(base_config(path, kIp, 8, 4));
  EXPECT_THAT(msg, AllOf(HasSubstr(want), HasSubstr("cannot open"), HasSubstr(path)));
  EXPECT_EQ(test::count_of(msg, "cannot open"), 1) << "one line for identical messages:\n" << msg;
}

TEST_F(MpiIndexStartupErrors, MissingDatasetListsThosePresent) {
  const std::string path = write_corpus([](H5Writer&, std::vector<float>&) {});
  Config cfg = base_config(path, kIp, 8, 4);
  cfg.corpus.dataset = "vectors";
  EXPECT_THAT(startup_error(cfg), AllOf(HasSubstr("has no dataset 'vectors'"), HasSubstr("datasets present: train [50,4] float32")));
}

TEST_F(MpiIndexStartupErrors, OneAndThreeDimensionalDatasets) {
  const std::string path = write_corpus([](H5Writer& w, std::vector<float>& v) { w.write_f32("flat", v.data(), 20, 0); });
  on_root([&] { test::write_raw_dataset(path, "cube", test::Disk::kF32, std::vector<double>(24, 1.0), {2, 3, 4}, 0); });
  Config cfg = base_config(path, kIp, 8, 4);
  cfg.corpus.dataset = "flat";
  EXPECT_THAT(startup_error(cfg), AllOf(HasSubstr("'flat'"), HasSubstr("must be 2-D"), HasSubstr("1-D")));
  cfg.corpus.dataset = "cube";
  EXPECT_THAT(startup_error(cfg), AllOf(HasSubstr("'cube'"), HasSubstr("must be 2-D"), HasSubstr("3-D")));
}

TEST_F(MpiIndexStartupErrors, NonFloatDtype) {
  const std::string path = write_corpus([](H5Writer& w, std::vector<float>&) {
    const std::vector<std::int32_t> ints(50 * 4, 2);
    w.write_i32("ints", ints.data(), 50, 4);
  });
  Config cfg = base_config(path, kIp, 8, 4);
  cfg.corpus.dataset = "ints";
  EXPECT_THAT(startup_error(cfg), AllOf(HasSubstr("'ints'"), HasSubstr("int32"), HasSubstr("expected float16, float32 or float64")));
}

TEST_F(MpiIndexStartupErrors, EmptyDataset) {
  const std::string path = write_corpus([](H5Writer& w, std::vector<float>& v) { w.write_f32("none", v.data(), 0, 4); });
  Config cfg = base_config(path, kIp, 8, 4);
  cfg.corpus.dataset = "none";
  EXPECT_THAT(startup_error(cfg), AllOf(HasSubstr("'none'"), HasSubstr("empty")));
}

TEST_F(MpiIndexStartupErrors, NanInOneShardNamesTheRankAndTheGlobalRow) {
  const std::int64_t n = 50, bad_row = 37;
  const std::string path = write_corpus([&](H5Writer&, std::vector<float>& v) {
    v[bad_row * 4 + 1] = std::numeric_limits<float>::quiet_NaN();
  });
  int owner = 0;
  for (int r = 0; r < g_world; ++r)
    if (shard_rows(n, g_world, r).lo <= bad_row && bad_row < shard_rows(n, g_world, r).hi) owner = r;
  const std::string msg = startup_error(base_config(path, kIp, 8, 4));
  EXPECT_THAT(msg, AllOf(HasSubstr("rank " + std::to_string(owner) + ": "), HasSubstr("corpus row 37 "),
                         HasSubstr("nan"), HasSubstr("column 1")));
  EXPECT_EQ(test::count_of(msg, "corpus row 37 "), 1) << msg;
  for (int r = 0; r < g_world; ++r)
    if (r != owner) EXPECT_THAT(msg, Not(HasSubstr("rank " + std::to_string(r) + ": "))) << "only the owner fails";
}

TEST_F(MpiIndexStartupErrors, InfInACorpusRow) {
  const std::string path = write_corpus([&](H5Writer&, std::vector<float>& v) {
    v[3 * 4 + 0] = std::numeric_limits<float>::infinity();
  });
  EXPECT_THAT(startup_error(base_config(path, kIp, 8, 4)),
              AllOf(HasSubstr("rank 0: "), HasSubstr("corpus row 3 "), HasSubstr("inf")));
}

// A float16 file: on a GPU with inner product or l2 its rows travel as binary16 bits
// (stream_format), elsewhere as float32; either way a value that is not finite is refused with
// the same words, naming the row and column, whatever the storage type.
TEST_F(MpiIndexStartupErrors, NonFiniteValueInAFloat16File) {
  const float inf = std::numeric_limits<float>::infinity();
  const struct {
    float value;
    const char* text;
  } cases[] = {{inf, "inf"}, {-inf, "-inf"}, {std::numeric_limits<float>::quiet_NaN(), "nan"}};
  for (const auto& c : cases) {
    const std::string path = write_corpus([&](H5Writer& w, std::vector<float>& v) {
      std::vector<float> h = v;
      h[3 * 4 + 2] = c.value;
      w.write_f16("train16", h.data(), 50, 4);
    });
    for (const Metric m : {kIp, kL2})
      for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32}) {
        Config cfg = base_config(path, m, 8, 4);
        cfg.corpus.dataset = "train16";
        cfg.engine.dtype = t;
        EXPECT_THAT(startup_error(cfg), AllOf(HasSubstr("rank 0: "), HasSubstr("corpus row 3 "),
                                              HasSubstr(std::string("non-finite value (") + c.text + ") at column 2")))
            << to_string(m) << " " << to_string(t);
      }
  }
}

TEST_F(MpiIndexStartupErrors, TruncatedFile) {
  const std::string path = fixture("trunc");
  on_root([&] {
    const auto v = test::random_floats(400 * 16, 3);
    {
      H5Writer w(path);
      w.write_f32("train", v.data(), 400, 16);
    }
    test::truncate_to_half(path);
  });
  EXPECT_THAT(startup_error(base_config(path, kIp, 8, 4)), AllOf(HasSubstr(path), HasSubstr("truncated")));
}

TEST_F(MpiIndexStartupErrors, IdsDatasetOfTheWrongLength) {
  const std::string path = write_corpus([](H5Writer& w, std::vector<float>&) {
    const auto ids = test::iota_ids(9);
    w.write_i64("ids", ids.data(), 9, 0);
  }, 10);
  Config cfg = base_config(path, kIp, 8, 4);
  cfg.corpus.ids_dataset = "ids";
  EXPECT_THAT(startup_error(cfg), AllOf(HasSubstr("ids dataset 'ids' has 9 entries"), HasSubstr("10 rows")));
}

TEST_F(MpiIndexStartupErrors, IdsDatasetWithDuplicates) {
  const std::string path = write_corpus([](H5Writer& w, std::vector<float>&) {
    std::vector<std::int64_t> ids = test::iota_ids(10, 100);
    ids[7] = 102;
    w.write_i64("ids", ids.data(), 10, 0);
  }, 10);
  Config cfg = base_config(path, kIp, 8, 4);
  cfg.corpus.ids_dataset = "ids";
  EXPECT_THAT(startup_error(cfg), AllOf(HasSubstr("not unique"), HasSubstr("id 102 appears more than once")));
}

// INT64_MAX marks the empty slots of short answers: as a row's id it is refused naming the file,
// the dataset and the row.
TEST_F(MpiIndexStartupErrors, IdsDatasetWithTheReservedId) {
  const std::string path = write_corpus([](H5Writer& w, std::vector<float>&) {
    std::vector<std::int64_t> ids = test::iota_ids(10, 100);
    ids[6] = kPadId;
    w.write_i64("ids", ids.data(), 10, 0);
  }, 10);
  Config cfg = base_config(path, kIp, 8, 4);
  cfg.corpus.ids_dataset = "ids";
  EXPECT_THAT(startup_error(cfg), AllOf(HasSubstr("'" + path + "': ids dataset 'ids' holds id 9223372036854775807"),
                                        HasSubstr("at row 6")));
}

TEST_F(MpiIndexStartupErrors, IdsDatasetMissingOrNotIntegers) {
  const std::string path = write_corpus([](H5Writer& w, std::vector<float>& v) { w.write_f32("fids", v.data(), 10, 0); }, 10);
  Config cfg = base_config(path, kIp, 8, 4);
  cfg.corpus.ids_dataset = "ids";
  EXPECT_THAT(startup_error(cfg), HasSubstr("has no dataset 'ids'"));
  cfg.corpus.ids_dataset = "fids";
  EXPECT_THAT(startup_error(cfg), HasSubstr("expected an integer type"));
}

TEST_F(MpiIndexStartupErrors, IdsDatasetUsingThePaddingId) {
  const std::string path = write_corpus([](H5Writer& w, std::vector<float>&) {
    std::vector<std::int64_t> ids = test::iota_ids(10, -5);  // negative ids are fine ...
    ids[4] = kPadId;                                        // ... the padding id is not
    w.write_i64("ids", ids.data(), 10, 0);
  }, 10);
  Config cfg = base_config(path, kIp, 8, 4);
  cfg.corpus.ids_dataset = "ids";
  EXPECT_THAT(startup_error(cfg), AllOf(HasSubstr(std::to_string(kPadId)), HasSubstr("reserved")));
}

TEST_F(MpiIndexStartupErrors, ZeroNormRowUnderCosine) {
  const std::int64_t bad_row = 44;
  const std::string path = write_corpus([&](H5Writer&, std::vector<float>& v) {
    std::fill(v.begin() + bad_row * 4, v.begin() + (bad_row + 1) * 4, 0.0f);
  });
  EXPECT_THAT(startup_error(base_config(path, kCos, 8, 4)), AllOf(HasSubstr("corpus row 44 "), HasSubstr("zero norm")));
  // The same row is fine for inner product and l2.
  EXPECT_EQ(startup_error(base_config(path, kIp, 8, 4)), "<started>");
}

TEST_F(MpiIndexStartupErrors, UnknownDistanceAttribute) {
  const std::string path = write_corpus([](H5Writer& w, std::vector<float>&) { w.set_attr("distance", std::string("hamming")); });
  EXPECT_THAT(startup_error(base_config(path, std::nullopt, 8, 4)),
              AllOf(HasSubstr("distance='hamming'"), HasSubstr("search.metric")));
}

TEST_F(MpiIndexStartupErrors, ValuesOverflowingFloat16Storage) {
  const std::string path = write_corpus([](H5Writer&, std::vector<float>& v) { v[2 * 4 + 3] = 1.0e6f; });
  Config cfg = base_config(path, kIp, 8, 4);
  cfg.engine.dtype = Dtype::kFloat16;
  EXPECT_THAT(startup_error(cfg), AllOf(HasSubstr("corpus row 2 "), HasSubstr("overflows float16")));
}

TEST_F(MpiIndexStartupErrors, CudaBackendWithoutCuda) {
  if (built_with_cuda() && cuda_available()) GTEST_SKIP() << "built with CUDA and a GPU is visible: nothing to refuse";
  const std::string path = write_corpus([](H5Writer&, std::vector<float>&) {});
  Config cfg = base_config(path, kIp, 8, 4);
  cfg.engine.backend = EngineBackend::kCuda;
  EXPECT_THAT(startup_error(cfg), HasSubstr("engine.backend 'cuda'"));
}

TEST_F(MpiIndexStartupErrors, ConfigMissingCorpusPath) {
  Config cfg = base_config("", kIp, 8, 4);
  EXPECT_THAT(startup_error(cfg), HasSubstr("corpus.path"));
}

// ------------------------------------------------------------------------------ query errors

// A rejected batch throws Error on every rank (rank 0: the reason; others: that rank 0
// rejected it) and leaves the index answering the next good batch exactly.
class MpiIndexQueryErrors : public ::testing::Test {
 protected:
  static constexpr std::int64_t kN = 12, kDim = 5;
  static constexpr int kKMax = 16, kBatchMax = 8;

  void build(Metric m) {
    metric_ = m;
    corpus_ = test::small_ints(kN * kDim, 41, -2, 2);
    test::fix_zero_rows(&corpus_, kDim);
    good_ = test::small_ints(3 * kDim, 42, -2, 2);
    test::fix_zero_rows(&good_, kDim);
    const std::string path = fixture("corpus");
    on_root([&] {
      H5Writer w(path);
      w.write_f32("train", corpus_.data(), kN, kDim);
    });
    idx_ = load_index(base_config(path, m, kKMax, kBatchMax), false);
  }

  // The Error message of a rejected search (on this rank), "<answered>" when it was answered.
  std::string rejected(const float* q, int batch, int k) {
    std::vector<std::int64_t> ids(static_cast<size_t>(std::max(batch, 1)) * std::max(k, 1) + 64);
    std::vector<float> sc(ids.size());
    try {
      idx_->search(g_rank == 0 ? q : nullptr, batch, k, g_rank == 0 ? ids.data() : nullptr,
                   g_rank == 0 ? sc.data() : nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "<answered>";
  }

  void expect_rejected(const float* q, int batch, int k, const std::vector<std::string>& parts) {
    const std::string msg = rejected(q, batch, k);
    if (g_rank == 0) {
      for (const auto& p : parts) EXPECT_THAT(msg, HasSubstr(p));
    } else {
      EXPECT_THAT(msg, HasSubstr("rank 0 rejected the batch"));
    }
    expect_next_good_batch_exact();
  }

  void expect_next_good_batch_exact() {
    const int k = 6;
    const Answer a = index_search(*idx_, good_, 0, 3, k);
    if (g_rank != 0) return;
    if (metric_ == Metric::kCosine) {
      test::expect_within_tolerance(metric_, corpus_, kN, nullptr, good_, 3, kDim, k, a, "after a rejected batch");
    } else {
      test::expect_exact(metric_, corpus_, kN, nullptr, good_, 3, kDim, k, a, "after a rejected batch");
    }
  }

  Metric metric_ = Metric::kInnerProduct;
  std::vector<float> corpus_, good_;
  std::unique_ptr<ShardedIndex> idx_;
};

TEST_F(MpiIndexQueryErrors, KOutOfRange) {
  build(kL2);
  expect_rejected(good_.data(), 3, 0, {"k=0 out of range", "allowed 1 .. 12"});
  expect_rejected(good_.data(), 3, -3, {"k=-3 out of range"});
  expect_rejected(good_.data(), 3, 13, {"k=13", "(the corpus rows)"});  // K > N (N = 12 < k_max = 16)
  expect_rejected(good_.data(), 3, 17, {"k=17", "(the corpus rows)"});  // the binding limit is N
}

TEST_F(MpiIndexQueryErrors, KAboveKMaxWhenTheCorpusIsLarger) {
  // N = 40 > k_max = 16: K = 17 is refused because of k_max, not the corpus.
  const std::int64_t n = 40;
  metric_ = kIp;
  corpus_ = test::small_ints(n * kDim, 43, -2, 2);
  good_ = test::small_ints(3 * kDim, 44, -2, 2);
  const std::string path = fixture("corpus");
  on_root([&] {
    H5Writer w(path);
    w.write_f32("train", corpus_.data(), n, kDim);
  });
  idx_ = load_index(base_config(path, kIp, kKMax, kBatchMax), false);
  const std::string msg = rejected(good_.data(), 3, 17);
  if (g_rank == 0) EXPECT_THAT(msg, AllOf(HasSubstr("k=17"), HasSubstr("allowed 1 .. 16"), HasSubstr("search.k_max")));
  const Answer a = index_search(*idx_, good_, 0, 3, 16);
  if (g_rank == 0) test::expect_exact(kIp, corpus_, n, nullptr, good_, 3, kDim, 16, a, "k = k_max");
}

TEST_F(MpiIndexQueryErrors, BatchOutOfRange) {
  build(kIp);
  std::vector<float> many(static_cast<size_t>(kBatchMax + 1) * kDim, 1.0f);
  expect_rejected(many.data(), kBatchMax + 1, 3, {"batch of 9 queries", "allowed 1 .. 8", "search.batch_max"});
  expect_rejected(many.data(), 0, 3, {"batch of 0 queries"});
  expect_rejected(nullptr, 2, 3, {"no queries given"});
}

TEST_F(MpiIndexQueryErrors, NanOrInfInAQueryNamesTheQuery) {
  build(kIp);
  std::vector<float> q(4 * kDim, 1.0f);
  q[2 * kDim + 4] = std::numeric_limits<float>::quiet_NaN();
  expect_rejected(q.data(), 4, 3, {"query 2 of the batch", "non-finite", "nan", "column 4"});
  q[2 * kDim + 4] = 1.0f;
  q[3 * kDim + 0] = -std::numeric_limits<float>::infinity();
  expect_rejected(q.data(), 4, 3, {"query 3 of the batch", "-inf", "column 0"});
}

TEST_F(MpiIndexQueryErrors, ZeroNormQueryUnderCosine) {
  build(kCos);
  std::vector<float> q(3 * kDim, 1.0f);
  std::fill(q.begin() + kDim, q.begin() + 2 * kDim, 0.0f);
  expect_rejected(q.data(), 3, 3, {"query 1", "zero norm"});
}

TEST_F(MpiIndexQueryErrors, ManyRejectionsInARowThenGoodBatches) {
  build(kL2);
  std::vector<float> nan_q(kDim, std::numeric_limits<float>::quiet_NaN());
  for (int i = 0; i < 5; ++i) {
    const std::string msg = rejected(nan_q.data(), 1, 3);
    if (g_rank == 0) EXPECT_THAT(msg, HasSubstr("query 0"));
  }
  expect_next_good_batch_exact();
  expect_next_good_batch_exact();
}

// ------------------------------------------------------------------------------ library object + follower loop

// The index built from parts already in memory (no file): the caller's engine and communicator.
// Rank 0 drives searches (one rejected in between), asks every rank for its counters, then shuts
// the followers' loop down; follow() returns on every other rank. Answers: exact ids on small
// integers, equal to the float64 oracle whatever the number of ranks.
TEST(MpiIndexLibrary, BuiltFromPartsWithAFollowerLoop) {
  constexpr std::int64_t kN = 37, kDim = 5, kQ = 9;
  const std::vector<float> corpus = test::small_ints(kN * kDim, 91, -2, 2);
  const std::vector<float> queries = test::small_ints(kQ * kDim, 92, -2, 2);
  Config cfg;
  cfg.corpus.path = "(in memory)";
  cfg.search.k_max = 16;
  cfg.search.batch_max = 4;
  cfg.comm.timeout_s = 60;
  const RowRange rows = shard_rows(kN, g_world, g_rank);
  std::vector<std::int64_t> ids = test::iota_ids(rows.size(), rows.lo);
  auto engine = make_cpu_engine(ShardInput{corpus.data() + rows.lo * kDim, rows.size(), kDim, ids.data()}, Metric::kL2,
                                Dtype::kFloat32, index_engine_limits(cfg.search), EngineOptions{1});
  std::unique_ptr<ShardedIndex> holder = IndexAccess::from_parts(
      cfg, Metric::kL2, kN, rows, make_host_space(), std::move(engine), make_mpi_communicator(cfg.comm.timeout_s));
  ShardedIndex& idx = *holder;
  if (g_rank != 0) {
    idx.follow();  // returns when rank 0 shuts down
    EXPECT_EQ(IndexAccess::searches(idx), 3);
    return;
  }
  Answer got;
  const int ks[3] = {7, 7, 7};
  int q0 = 0;
  for (int step = 0; step < 3; ++step) {
    const int b = step == 2 ? 1 : 4;
    Answer a;
    a.ids.assign(static_cast<size_t>(b) * ks[step], -1);
    a.scores.assign(a.ids.size(), NAN);
    idx.search(queries.data() + q0 * kDim, b, ks[step], a.ids.data(), a.scores.data());
    got.ids.insert(got.ids.end(), a.ids.begin(), a.ids.end());
    got.scores.insert(got.scores.end(), a.scores.begin(), a.scores.end());
    q0 += b;
    if (step == 0) {
      // a rejected batch between searches: rank 0 throws, the followers skip it
      EXPECT_THROW(idx.search(queries.data(), 1, 0, a.ids.data(), a.scores.data()), Error);
    }
  }
  const std::vector<float> used(queries.begin(), queries.begin() + q0 * kDim);
  test::expect_exact(Metric::kL2, corpus, kN, nullptr, used, q0, kDim, 7, got, "built from parts");
  const std::vector<RankStats> st = idx.rank_stats();
  ASSERT_EQ(static_cast<int>(st.size()), g_world);
  for (int r = 0; r < g_world; ++r) EXPECT_EQ(st[r].searches, 3) << "rank " << r;
  idx.shutdown();
  EXPECT_THROW(idx.search(queries.data(), 1, 3, got.ids.data(), got.scores.data()), Error) << "after shutdown";
}

}  // namespace
}  // namespace shardtopk

// ------------------------------------------------------------------------------ main

int main(int argc, char** argv) {
  shardtopk::MpiSession mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  using shardtopk::g_dir;
  using shardtopk::g_rank;
  using shardtopk::g_world;
  g_rank = mpi.rank();
  g_world = mpi.world_size();
  // SHARDTOPK_TEST_ENGINE=cuda (the GPU registrations in CTest): one GPU per rank on this node.
  const char* eng = std::getenv("SHARDTOPK_TEST_ENGINE");
  if (eng && std::string(eng) == "cuda" &&
      !shardtopk::test::gpus_for_every_rank(g_rank, shardtopk::cuda_device_count(), "the index suite"))
    return 0;
  shardtopk::test::quiet_followers(g_rank);
  // Per-run fixture folder, named by rank 0 and broadcast.
  char buf[4096] = {0};
  if (g_rank == 0) {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/shardtopk-mpi-XXXXXX";
    std::snprintf(buf, sizeof buf, "%s", tmpl.c_str());
    if (!mkdtemp(buf)) {
      std::fprintf(stderr, "mkdtemp failed\n");
      buf[0] = '\0';
    }
  }
  MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (buf[0] == '\0') MPI_Abort(MPI_COMM_WORLD, 1);
  g_dir = buf;
  if (g_rank == 0) std::printf("MPI ranks: %d, fixtures in %s\n", g_world, g_dir.c_str());

  const int worst = shardtopk::test::run_all_tests_on_every_rank(g_rank);
  if (g_rank == 0) {
    std::error_code ec;
    std::filesystem::remove_all(g_dir, ec);
  }
  return worst;
}
