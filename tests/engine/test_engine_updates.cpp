// Engine slots (Engine::write_rows / set_live / read_rows): after every step of a mixed sequence
// of writes into reserved and freed slots and deletions, each query's answer equals the float64
// oracle's over exactly the live rows (small-integer data: exact ids and scores, ties across old
// and new rows broken on the global id), filtered searches see the written attributes, batches
// equal batch-1 bit for bit, and bad calls are refused without changing anything.
//
// Parametrised over the engine: the CPU engine always; the CUDA engine where a GPU is visible
// (skipped, saying "no GPU visible", elsewhere; ctest entry test_engine_updates_gpu).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"
#include "tools/oracle.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::HasSubstr;

struct UpdateCase {
  bool cuda;
  Metric metric;
  Dtype dtype;
};
std::ostream& operator<<(std::ostream& os, const UpdateCase& c) {
  return os << (c.cuda ? "cuda " : "cpu ") << to_string(c.metric) << " " << to_string(c.dtype);
}

constexpr std::int64_t kDim = 12, kBase = 40, kCapacity = 100;
constexpr int kK = 8, kQueries = 5;

/// A search's filters: the programs of its FilterBatch, the tenant each one keeps (what the
/// oracle filters on), and each query's program ([kQueries], -1: none).
struct Filters {
  std::vector<const FilterProgram*> programs;
  std::vector<std::int64_t> tenant;
  std::vector<std::int32_t> which;
};

/// What the engine should hold: per slot its id, vector, tenant and whether it is live.
struct Model {
  std::vector<std::int64_t> ids;
  std::vector<float> vectors;  // [capacity, dim]
  std::vector<std::int64_t> tenant;
  std::vector<bool> live;
};

class EngineUpdates : public ::testing::TestWithParam<UpdateCase> {
 protected:
  void SetUp() override {
    if (GetParam().cuda && !cuda_available()) GTEST_SKIP() << "no GPU visible";
    build(kDim, kBase, kCapacity, kK);
  }

  /// (Re)builds the engine: `base` rows of small integers [base, dim] in slots [0, base) (tenant
  /// r % 3, shuffled ids 1000 + 7 j), slots up to `capacity` reserved; searches return k.
  void build(std::int64_t dim, std::int64_t base, std::int64_t capacity, int k) {
    const UpdateCase& c = GetParam();
    runner_.reset();
    engine_.reset();
    dim_ = dim;
    capacity_ = capacity;
    k_ = k;
    base_ = test::small_ints(static_cast<std::size_t>(base * dim), 7);
    queries_ = test::small_ints(static_cast<std::size_t>(kQueries * dim), 8);
    m_.ids.assign(capacity, kPadId);
    m_.vectors.assign(static_cast<std::size_t>(capacity * dim), 0.0f);
    m_.tenant.assign(capacity, 0);
    m_.live.assign(capacity, false);
    std::vector<std::int64_t> ids(base);
    AttributeColumn tenant{"tenant", AttributeType::kInt64, {}, {}};
    for (std::int64_t r = 0; r < base; ++r) {
      ids[r] = 1000 + 7 * ((r * 13) % base);  // shuffled: ties break on these, not on slots
      tenant.ints.push_back(r % 3);
      m_.ids[r] = ids[r];
      m_.tenant[r] = r % 3;
      m_.live[r] = true;
      std::copy(base_.begin() + r * dim, base_.begin() + (r + 1) * dim, m_.vectors.begin() + r * dim);
    }
    table_ = AttributeTable({tenant}, ids);
    ShardInput in{base_.data(), base, dim, ids.data()};
    in.attributes = &table_;
    in.capacity = capacity;
    EngineOptions opt;
    opt.threads = 2;
    const EngineLimits lim{kQueries, k, 4, 1};
    engine_ = c.cuda ? make_cuda_engine(in, c.metric, c.dtype, lim, opt) : make_cpu_engine(in, c.metric, c.dtype, lim, opt);
    runner_ = std::make_unique<test::EngineRunner>(*engine_);
  }

  void write(const std::vector<std::int64_t>& slots, const std::vector<std::int64_t>& ids,
             const std::vector<float>& vectors, const std::vector<std::int64_t>& tenants) {
    const void* cols[1] = {tenants.data()};
    SlotRows w;
    w.n = static_cast<std::int64_t>(slots.size());
    w.slots = slots.data();
    w.ids = ids.data();
    w.vectors = vectors.data();
    w.attributes = cols;
    engine_->write_rows(w);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      m_.ids[slots[i]] = ids[i];
      m_.tenant[slots[i]] = tenants[i];
      std::copy(vectors.begin() + i * dim_, vectors.begin() + (i + 1) * dim_, m_.vectors.begin() + slots[i] * dim_);
    }
  }
  void set_live(const std::vector<std::int64_t>& slots, bool live) {
    engine_->set_live(slots.data(), static_cast<std::int64_t>(slots.size()), live);
    for (auto s : slots) m_.live[s] = live;
  }

  /// The engine's answer [batch, k] for queries [q0, q0 + batch), each with its filter of `f`.
  std::vector<Candidate> search(int q0, int batch, const Filters& f = {}) {
    const std::size_t qbytes = sizeof(float) * batch * dim_;
    Space& sp = runner_->space();
    sp.from_host(const_cast<float*>(runner_->device_queries()), queries_.data() + q0 * dim_, qbytes, true);
    engine_->prepare_queries(const_cast<float*>(runner_->device_queries()), batch, sp.stream());
    SearchArgs a;
    a.queries = runner_->device_queries();
    a.batch = batch;
    a.k = k_;
    a.out = runner_->device_out();
    a.stream = sp.stream();
    if (!f.programs.empty())
      a.filters = FilterBatch{f.programs.data(), static_cast<int>(f.programs.size()), f.which.data() + q0};
    engine_->search(a);
    std::vector<Candidate> out(static_cast<std::size_t>(batch) * k_);
    sp.to_host(out.data(), runner_->device_out(), out.size() * sizeof(Candidate), true);
    return out;
  }

  /// Every query's answer against the oracle over the live rows that pass its filter of `f`,
  /// exact ids and scores; the batch of all queries equals each query alone, bit for bit.
  void expect_oracle(const std::string& step, const Filters& f = {}) {
    const Metric m = GetParam().metric;
    const std::vector<Candidate> batch = search(0, kQueries, f);
    for (int q = 0; q < kQueries; ++q) {
      const std::int64_t tenant = f.programs.empty() || f.which[q] < 0 ? -1 : f.tenant[f.which[q]];
      std::vector<float> rows;
      std::vector<std::int64_t> ids;
      for (std::int64_t s = 0; s < capacity_; ++s) {
        if (!m_.live[s] || (tenant >= 0 && m_.tenant[s] != tenant)) continue;
        ids.push_back(m_.ids[s]);
        rows.insert(rows.end(), m_.vectors.begin() + s * dim_, m_.vectors.begin() + (s + 1) * dim_);
      }
      const std::vector<Candidate> alone = search(q, 1, f);
      std::vector<std::int64_t> want_ids;
      std::vector<double> want_scores;
      const int kk = static_cast<int>(std::min<std::int64_t>(k_, static_cast<std::int64_t>(ids.size())));
      if (kk > 0)
        oracle::topk(m, rows.data(), static_cast<std::int64_t>(ids.size()), ids.data(), queries_.data() + q * dim_, 1,
                     dim_, kk, &want_ids, &want_scores);
      for (int j = 0; j < k_; ++j) {
        const Candidate& got = batch[static_cast<std::size_t>(q) * k_ + j];
        SCOPED_TRACE(step + ": query " + std::to_string(q) + " position " + std::to_string(j));
        EXPECT_EQ(got.id, alone[j].id);
        EXPECT_EQ(got.score, alone[j].score);
        if (j < kk) {
          EXPECT_EQ(got.id, want_ids[j]);
          EXPECT_EQ(static_cast<double>(reported_score(m, got.score)), want_scores[j]);
        } else {
          EXPECT_EQ(got.id, kPadId);
        }
      }
    }
  }

  std::int64_t dim_ = 0, capacity_ = 0;
  int k_ = 0;
  std::vector<float> base_, queries_;
  Model m_;
  AttributeTable table_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<test::EngineRunner> runner_;
};

TEST_P(EngineUpdates, MixedWritesAndDeletesMatchTheOracleOverTheLiveSlots) {
  EXPECT_EQ(engine_->info().rows, kBase);
  EXPECT_EQ(engine_->info().capacity, kCapacity);
  expect_oracle("as built");

  // 30 new rows into reserved slots; every third one a copy of a base row (ties across old and
  // new rows, broken by the id), the others new small integers.
  std::vector<std::int64_t> slots, ids, tenants;
  std::vector<float> vecs = test::small_ints(30 * kDim, 9);
  for (int i = 0; i < 30; ++i) {
    slots.push_back(kBase + i);
    ids.push_back(i % 2 == 0 ? 500 + i : 5000 + i);  // some below, some above the base ids
    tenants.push_back(i % 3);
    if (i % 3 == 0) std::copy(base_.begin() + i * kDim, base_.begin() + (i + 1) * kDim, vecs.begin() + i * kDim);
  }
  write(slots, ids, vecs, tenants);
  expect_oracle("written, not yet live");  // written slots stay dead until set_live
  set_live(slots, true);
  expect_oracle("30 rows live");

  // Deletes: 10 base rows and 5 new ones.
  set_live({0, 3, 5, 9, 11, 17, 20, 25, 33, 39, 40, 43, 50, 61, 69}, false);
  expect_oracle("15 deleted");

  // A deleted id comes back in a freed slot with another vector; another freed slot gets a
  // new id; then a filter on the written attribute.
  const std::vector<float> again = test::small_ints(2 * kDim, 10);
  write({3, 43}, {m_.ids[0], 777}, again, {1, 1});
  set_live({3, 43}, true);
  expect_oracle("re-inserted in freed slots");
  const FilterProgram tenant1 = parse_filter(R"({"eq": {"tenant": 1}})", engine_->attribute_table().schema());
  expect_oracle("filtered tenant = 1", Filters{{&tenant1}, {1}, std::vector<std::int32_t>(kQueries, 0)});

  // What read_rows gives back is what the oracle used (small integers: exact in every dtype).
  std::vector<float> back(2 * kDim);
  const std::int64_t which[2] = {43, 3};
  engine_->read_rows(which, 2, back.data());
  for (std::int64_t d = 0; d < kDim; ++d) {
    EXPECT_EQ(back[d], m_.vectors[43 * kDim + d]);
    EXPECT_EQ(back[kDim + d], m_.vectors[3 * kDim + d]);
  }
  EXPECT_EQ(engine_->attribute_table().global_ids()[43], 777);

  // Every slot dead: padding only.
  std::vector<std::int64_t> all(kCapacity);
  std::iota(all.begin(), all.end(), 0);
  set_live(all, false);
  expect_oracle("everything deleted");
}

// One write_rows call of 5,000 single-slot rows, given out of slot order, into every third
// reserved slot (the write-ahead log's replay): no two consecutive. At dim 1000 the CUDA engine's
// 4 MiB staging holds ~1,040 rows (and their slots and ids), so the call takes 5 batches, each
// updating the attribute table over its slot range. Written rows are larger than the base rows
// (the largest norm grows: the batched path's bound), every fourth one a copy of a base row (ties
// broken on the id), their tenants 0..4: tenants 3 and 4 hold only written rows, and with k =
// 1024 a query filtered on one of them returns every such row (its id from the device's ids, its
// tenant from the device's table). read_rows gives back every written row.
TEST_P(EngineUpdates, ManyScatteredRowsInOneWriteMatchTheOracle) {
  constexpr std::int64_t dim = 1000, base = 1000, n = 5000, capacity = base + 3 * n + 1;
  build(dim, base, capacity, 1024);
  std::vector<std::int64_t> slots, ids, tenants;
  std::vector<float> vecs = test::small_ints(static_cast<std::size_t>(n * dim), 12, -4, 4);
  for (std::int64_t i = 0; i < n; ++i) {
    slots.push_back(base + 1 + 3 * ((i * 2029) % n));  // a permutation of every third slot
    ids.push_back(i % 2 == 0 ? 3 + 7 * i : 50000 + i);  // ≡ 3 (mod 7): never a base id (≡ 6)
    tenants.push_back(i % 5);
    const std::int64_t b = i % base;
    if (i % 4 == 0) std::copy(base_.begin() + b * dim, base_.begin() + (b + 1) * dim, vecs.begin() + i * dim);
  }
  write(slots, ids, vecs, tenants);
  const AttributeSchema& schema = engine_->attribute_table().schema();
  std::vector<FilterProgram> programs;
  for (const int t : {4, 3, 1, 0})
    programs.push_back(parse_filter(R"({"eq": {"tenant": )" + std::to_string(t) + "}}", schema));
  const Filters by_tenant{{&programs[0], &programs[1], &programs[2], &programs[3]}, {4, 3, 1, 0}, {0, 1, 2, 3, -1}};
  expect_oracle("5,000 written, not yet live", by_tenant);
  set_live(slots, true);
  expect_oracle("5,000 written rows live");
  expect_oracle("5,000 written rows live, filtered by tenant", by_tenant);

  std::vector<float> back(static_cast<std::size_t>(n * dim));
  engine_->read_rows(slots.data(), n, back.data());
  int bad = 0;
  for (std::int64_t i = 0; i < n * dim; ++i)  // small integers: exact in every dtype
    if (back[i] != vecs[i] && ++bad <= 5)
      ADD_FAILURE() << "row " << i / dim << " (slot " << slots[i / dim] << ") column " << i % dim << ": read "
                    << back[i] << ", written " << vecs[i];
  EXPECT_EQ(bad, 0);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(engine_->attribute_table().global_ids()[slots[i]], ids[i]);
}

TEST_P(EngineUpdates, BadCallsAreRefusedAndChangeNothing) {
  const std::vector<float> v = test::small_ints(kDim, 11);
  const std::vector<std::int64_t> tenant{2};
  EXPECT_THAT(test::error_of([&] { write({5}, {9}, v, tenant); }), HasSubstr("slot 5 is live"));
  EXPECT_THAT(test::error_of([&] { write({kCapacity}, {9}, v, tenant); }), HasSubstr("outside [0, 100)"));
  const std::int64_t bad = -1;
  EXPECT_THAT(test::error_of([&] { engine_->set_live(&bad, 1, false); }), HasSubstr("slot -1"));
  if (GetParam().dtype == Dtype::kFloat16) {
    std::vector<float> huge(kDim, 1e6f);
    EXPECT_THAT(test::error_of([&] {
                  SlotRows w;
                  const std::int64_t s = 50, id = 9;
                  const void* cols[1] = {tenant.data()};
                  w.n = 1, w.slots = &s, w.ids = &id, w.vectors = huge.data(), w.attributes = cols;
                  engine_->write_rows(w);
                }),
                HasSubstr("overflows float16"));
  }
  expect_oracle("after refused calls");
}

// A written row is stored as the load stores rows: float16 rounds to nearest, ties to even
// (half::to_f16), subnormals and the largest finite values included, in the 8-wide chunks and in
// the columns past the last whole chunk alike (kDim = 12).
TEST_P(EngineUpdates, AWrittenRowIsRoundedAsTheLoadRoundsIt) {
  const float tie_even = 1.0f + std::ldexp(1.0f, -11), tie_odd = 1.0f + 3 * std::ldexp(1.0f, -11);
  const float sub_tie = std::ldexp(1.0f, -25), sub_tie_odd = 3 * std::ldexp(1.0f, -25), sub = 3e-6f;
  const std::vector<float> values = {tie_even, -tie_odd, sub_tie, -sub_tie_odd, sub,    -0.0f,
                                     65504.0f, 65519.0f, -tie_odd, tie_even,    -sub, 1.0f / 3};
  ASSERT_EQ(static_cast<std::int64_t>(values.size()), kDim);
  for (std::int64_t shift = 0; shift < kDim; shift += 5) {  // each value in a chunk and in the tail
    std::vector<float> v(static_cast<std::size_t>(kDim));
    for (std::int64_t d = 0; d < kDim; ++d) v[d] = values[(d + shift) % kDim];
    const std::int64_t slot = kBase + shift;
    write({slot}, {7000 + shift}, v, {1});
    std::vector<float> back(static_cast<std::size_t>(kDim));
    engine_->read_rows(&slot, 1, back.data());
    for (std::int64_t d = 0; d < kDim; ++d) {
      const float want = GetParam().dtype == Dtype::kFloat16 ? half::from_f16(half::to_f16(v[d])) : v[d];
      EXPECT_EQ(half::bits(back[d]), half::bits(want)) << "column " << d << " value " << v[d] << " shift " << shift;
    }
  }
}

// The programs of a FilterBatch are used as given: each query reads the one it names (or none),
// whatever its batch-mates name, over the live slots; a program no query names changes nothing.
TEST_P(EngineUpdates, AFilterBatchIsUsedAsGiven) {
  const AttributeSchema& schema = engine_->attribute_table().schema();
  const FilterProgram t0 = parse_filter(R"({"eq": {"tenant": 0}})", schema);
  const FilterProgram t1 = parse_filter(R"({"eq": {"tenant": 1}})", schema);
  const FilterProgram t2 = parse_filter(R"({"eq": {"tenant": 2}})", schema);
  expect_oracle("three programs", Filters{{&t2, &t0, &t1}, {2, 0, 1}, {2, -1, 0, 1, 2}});
  set_live({1, 2, 4, 7, 8, 13}, false);
  expect_oracle("after deletes", Filters{{&t1, &t2}, {1, 2}, {-1, 1, 1, -1, 0}});
  expect_oracle("a program nobody names", Filters{{&t0, &t1}, {0, 1}, {1, 1, 1, 1, 1}});
}

TEST_P(EngineUpdates, ABadFilterBatchIsRefused) {
  const AttributeSchema& schema = engine_->attribute_table().schema();
  const FilterProgram t1 = parse_filter(R"({"eq": {"tenant": 1}})", schema);
  const FilterProgram t2 = parse_filter(R"({"eq": {"tenant": 2}})", schema);
  EXPECT_THAT(test::error_of([&] { search(0, kQueries, Filters{{&t1, &t2}, {1, 2}, {0, 2, 1, 0, -1}}); }),
              HasSubstr("query 1 names filter program 2, outside [-1, 2)"));
  EXPECT_THAT(test::error_of([&] { search(0, kQueries, Filters{{&t1, &t2}, {1, 2}, {0, 1, -2, 0, -1}}); }),
              HasSubstr("query 2 names filter program -2"));
  // limits: max_filters 4
  EXPECT_THAT(test::error_of([&] {
                search(0, kQueries, Filters{{&t1, &t2, &t1, &t2, &t1}, {1, 2, 1, 2, 1}, {0, 1, 2, 3, 4}});
              }),
              HasSubstr("a batch holds 5 distinct filters; allowed 0 .. 4 (search.max_filters)"));
  expect_oracle("after refused searches", Filters{{&t1, &t2}, {1, 2}, {0, 1, 0, 1, -1}});
}

std::vector<UpdateCase> cases() {
  std::vector<UpdateCase> out;
  for (bool cuda : {false, true})
    for (Metric m : {Metric::kInnerProduct, Metric::kL2})
      for (Dtype dt : {Dtype::kFloat32, Dtype::kFloat16}) out.push_back({cuda, m, dt});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineUpdates, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<UpdateCase>& i) {
                           std::string n = std::string(i.param.cuda ? "cuda_" : "cpu_") + to_string(i.param.metric) +
                                           "_" + to_string(i.param.dtype);
                           return n;
                         });

}  // namespace
}  // namespace shardtopk
