// Updates of a ShardedIndex under MPI (one binary, registered in CTest for P = 1, 2, 4): every
// test is collective; rank 0 keeps a model of the live rows and checks every answer against it.
//
// Checks: after each step of mixed upserts, replacements, deletes (by id and by filter) and
// re-inserts, the answer is the float64 oracle's over exactly the live rows (small integers:
// exact ids and scores, ties across old and new rows broken by the id; DESIGN.md invariants 4,
// 9, 10), a batch equals its queries searched alone (3), and with float data the answer equals,
// bit for bit, one engine of the same kind over the live rows (so it is the same for 1, 2 and 4
// ranks; SHARDTOPK_TEST_ENGINE=cuda puts the index and that engine on GPUs);
// deleting everything gives padding only; duplicates and bad input are refused naming the
// value and change nothing; capacity exhausted is refused and frees up after deletes; a
// read-only index refuses writes; a restart (base + log with a torn tail, then snapshot + log)
// answers as before.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shardtopk/communicator.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/ingest.hpp"
#include "tools/oracle.hpp"
#include "mpi_gtest.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

int g_rank = 0, g_world = 1;

/// SHARDTOPK_TEST_ENGINE=cuda: the index's ranks (and the one-engine reference) use the CUDA engine.
bool cuda_engine() {
  const char* eng = std::getenv("SHARDTOPK_TEST_ENGINE");
  return eng && std::string(eng) == "cuda";
}

std::unique_ptr<Engine> reference_engine(const ShardInput& in, Metric metric, const EngineLimits& limits) {
  EngineOptions opt;
  opt.threads = 1;
  return cuda_engine() ? make_cuda_engine(in, metric, Dtype::kFloat32, limits, opt)
                       : make_cpu_engine(in, metric, Dtype::kFloat32, limits, opt);
}
std::string g_dir;

constexpr std::int64_t kN = 30, kDim = 6;
constexpr int kK = 7, kQueries = 6;

std::string test_stem() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  for (char& ch : name)
    if (ch == '/') ch = '_';
  return g_dir + "/" + name;
}

void on_root(const std::function<void()>& f) {
  if (g_rank == 0) {
    try {
      f();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank 0 set-up failed: " << e.what();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/// A live row of the model.
struct Row {
  std::vector<float> v;
  std::int64_t tenant = 0;
};

class Updates : public ::testing::TestWithParam<Metric> {
 protected:
  /// Writes the corpus (ids 100 + 3·((7·i) mod N): not in row order) and returns the config.
  Config make_config(bool small_ints, long long capacity_rows = 0, bool writable = true) {
    const std::string stem = test_stem();
    const std::string path = stem + ".h5";
    base_ = small_ints ? test::small_ints(kN * kDim, 21) : test::random_floats(kN * kDim, 21);
    std::vector<std::int64_t> ids(kN), tenant(kN);
    for (std::int64_t i = 0; i < kN; ++i) {
      ids[i] = 100 + 3 * ((7 * i) % kN);
      tenant[i] = i % 3;
      model_[ids[i]] = Row{std::vector<float>(base_.begin() + i * kDim, base_.begin() + (i + 1) * kDim), tenant[i]};
    }
    on_root([&] {
      H5Writer w(path);
      w.write_f32("train", base_.data(), kN, kDim);
      w.write_i64("ids", ids.data(), kN, 0);
      w.write_i64("meta/tenant", tenant.data(), kN, 0);
    });
    Config c;
    c.source = "test";
    c.corpus.path = path;
    c.corpus.ids_dataset = "ids";
    c.corpus.attributes = {"meta/tenant"};
    c.search.metric = GetParam();
    c.search.k_max = 16;
    c.search.batch_max = 8;
    c.engine.backend = cuda_engine() ? EngineBackend::kCuda : EngineBackend::kCpu;
    c.engine.threads = 1;
    c.comm.backend = cuda_engine() ? CommBackend::kAuto : CommBackend::kMpi;
    c.comm.timeout_s = 60;
    if (writable) c.storage.dir = stem + ".store";
    c.storage.capacity_rows = capacity_rows;
    queries_ = small_ints ? test::small_ints(kQueries * kDim, 22) : test::random_floats(kQueries * kDim, 22);
    return c;
  }

  /// Collective upsert; rank 0's rows from (ids, vectors, tenants), which also go to the model.
  WriteResult upsert(ShardedIndex& idx, const std::vector<std::int64_t>& ids, const std::vector<float>& v,
                     const std::vector<std::int64_t>& tenants) {
    UpsertRows r;
    r.rows = static_cast<std::int64_t>(ids.size());
    r.ids = ids.data();
    r.vectors = v.data();
    r.attributes.push_back(AttributeColumnView{"tenant", AttributeType::kInt64, tenants.data()});
    const WriteResult res = idx.upsert(r);
    for (std::size_t i = 0; i < ids.size(); ++i)
      model_[ids[i]] = Row{std::vector<float>(v.begin() + i * kDim, v.begin() + (i + 1) * kDim), tenants[i]};
    return res;
  }
  WriteResult remove(ShardedIndex& idx, const std::vector<std::int64_t>& ids) {
    const WriteResult res = idx.remove(ids.data(), static_cast<std::int64_t>(ids.size()));
    for (auto id : ids) model_.erase(id);
    return res;
  }

  /// The index's answer for queries [q0, q0 + batch).
  test::Answer search(ShardedIndex& idx, int q0, int batch, const FilterProgram* filter = nullptr) {
    test::Answer a;
    a.ids.assign(static_cast<std::size_t>(batch) * kK, -1);
    a.scores.assign(a.ids.size(), NAN);
    std::vector<const FilterProgram*> f(static_cast<std::size_t>(batch), filter);
    idx.search(g_rank == 0 ? queries_.data() + q0 * kDim : nullptr, batch, kK, g_rank == 0 ? a.ids.data() : nullptr,
               g_rank == 0 ? a.scores.data() : nullptr, filter ? f.data() : nullptr);
    return a;
  }

  /// One engine (reference_engine) over the model's live rows (passing `tenant` when >= 0), searched alone.
  test::Answer reference(std::int64_t tenant) {
    std::vector<float> rows;
    std::vector<std::int64_t> ids;
    for (const auto& [id, row] : model_) {
      if (tenant >= 0 && row.tenant != tenant) continue;
      ids.push_back(id);
      rows.insert(rows.end(), row.v.begin(), row.v.end());
    }
    const auto n = static_cast<std::int64_t>(ids.size());
    if (GetParam() == Metric::kCosine && n > 0) normalize_rows(rows.data(), n, kDim, 0, "row");
    const ShardInput in{rows.data(), n, kDim, ids.data()};
    auto e = reference_engine(in, GetParam(), EngineLimits{kQueries, kK});
    return test::run_engine(*e, queries_, kQueries, kK, kQueries);
  }

  /// Every query's answer equals, bit for bit, one engine over the model's live rows (passing
  /// `tenant` when >= 0) and each query searched alone; for inner product and l2 (small
  /// integers: exact arithmetic) also the float64 oracle's ids and scores.
  void expect_oracle(ShardedIndex& idx, const std::string& step, std::int64_t tenant = -1,
                     const FilterProgram* filter = nullptr) {
    const test::Answer batch = search(idx, 0, kQueries, filter);
    std::vector<test::Answer> alone;
    for (int q = 0; q < kQueries; ++q) alone.push_back(search(idx, q, 1, filter));
    if (g_rank != 0) return;
    test::expect_bit_identical(batch, reference(tenant), step + ": index vs one engine over the live rows");
    std::vector<float> rows;
    std::vector<std::int64_t> ids;
    for (const auto& [id, row] : model_) {
      if (tenant >= 0 && row.tenant != tenant) continue;
      ids.push_back(id);
      rows.insert(rows.end(), row.v.begin(), row.v.end());
    }
    const Metric m = GetParam();
    const bool exact = m != Metric::kCosine;  // cosine divides: not exact in float32
    for (int q = 0; q < kQueries; ++q) {
      std::vector<std::int64_t> want_ids;
      std::vector<double> want_scores;
      const int kk = static_cast<int>(std::min<std::int64_t>(kK, static_cast<std::int64_t>(ids.size())));
      if (kk > 0)
        oracle::topk(m, rows.data(), static_cast<std::int64_t>(ids.size()), ids.data(), queries_.data() + q * kDim, 1,
                     kDim, kk, &want_ids, &want_scores);
      for (int j = 0; j < kK; ++j) {
        SCOPED_TRACE(step + ": query " + std::to_string(q) + " position " + std::to_string(j));
        const std::size_t at = static_cast<std::size_t>(q) * kK + j;
        EXPECT_EQ(batch.ids[at], alone[q].ids[j]);
        EXPECT_EQ(batch.scores[at], alone[q].scores[j]);
        if (j < kk) {
          if (!exact) continue;
          EXPECT_EQ(batch.ids[at], want_ids[j]);
          EXPECT_EQ(static_cast<double>(batch.scores[at]), want_scores[j]);
        } else {
          EXPECT_EQ(batch.ids[at], kPadId);
        }
      }
    }
  }

  /// Rank 0: the error of f is a WriteError of `kind` naming `what`; other ranks: an Error
  /// (lock step). Returns normally either way.
  void expect_refused(const std::function<void()>& f, WriteError::Kind kind, const std::string& what) {
    if (g_rank == 0) {
      try {
        f();
        ADD_FAILURE() << "no error; expected one naming " << what;
      } catch (const WriteError& e) {
        EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
        EXPECT_THAT(e.what(), HasSubstr(what));
      }
    } else {
      EXPECT_THROW(f(), Error);
    }
  }

  std::vector<float> base_, queries_;
  std::map<std::int64_t, Row> model_;  // live rows by id
};

TEST_P(Updates, MixedUpsertsAndDeletesMatchTheOracleOverTheLiveRows) {
  const Config cfg = make_config(/*small_ints=*/true);
  auto idx = load_index(cfg, false);
  ASSERT_TRUE(idx->info().writable);
  expect_oracle(*idx, "as loaded");

  // New rows: every other one a copy of a base row (ties across old and new rows), ids below
  // and above the base ids.
  std::vector<std::int64_t> ids, tenants;
  std::vector<float> v = test::small_ints(12 * kDim, 23);
  for (int i = 0; i < 12; ++i) {
    ids.push_back(i % 2 ? 10 + i : 1000 + i);
    tenants.push_back(i % 3);
    if (i % 2 == 0) std::copy(base_.begin() + i * kDim, base_.begin() + (i + 1) * kDim, v.begin() + i * kDim);
  }
  const WriteResult w1 = upsert(*idx, ids, v, tenants);
  if (g_rank == 0) EXPECT_EQ(w1.rows, 12);
  expect_oracle(*idx, "12 inserted");

  // Replacements: base ids and new ids get new vectors and tenants (delete + insert).
  const std::vector<std::int64_t> repl{100, 103, 11, 1000};
  upsert(*idx, repl, test::small_ints(4 * kDim, 24), {2, 2, 0, 1});
  expect_oracle(*idx, "4 replaced");

  // Deletes, one id unknown: it is not counted.
  const WriteResult d = remove(*idx, {106, 109, 13, 1002, 424242});
  if (g_rank == 0) {
    EXPECT_EQ(d.rows, 4);
    EXPECT_GT(d.seq, w1.seq);
  }
  expect_oracle(*idx, "4 deleted");

  // A deleted id comes back; a filter on the attribute sees the written values.
  upsert(*idx, {106}, test::small_ints(kDim, 25), {1});
  expect_oracle(*idx, "re-inserted");
  const FilterProgram t1 = parse_filter(R"({"eq": {"tenant": 1}})", idx->info().schema);
  expect_oracle(*idx, "filter tenant = 1", 1, &t1);

  // Delete by filter: every live row of tenant 2.
  const FilterProgram t2 = parse_filter(R"({"eq": {"tenant": 2}})", idx->info().schema);
  std::int64_t tenant2 = 0;
  for (const auto& [id, row] : model_) tenant2 += row.tenant == 2 ? 1 : 0;
  const WriteResult df = idx->remove_matching(t2);
  for (auto it = model_.begin(); it != model_.end();) it = it->second.tenant == 2 ? model_.erase(it) : std::next(it);
  if (g_rank == 0) EXPECT_EQ(df.rows, tenant2);
  expect_oracle(*idx, "tenant 2 deleted by filter");

  if (g_rank == 0) {
    const UpdateStats st = idx->update_stats();
    EXPECT_EQ(st.live_rows, static_cast<std::int64_t>(model_.size()));
    EXPECT_EQ(st.applied_seq, df.seq);
    EXPECT_GT(st.tombstones, 0);
  }

  // Everything deleted: padding only, and counts of 0.
  std::vector<std::int64_t> all;
  for (const auto& [id, row] : model_) all.push_back(id);
  {
    std::int64_t n = static_cast<std::int64_t>(all.size());
    MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    all.resize(static_cast<std::size_t>(n));
    MPI_Bcast(all.data(), static_cast<int>(n), MPI_INT64_T, 0, MPI_COMM_WORLD);
  }
  remove(*idx, all);
  expect_oracle(*idx, "everything deleted");
  std::vector<std::int64_t> ids_out(kK);
  std::vector<float> sc(kK);
  std::int32_t count = -1;
  idx->search(g_rank == 0 ? queries_.data() : nullptr, 1, kK, ids_out.data(), sc.data(), nullptr, &count);
  if (g_rank == 0) EXPECT_EQ(count, 0);
  // ... and rows come back.
  upsert(*idx, {5, 6}, test::small_ints(2 * kDim, 26), {0, 1});
  expect_oracle(*idx, "two rows after deleting everything");
}

TEST_P(Updates, FloatAnswersEqualOneEngineOverTheLiveRowsBitForBit) {
  const Config cfg = make_config(/*small_ints=*/false);
  auto idx = load_index(cfg, false);
  std::vector<std::int64_t> ids, tenants;
  for (int i = 0; i < 20; ++i) {
    ids.push_back(i % 4 == 0 ? 100 + 3 * i : 2000 + i);  // some replace base rows
    tenants.push_back(i % 3);
  }
  upsert(*idx, ids, test::random_floats(20 * kDim, 27), tenants);
  remove(*idx, {103, 2001, 2005, 142});
  const test::Answer got = search(*idx, 0, kQueries);
  if (g_rank != 0) return;
  std::vector<float> rows;
  std::vector<std::int64_t> live;
  for (const auto& [id, row] : model_) {
    live.push_back(id);
    rows.insert(rows.end(), row.v.begin(), row.v.end());
  }
  if (GetParam() == Metric::kCosine) normalize_rows(rows.data(), static_cast<std::int64_t>(live.size()), kDim, 0, "row");
  const ShardInput in{rows.data(), static_cast<std::int64_t>(live.size()), kDim, live.data()};
  auto e = reference_engine(in, GetParam(), EngineLimits{kQueries, kK});
  const test::Answer want = test::run_engine(*e, queries_, kQueries, kK, kQueries);
  test::expect_bit_identical(got, want, "index after updates vs one engine over the live rows");
}

TEST_P(Updates, DuplicatesAndBadInputAreRefusedAndChangeNothing) {
  const Config cfg = make_config(/*small_ints=*/true);
  auto idx = load_index(cfg, false);
  const std::vector<float> v2 = test::small_ints(2 * kDim, 28);
  auto try_upsert = [&](std::vector<std::int64_t> ids, std::vector<float> v, std::vector<AttributeColumnView> attrs) {
    UpsertRows r;
    r.rows = static_cast<std::int64_t>(ids.size());
    r.ids = ids.data();
    r.vectors = v.data();
    r.attributes = attrs;
    idx->upsert(r);
  };
  const std::vector<std::int64_t> t2{1, 2};
  const std::vector<double> d2{1.0, 2.0};
  const AttributeColumnView tenant{"tenant", AttributeType::kInt64, t2.data()};
  expect_refused([&] { try_upsert({7, 7}, v2, {tenant}); }, WriteError::Kind::kInvalid, "id 7 appears more than once");
  expect_refused([&] { try_upsert({7, 8}, v2, {}); }, WriteError::Kind::kInvalid, "attribute 'tenant' is missing");
  expect_refused([&] { try_upsert({7, 8}, v2, {tenant, {"colour", AttributeType::kInt64, t2.data()}}); },
                 WriteError::Kind::kInvalid, "unknown attribute 'colour'");
  expect_refused([&] { try_upsert({7, 8}, v2, {{"tenant", AttributeType::kFloat64, d2.data()}}); },
                 WriteError::Kind::kInvalid, "attribute 'tenant' is int64 in the corpus");
  std::vector<float> bad = v2;
  bad[kDim + 2] = NAN;
  expect_refused([&] { try_upsert({7, 8}, bad, {tenant}); }, WriteError::Kind::kInvalid,
                 "row id 8 has a non-finite value");
  expect_refused([&] { try_upsert({}, {}, {tenant}); }, WriteError::Kind::kInvalid, "at least one row");
  const std::vector<std::int64_t> dup{100, 103, 100};
  expect_refused([&] { idx->remove(dup.data(), 3); }, WriteError::Kind::kInvalid, "id 100 appears more than once");
  if (GetParam() == Metric::kCosine) {
    std::vector<float> zero = v2;
    std::fill(zero.begin(), zero.begin() + kDim, 0.0f);
    expect_refused([&] { try_upsert({7, 8}, zero, {tenant}); }, WriteError::Kind::kInvalid, "row id 7 has zero norm");
  }
  if (g_rank == 0) EXPECT_EQ(idx->update_stats().applied_seq, 0u);  // nothing was logged
  expect_oracle(*idx, "after refused writes");
}

TEST_P(Updates, CapacityExhaustedIsRefusedUntilDeletesFreeSlots) {
  // Every rank holds ceil(N / P) rows at most; 3 more slots each.
  const long long cap = (kN + g_world - 1) / g_world + 3;
  const Config cfg = make_config(/*small_ints=*/true, cap);
  auto idx = load_index(cfg, false);
  std::int64_t free = 0;
  if (g_rank == 0) {
    const UpdateStats st = idx->update_stats();
    EXPECT_EQ(st.capacity_rows, cap * g_world);
    free = st.capacity_rows - st.live_rows;
  }
  MPI_Bcast(&free, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  std::vector<std::int64_t> ids, tenants;
  for (std::int64_t i = 0; i < free; ++i) {
    ids.push_back(5000 + i);
    tenants.push_back(0);
  }
  upsert(*idx, ids, test::small_ints(free * kDim, 29), tenants);
  expect_oracle(*idx, "full");
  expect_refused(
      [&] {
        const std::vector<std::int64_t> one{9999}, t{0};
        const std::vector<float> v = test::small_ints(kDim, 30);
        UpsertRows r;
        r.rows = 1;
        r.ids = one.data();
        r.vectors = v.data();
        r.attributes.push_back(AttributeColumnView{"tenant", AttributeType::kInt64, t.data()});
        idx->upsert(r);
      },
      WriteError::Kind::kCapacity, "capacity exhausted");
  // Replacing live ids needs no new slot; a delete frees one.
  upsert(*idx, {5000, 100}, test::small_ints(2 * kDim, 31), {1, 1});
  remove(*idx, {103});
  upsert(*idx, {9999}, test::small_ints(kDim, 32), {2});
  expect_oracle(*idx, "after a delete freed a slot");
}

// A batch is admitted once, against the corpus's norm bound as it then is. A write that raises
// the bound before the batch is searched makes the index check that batch's norms again (with
// admission's wording): rank 0 refuses it, lock-step followers throw with it, and the index
// keeps serving.
TEST_P(Updates, ABatchAdmittedBeforeAWriteRaisedTheNormBoundIsCheckedAgain) {
  if (GetParam() == Metric::kCosine) GTEST_SKIP() << "cosine scores are bounded by 1 whatever the norms";
  const Config cfg = make_config(/*small_ints=*/true);
  auto idx = load_index(cfg, false);
  // inner product: |q| · max|x|; l2: (|q| + max|x|)^2; both within B = FLT_MAX/2 against the
  // small-integer rows, beyond it once a row of norm 6e18 is live.
  std::vector<float> q(kDim, 0.0f);
  q[0] = GetParam() == Metric::kL2 ? 1e19f : 1e20f;
  SearchBatch admitted;
  if (g_rank == 0) admitted = idx->admit(q.data(), 1, kK);
  std::vector<float> big(kDim, 0.0f);
  big[1] = 6e18f;
  upsert(*idx, {777}, big, {0});
  std::vector<std::int64_t> ids(kK);
  std::vector<float> scores(kK);
  std::string msg = "<no exception>";
  try {
    idx->search(admitted, ids.data(), scores.data());
  } catch (const Error& e) {
    msg = e.what();
  }
  if (g_rank == 0)
    EXPECT_THAT(msg, AllOf(HasSubstr("query 0 of the batch has norm"), HasSubstr("Score range"))) << msg;
  else
    EXPECT_THAT(msg, HasSubstr("rank 0 rejected the batch")) << msg;
  remove(*idx, {777});
  expect_oracle(*idx, "after a refused batch");
}

TEST_P(Updates, ReadOnlyIndexRefusesWritesAndStillSearches) {
  const Config cfg = make_config(/*small_ints=*/true, 0, /*writable=*/false);
  auto idx = load_index(cfg, false);
  EXPECT_FALSE(idx->info().writable);
  expect_refused([&] { idx->remove(model_.begin() == model_.end() ? nullptr : &model_.begin()->first, 1); },
                 WriteError::Kind::kReadOnly, "storage.dir is not set");
  expect_refused([&] { idx->snapshot(); }, WriteError::Kind::kReadOnly, "read-only");
  expect_oracle(*idx, "read-only");
}

TEST_P(Updates, RestartFromBaseAndLogThenFromSnapshotAndLogAnswersAsBefore) {
  const Config cfg = make_config(/*small_ints=*/true);
  std::vector<std::int64_t> ids, tenants;
  for (int i = 0; i < 10; ++i) {
    ids.push_back(i % 3 == 0 ? 100 + 3 * i : 3000 + i);
    tenants.push_back(i % 3);
  }
  test::Answer before;
  std::uint64_t seq = 0;
  {
    auto idx = load_index(cfg, false);
    upsert(*idx, ids, test::small_ints(10 * kDim, 33), tenants);
    remove(*idx, {3001, 109, 112});
    upsert(*idx, {3001}, test::small_ints(kDim, 34), {1});
    before = search(*idx, 0, kQueries);
    if (g_rank == 0) seq = idx->update_stats().applied_seq;
  }
  // A torn tail, as a crash in the middle of a write leaves one: recovery cuts it.
  on_root([&] {
    std::string last;
    for (const auto& e : std::filesystem::directory_iterator(cfg.storage.dir))
      if (e.path().filename().string().rfind("wal-", 0) == 0 && e.path().string() > last) last = e.path().string();
    ASSERT_FALSE(last.empty());
    std::ofstream out(last, std::ios::app | std::ios::binary);
    const std::string junk(100, '\x5a');
    out.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  });
  {
    auto idx = load_index(cfg, false);  // the corpus, then the log
    test::expect_bit_identical(search(*idx, 0, kQueries), before, "restart from base + log");
    expect_oracle(*idx, "restart from base + log");
    if (g_rank == 0) EXPECT_EQ(idx->update_stats().applied_seq, seq);
    const SnapshotResult snap = idx->snapshot();
    if (g_rank == 0) {
      EXPECT_EQ(snap.seq, seq);
      EXPECT_EQ(snap.rows, static_cast<std::int64_t>(model_.size()));
      EXPECT_TRUE(std::filesystem::exists(snap.path)) << snap.path;
      EXPECT_EQ(idx->update_stats().log_records, 0);
    }
    remove(*idx, {3004});
    upsert(*idx, {4000, 100}, test::small_ints(2 * kDim, 35), {0, 2});
    before = search(*idx, 0, kQueries);
  }
  {
    auto idx = load_index(cfg, false);  // the snapshot, then the log after it
    test::expect_bit_identical(search(*idx, 0, kQueries), before, "restart from snapshot + log");
    expect_oracle(*idx, "restart from snapshot + log");
    if (g_rank == 0) {
      const UpdateStats st = idx->update_stats();
      EXPECT_EQ(st.snapshot_seq, seq);
      EXPECT_EQ(st.log_records, 2);
    }
    const FilterProgram t0 = parse_filter(R"({"eq": {"tenant": 0}})", idx->info().schema);
    expect_oracle(*idx, "attributes from the snapshot", 0, &t0);
  }
  // The snapshot's rows were stored for this metric: another configured metric is refused (it
  // would score them wrongly), on every rank, and the directory still opens with the right one.
  Config other = cfg;
  other.search.metric = GetParam() == Metric::kL2 ? Metric::kInnerProduct : Metric::kL2;
  try {
    (void)load_index(other, false);
    ADD_FAILURE() << "a snapshot written for " << to_string(GetParam()) << " opened as " << to_string(*other.search.metric);
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("holds a snapshot written for metric " + to_string(GetParam())));
  }
  auto idx = load_index(cfg, false);
  test::expect_bit_identical(search(*idx, 0, kQueries), before, "reopened with its own metric");
}

// A snapshot written while writes go on (what the service does: start_snapshot, then one
// snapshot_step between batches) holds exactly the state at its seq: rows replaced, deleted, or
// whose slots were reused by later inserts before their block was sent are in the file as they
// were, whether their rank had sent none, some or all of its blocks. The writes after its seq stay in the log, and a restart (snapshot + log) answers as before.
TEST_P(Updates, ASnapshotWrittenWhileWritesGoOnHoldsTheStateAtItsSeq) {
  Config cfg = make_config(/*small_ints=*/true);
  cfg.testing.snapshot_block_rows = 4;  // several blocks per rank: writes land in partly sent ranks
  std::map<std::int64_t, Row> at_view;
  std::uint64_t view_seq = 0;
  test::Answer before;
  std::string path;
  {
    auto idx = load_index(cfg, false);
    if (g_rank != 0) {
      idx->follow();  // rank 0 drives: writes, snapshot steps, searches
    } else {
      std::vector<std::int64_t> ids, tenants;
      for (int i = 0; i < 12; ++i) {
        ids.push_back(5000 + i);
        tenants.push_back(i % 3);
      }
      upsert(*idx, ids, test::small_ints(12 * kDim, 40), tenants);
      at_view = model_;
      view_seq = idx->update_stats().applied_seq;
      ASSERT_FALSE(idx->start_snapshot().has_value()) << "something is new: the snapshot starts";
      EXPECT_TRUE(idx->snapshot_running());
      // Before the first block: replace rows, delete rows, and reuse the freed slots.
      upsert(*idx, {100, 5003}, test::small_ints(2 * kDim, 41), {2, 2});
      remove(*idx, {103, 5001, 5002, 121});
      upsert(*idx, {7000, 7001, 7002}, test::small_ints(3 * kDim, 42), {1, 1, 1});
      SnapshotProgress p;
      int steps = 0;
      for (;;) {
        p = idx->snapshot_step();
        ++steps;
        if (!p.running) break;
        // Between blocks (one block per rank here): more of the same.
        const std::int64_t id = 7100 + steps;
        if (steps % 2 == 1) upsert(*idx, {id, 106 + 3 * (steps % 5)}, test::small_ints(2 * kDim, 43 + steps), {0, 1});
        else remove(*idx, {5004 + steps % 8});
        if (!p.progressed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ASSERT_LT(steps, 100000) << "the snapshot never ends";
      }
      ASSERT_TRUE(p.failed.empty()) << p.failed;
      ASSERT_TRUE(p.done.has_value());
      EXPECT_FALSE(idx->snapshot_running());
      EXPECT_EQ(p.done->seq, view_seq);
      EXPECT_EQ(p.done->rows, static_cast<std::int64_t>(at_view.size()));
      path = p.done->path;
      const UpdateStats st = idx->update_stats();
      EXPECT_EQ(st.snapshot_seq, view_seq);
      EXPECT_GT(st.log_records, 0) << "the writes after the view stay in the log";
      before = search(*idx, 0, kQueries);
      idx->shutdown();
    }
  }
  if (g_rank == 0) {
    // The file holds the rows at the view, bit for bit (cosine: as the engines hold them).
    const std::vector<std::int64_t> ids = read_int64_vector(path, "ids");
    const HostMatrix rows = read_matrix(path, "train");
    const std::vector<std::int64_t> tenant = read_int64_vector(path, "attributes/tenant");
    ASSERT_EQ(ids.size(), at_view.size());
    ASSERT_EQ(rows.rows, static_cast<std::int64_t>(ids.size()));
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto it = at_view.find(ids[i]);
      ASSERT_NE(it, at_view.end()) << "id " << ids[i] << " was not live at seq " << view_seq;
      std::vector<float> want = it->second.v;
      if (GetParam() == Metric::kCosine) normalize_rows(want.data(), 1, kDim, 0, "row");
      for (std::int64_t d = 0; d < kDim; ++d)
        EXPECT_EQ(rows.data[i * kDim + d], want[static_cast<std::size_t>(d)]) << "id " << ids[i] << " column " << d;
      EXPECT_EQ(tenant[i], it->second.tenant) << "id " << ids[i];
      at_view.erase(it);
    }
  }
  auto idx = load_index(cfg, false);  // the snapshot, then the log after it
  const test::Answer after = search(*idx, 0, kQueries);
  if (g_rank == 0) test::expect_bit_identical(after, before, "restart from the snapshot + the log after it");
  expect_oracle(*idx, "restart from a snapshot written while writes went on");
}

TEST_P(Updates, SnapshotPolicyTakesSnapshotsOnceTheLogExceedsItsLimit) {
  Config cfg = make_config(/*small_ints=*/true);
  cfg.storage.snapshot_log_bytes = 1500;
  int taken = 0;
  std::uint64_t last_snapshot_seq = 0;
  test::Answer before;
  {
    auto idx = load_index(cfg, false);
    for (int i = 0; i < 60; ++i) {
      // single-row upserts (new ids and replacements of corpus ids), a delete now and then
      const std::int64_t id = i % 4 == 0 ? 100 + 3 * (i % kN) : 5000 + i;
      upsert(*idx, {id}, test::small_ints(kDim, 40 + i), {i % 3});
      if (i % 7 == 6) remove(*idx, {5000 + i - 1});
      std::int64_t log_before = 0;
      if (g_rank == 0) log_before = idx->update_stats().log_bytes;
      const std::optional<SnapshotResult> snap = idx->snapshot_if_log_exceeds();
      if (g_rank != 0) continue;
      const UpdateStats st = idx->update_stats();
      if (snap) {
        ++taken;
        EXPECT_GT(log_before, cfg.storage.snapshot_log_bytes) << "write " << i;
        EXPECT_EQ(snap->seq, st.applied_seq);
        EXPECT_EQ(st.snapshot_seq, snap->seq);
        EXPECT_EQ(st.log_records, 0);
        EXPECT_LE(st.log_bytes, cfg.storage.snapshot_log_bytes);
        EXPECT_EQ(snap->rows, static_cast<std::int64_t>(model_.size()));
        last_snapshot_seq = snap->seq;
      } else {
        EXPECT_LE(log_before, cfg.storage.snapshot_log_bytes) << "write " << i << ": no snapshot past the limit";
        EXPECT_EQ(st.snapshot_seq, last_snapshot_seq);
      }
    }
    expect_oracle(*idx, "after writes and automatic snapshots");
    before = search(*idx, 0, kQueries);
  }
  if (g_rank == 0) EXPECT_GE(taken, 2) << "60 records of " << kDim << " floats pass 1500 bytes more than once";
  {
    auto idx = load_index(cfg, false);  // the last snapshot, then the log after it
    test::expect_bit_identical(search(*idx, 0, kQueries), before, "restart after automatic snapshots");
    expect_oracle(*idx, "restart after automatic snapshots");
    if (g_rank == 0) EXPECT_EQ(idx->update_stats().snapshot_seq, last_snapshot_seq);
  }
}

TEST_P(Updates, SnapshotPolicyOffTakesNone) {
  const Config cfg = make_config(/*small_ints=*/true);  // storage.snapshot_log_bytes = 0
  auto idx = load_index(cfg, false);
  for (int i = 0; i < 5; ++i) {
    upsert(*idx, {6000 + i}, test::small_ints(kDim, 50 + i), {0});
    EXPECT_FALSE(idx->snapshot_if_log_exceeds().has_value());  // no step on any rank
  }
  if (g_rank == 0) EXPECT_EQ(idx->update_stats().snapshot_seq, 0u);
  expect_oracle(*idx, "policy off");
}

// storage.snapshot_interval_s: after a write, a snapshot once the current one (or, without one,
// the start) is older than the interval; none while the interval has not passed.
TEST_P(Updates, SnapshotPolicyByAgeTakesOneOnceTheSnapshotIsOld) {
  Config cfg = make_config(/*small_ints=*/true);
  cfg.storage.snapshot_interval_s = 3600;
  {
    auto idx = load_index(cfg, false);
    upsert(*idx, {6100}, test::small_ints(kDim, 61), {0});
    EXPECT_FALSE(idx->snapshot_if_log_exceeds().has_value()) << "an hour has not passed";
  }
  cfg.storage.snapshot_interval_s = 1e-6;  // any age passes it
  auto idx = load_index(cfg, false);
  upsert(*idx, {6101}, test::small_ints(kDim, 62), {1});
  const std::optional<SnapshotResult> snap = idx->snapshot_if_log_exceeds();
  if (g_rank == 0) {
    ASSERT_TRUE(snap.has_value());
    const UpdateStats st = idx->update_stats();
    EXPECT_EQ(snap->seq, st.applied_seq);
    EXPECT_EQ(st.snapshot_seq, snap->seq);
    EXPECT_EQ(st.log_records, 0);
  }
  // Nothing written since: no second snapshot however old this one gets.
  EXPECT_FALSE(idx->snapshot_if_log_exceeds().has_value());
  expect_oracle(*idx, "after a snapshot by age");
}

// What the storage directory records about its base is checked at start-up, on every rank: the
// corpus file the log was written against (before any snapshot), the snapshot's size and
// checksum, and the snapshot's own seq against the manifest's.
TEST_P(Updates, ADamagedSnapshotOrAnotherBaseFileIsRefusedAtStartUp) {
  const Config cfg = make_config(/*small_ints=*/true);
  auto refused = [&](const Config& c, const std::string& what) {
    try {
      (void)load_index(c, false);
      ADD_FAILURE() << "opened; expected an error naming: " << what;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(what));  // every rank: rank 0's message
    }
  };
  {
    auto idx = load_index(cfg, false);
    upsert(*idx, {5000, 5001}, test::small_ints(2 * kDim, 60), {0, 1});
  }
  // Another corpus file under the configured path's name: the log's records were planned against the first.
  Config other = cfg;
  other.corpus.path = test_stem() + "-other.h5";
  on_root([&] {
    H5Writer w(other.corpus.path);
    const std::vector<float> rows = test::small_ints(kN * kDim, 99);
    std::vector<std::int64_t> ids(kN), tenant(kN, 0);
    for (std::int64_t i = 0; i < kN; ++i) ids[i] = 100 + 3 * ((7 * i) % kN);
    w.write_f32("train", rows.data(), kN, kDim);
    w.write_i64("ids", ids.data(), kN, 0);
    w.write_i64("meta/tenant", tenant.data(), kN, 0);
  });
  refused(other, "record(s) written against corpus '" + cfg.corpus.path + "'");
  test::Answer before;
  std::string snap, older, first;
  {
    auto idx = load_index(cfg, false);
    expect_oracle(*idx, "the right corpus after a refused one");
    snap = idx->snapshot().path;
    first = snap;
    on_root([&] { std::filesystem::copy_file(snap, test_stem() + "-older.h5"); });
    older = test_stem() + "-older.h5";
    std::vector<std::int64_t> more(100), tenants(100, 2);
    for (int i = 0; i < 100; ++i) more[i] = 7000 + i;
    upsert(*idx, more, test::small_ints(100 * kDim, 61), tenants);  // a larger file than the older snapshot
    snap = idx->snapshot().path;
    before = search(*idx, 0, kQueries);
  }
  // One changed bit in the snapshot's rows: found by its checksum before the log is replayed.
  // The superseded snapshot (as a crash between the commit and the clean-up leaves it) stays
  // while the current one is refused, and goes once a start-up verified the current one.
  on_root([&] {
    std::filesystem::copy_file(older, first);
    test::flip_bit(snap, std::filesystem::file_size(snap) / 2, 0);
  });
  refused(cfg, "is damaged: its CRC-32C is ");
  if (g_rank == 0)
    EXPECT_TRUE(std::filesystem::exists(first))
        << "a refused start-up removed the superseded snapshot";
  on_root([&] { test::flip_bit(snap, std::filesystem::file_size(snap) / 2, 0); });
  {
    auto idx = load_index(cfg, false);
    test::expect_bit_identical(search(*idx, 0, kQueries), before, "the repaired snapshot");
  }
  if (g_rank == 0)
    EXPECT_FALSE(std::filesystem::exists(first))
        << "the superseded snapshot outlived a verified start-up";
  // An older snapshot restored under the current one's name: its size differs from the
  // manifest's record; with that record gone (a manifest written before it), its own seq does.
  const std::string manifest = cfg.storage.dir + "/MANIFEST.json";
  on_root([&] { std::filesystem::copy_file(older, snap, std::filesystem::copy_options::overwrite_existing); });
  refused(cfg, "bytes, the manifest recorded");
  on_root([&] {
    std::istringstream in(test::read_text(manifest));
    std::string text;
    for (std::string line; std::getline(in, line);)
      if (line.find("snapshot_bytes") == std::string::npos && line.find("snapshot_crc32c") == std::string::npos)
        text += line + "\n";
    std::ofstream(manifest) << text;
  });
  refused(cfg, "holds seq ");
}

// Score range under updates (docs/EXACTNESS.md "Score range"): a row whose norm would leave
// queries of its own norm inadmissible is refused at upsert; a large admissible one lowers the
// admissible query norm only while it lives (deleting it restores the bound, also after a
// restart that replays the delete), and the refusal names the row by its id, also when the row
// comes from a snapshot.
TEST_P(Updates, AHugeRowIsRefusedAndTheBoundFollowsTheLiveRows) {
  const Config cfg = make_config(/*small_ints=*/true);
  const Metric m = GetParam();
  const std::vector<std::int64_t> t1{0};
  auto try_upsert = [&](ShardedIndex& idx, std::int64_t id, const std::vector<float>& v) {
    UpsertRows r;
    r.rows = 1;
    r.ids = &id;
    r.vectors = v.data();
    r.attributes.push_back(AttributeColumnView{"tenant", AttributeType::kInt64, t1.data()});
    idx.upsert(r);
  };
  // Whether a search for `q` is admitted; the refusal's text on rank 0.
  auto admitted = [&](ShardedIndex& idx, const std::vector<float>& q, std::string* why) {
    std::vector<std::int64_t> ids(kK);
    std::vector<float> scores(kK);
    try {
      idx.search(g_rank == 0 ? q.data() : nullptr, 1, kK, g_rank == 0 ? ids.data() : nullptr,
                 g_rank == 0 ? scores.data() : nullptr);
      return true;
    } catch (const Error& e) {
      if (why) *why = e.what();
      return false;
    }
  };
  const std::vector<float> huge(kDim, 3e38f);
  if (m == Metric::kCosine) {  // unit rows and queries: no bound, any finite row is taken
    auto idx = load_index(cfg, false);
    try_upsert(*idx, 9000, huge);
    model_[9000] = Row{huge, 0};
    expect_oracle(*idx, "cosine after a huge row");
    return;
  }
  // The largest admissible row (√B, or √B / 2 under l2, with B = FLT_MAX / 2 ≈ 1.70141e38) and
  // a probe query of norm 2^66 (2^63 under l2): admitted over the base rows, not with `big` live.
  std::vector<float> big(kDim, 0.0f), probe(kDim, 0.0f);
  big[0] = m == Metric::kL2 ? 6e18f : 1.2e19f;
  probe[0] = m == Metric::kL2 ? 0x1p63f : 0x1p66f;
  std::string why;
  {
    auto idx = load_index(cfg, false);
    ASSERT_TRUE(admitted(*idx, probe, nullptr));
    expect_refused([&] { try_upsert(*idx, 9000, huge); }, WriteError::Kind::kInvalid, "row id 9000 has norm");
    std::vector<float> over = big;
    over[0] *= 1.1f;
    expect_refused([&] { try_upsert(*idx, 9000, over); }, WriteError::Kind::kInvalid, "row id 9000 has norm");
    try_upsert(*idx, 9001, big);
    EXPECT_FALSE(admitted(*idx, probe, &why));
    if (g_rank == 0) EXPECT_THAT(why, HasSubstr("(id 9001)"));
    idx->snapshot();
  }
  {
    auto idx = load_index(cfg, false);  // the big row is in the snapshot now
    EXPECT_FALSE(admitted(*idx, probe, &why));
    if (g_rank == 0) EXPECT_THAT(why, HasSubstr("(id 9001)")) << "named by its position in the snapshot?";
    const std::vector<std::int64_t> gone{9001};
    idx->remove(gone.data(), 1);
    EXPECT_TRUE(admitted(*idx, probe, &why)) << why;
    expect_oracle(*idx, "after the big row's delete");
  }
  auto idx = load_index(cfg, false);  // snapshot + the delete replayed
  EXPECT_TRUE(admitted(*idx, probe, &why)) << why;
  // Replacing the big row by a small one also gives the bound back.
  try_upsert(*idx, 9002, big);
  EXPECT_FALSE(admitted(*idx, probe, nullptr));
  try_upsert(*idx, 9002, std::vector<float>(kDim, 1.0f));
  EXPECT_TRUE(admitted(*idx, probe, &why)) << why;
}

// Ranges and ranks over the live rows after writes: new rows copying base rows (ties between
// old and new ids), replacements and deletes; then for every query, unfiltered and under a
// filter, the range total at a mid-order bound and at the worst live score, the range's rows,
// and the ranks of the best, the worst, a tied, a replaced and an inserted id (one the filter may
// drop: it gets the rank it would have) equal the float64 oracle over the model's live rows
// (inner product and l2: exact on small integers). Cosine divides, so not exact in float32: there
// the ids of each search rank 1 .. k, in order.
TEST_P(Updates, RangeTotalsAndRanksAfterWritesMatchTheOracle) {
  const Config cfg = make_config(/*small_ints=*/true);
  auto idx = load_index(cfg, false);
  std::vector<std::int64_t> ids, tenants;
  std::vector<float> v = test::small_ints(8 * kDim, 41);
  for (int i = 0; i < 8; ++i) {
    ids.push_back(i % 2 ? 20 + i : 2000 + i);
    tenants.push_back(i % 3);
    if (i % 2 == 0) std::copy(base_.begin() + i * kDim, base_.begin() + (i + 1) * kDim, v.begin() + i * kDim);
  }
  upsert(*idx, ids, v, tenants);
  upsert(*idx, {100, 2002}, test::small_ints(2 * kDim, 42), {1, 1});
  remove(*idx, {103, 112, 2004});
  const FilterProgram t1 = parse_filter(R"({"eq": {"tenant": 1}})", idx->info().schema);
  const Metric m = GetParam();
  // The oracle's whole order of query q over the live rows (tenant 1 only when `filtered`).
  auto order = [&](int q, bool filtered, std::vector<std::int64_t>* oid, std::vector<double>* os) {
    std::vector<float> rows;
    std::vector<std::int64_t> live;
    for (const auto& [id, row] : model_) {
      if (filtered && row.tenant != 1) continue;
      live.push_back(id);
      rows.insert(rows.end(), row.v.begin(), row.v.end());
    }
    const auto n = static_cast<std::int64_t>(live.size());
    oracle::topk(m, rows.data(), n, live.data(), queries_.data() + q * kDim, 1, kDim, static_cast<int>(n), oid, os);
  };
  for (int q = 0; q < kQueries; ++q) {
    std::vector<std::int64_t> all_ids;
    std::vector<double> all_scores;
    order(q, false, &all_ids, &all_scores);
    for (const FilterProgram* f : {static_cast<const FilterProgram*>(nullptr), &t1}) {
      const std::string what = "query " + std::to_string(q) + (f ? " tenant 1" : "");
      std::vector<std::int64_t> oid;
      std::vector<double> os;
      order(q, f != nullptr, &oid, &os);
      const auto n = static_cast<std::int64_t>(oid.size());
      ASSERT_GT(n, 1) << what;
      if (m == Metric::kCosine) {
        const test::Answer a = search(*idx, q, 1, f);
        std::vector<std::int64_t> ranks(kK, -1);
        std::vector<float> scores(kK);
        const int k = static_cast<int>(std::min<std::int64_t>(kK, n));
        idx->rank(g_rank == 0 ? queries_.data() + q * kDim : nullptr, g_rank == 0 ? a.ids.data() : nullptr, k, f,
                  ranks.data(), scores.data());
        for (int j = 0; j < k && g_rank == 0; ++j) EXPECT_EQ(ranks[j], j + 1) << what << " id " << a.ids[j];
        continue;
      }
      // ranges
      for (const double bound : {os[static_cast<std::size_t>(n / 2)], os.back()}) {
        QueryBounds b;
        b.has_bound = true;
        b.bound = static_cast<float>(bound);
        std::vector<std::int64_t> got(kK, -1);
        std::vector<float> got_scores(kK, NAN);
        std::int32_t count = -1;
        QueryStats st;
        if (g_rank == 0) {
          const FilterProgram* fs[1] = {f};
          const SearchBatch batch = idx->admit(queries_.data() + q * kDim, 1, kK, fs, &b, true);
          idx->search(batch, got.data(), got_scores.data(), &count, &st);
        } else {
          idx->search(SearchBatch{}, nullptr, nullptr);
          continue;
        }
        const auto total = static_cast<std::int64_t>(std::count_if(
            os.begin(), os.end(), [&](double s) { return m == Metric::kL2 ? s <= bound : s >= bound; }));
        EXPECT_EQ(st.total, total) << what << " bound " << bound;
        EXPECT_EQ(st.scanned, static_cast<std::int64_t>(model_.size())) << what;
        ASSERT_EQ(count, std::min<std::int64_t>(kK, total)) << what << " bound " << bound;
        for (int j = 0; j < count; ++j) {
          EXPECT_EQ(got[j], oid[j]) << what << " bound " << bound << " position " << j;
          EXPECT_EQ(static_cast<double>(got_scores[j]), os[j]) << what << " position " << j;
        }
      }
      // ranks: the best, the worst, a tied id, a replaced id, an inserted id that copies a base row
      std::vector<std::int64_t> want{oid.front(), oid.back(), 100, 2000};
      for (std::size_t j = 1; j < all_ids.size() && want.size() < 5; ++j)
        if (all_scores[j] == all_scores[j - 1]) want.push_back(all_ids[j]);
      const int k = static_cast<int>(want.size());
      std::vector<std::int64_t> ranks(want.size(), -1);
      std::vector<float> scores(want.size(), NAN);
      idx->rank(g_rank == 0 ? queries_.data() + q * kDim : nullptr, g_rank == 0 ? want.data() : nullptr, k, f,
                g_rank == 0 ? ranks.data() : nullptr, g_rank == 0 ? scores.data() : nullptr);
      if (g_rank != 0) continue;
      for (int i = 0; i < k; ++i) {
        const auto at = std::find(all_ids.begin(), all_ids.end(), want[i]);
        ASSERT_NE(at, all_ids.end()) << "id " << want[i] << " is live";
        const double s = all_scores[static_cast<std::size_t>(at - all_ids.begin())];
        std::int64_t ahead = 0;
        for (std::int64_t j = 0; j < n; ++j) ahead += oracle::better(m, os[j], oid[j], s, want[i]) ? 1 : 0;
        EXPECT_EQ(ranks[i], 1 + ahead) << what << " id " << want[i];
        EXPECT_EQ(static_cast<double>(scores[i]), s) << what << " id " << want[i];
      }
      EXPECT_EQ(ranks[0], 1) << what;
      EXPECT_EQ(ranks[1], n) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Metrics, Updates, ::testing::Values(Metric::kInnerProduct, Metric::kL2, Metric::kCosine),
                         [](const ::testing::TestParamInfo<Metric>& i) { return to_string(i.param); });

}  // namespace
}  // namespace shardtopk

int main(int argc, char** argv) {
  shardtopk::MpiSession mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  shardtopk::g_rank = mpi.rank();
  shardtopk::g_world = mpi.world_size();
  if (shardtopk::cuda_engine() &&  // the GPU registrations: one GPU per rank on this node
      !shardtopk::test::gpus_for_every_rank(shardtopk::g_rank, shardtopk::cuda_device_count(), "the updates suite"))
    return 0;
  shardtopk::test::quiet_followers(shardtopk::g_rank);
  char buf[4096] = {0};
  if (shardtopk::g_rank == 0) {
    const char* base = std::getenv("TMPDIR");
    std::snprintf(buf, sizeof buf, "%s/shardtopk-updates-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(buf)) buf[0] = '\0';
  }
  MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (buf[0] == '\0') MPI_Abort(MPI_COMM_WORLD, 1);
  shardtopk::g_dir = buf;
  const int worst = shardtopk::test::run_all_tests_on_every_rank(shardtopk::g_rank);
  if (shardtopk::g_rank == 0) {
    std::error_code ec;
    std::filesystem::remove_all(shardtopk::g_dir, ec);
  }
  return worst;
}
