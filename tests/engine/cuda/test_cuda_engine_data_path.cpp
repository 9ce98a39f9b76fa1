// GPU tests of the CUDA engine's data path: no host/device traffic of its own, the epilogue
// inside the search's graph, searches on a caller's stream, path and graph options that change
// no bits, streamed loading.
//
// Every test skips, saying so, when no GPU is visible. Under `mpirun -np P` each rank runs the
// whole binary on GPU (local rank mod GPU count); nothing here talks between ranks.
//
// Case tables (why each row exists) are next to the INSTANTIATE_TEST_SUITE_P lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_engine_rig.hpp"
#include "engine_test_support.hpp"
#include "index/admission.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/generator.hpp"
#include "shardtopk/space.hpp"
#include "test_support.hpp"
#include "tools/oracle.hpp"

namespace shardtopk::test {
namespace {

// ------------------------------------------------------------------------------ data path

// The engine moves nothing between the host and the device by itself (the data path's copies
// are the space's): its counters stay zero through construction, prepare and search on both
// paths, while the space counts the queries and candidates it copied. Only batched_fallbacks
// counts in the engine (MassiveTiesTakeTheSmallestIds).
TEST(CudaEngine, MovesNothingBetweenHostAndDeviceByItself) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 4000, dim = 384;
  const int k = 10;
  for (Metric m : {Metric::kInnerProduct, Metric::kCosine}) {
    SCOPED_TRACE(mname(m));
    const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 1100), n, dim, m, Dtype::kFloat32,
                                 shuffled_ids(n, 1101));
    Rig e = make_rig(c.input(), m, Dtype::kFloat32, limits(4, 16));
    const std::vector<float> q = random_floats(static_cast<size_t>(4 * dim), 1102);
    const auto one = run_candidates(e, q, 4, k, 1);
    const auto four = run_candidates(e, q, 4, k, 4);
    const TransferCounters t = e->transfer_counters();
    EXPECT_EQ(t.host_to_device, 0u);
    EXPECT_EQ(t.device_to_host, 0u) << "prepare/search must not copy to the host (status words aside)";
    EXPECT_EQ(t.batched_fallbacks, 0u);
    EXPECT_EQ(e.space->counters().host_to_device, 2u * 4 * dim * 4);
    EXPECT_EQ(e.space->counters().device_to_host, 2u * 4 * k * sizeof(Candidate));
    expect_same_candidates(four, one, "batch 4 vs batch 1");
    expect_within_tolerance(oracle_metric(m), c.stored, n, c.ids.data(), prepared(q, 4, dim, m), 4, dim, k,
                            to_answer(one, m, 4, k, k), std::string("counters ") + mname(m));
  }
}

// A search with an epilogue (the one-rank index's export: the space's split of the answer into
// mapped pinned memory) runs it inside the search's CUDA graph; the exported ids and scores
// equal a split queued after a plain search, bit for bit, on both paths (batch 1: the scan; 7
// and 64: tensor cores), on the graph's capture and on its replays with other queries.
TEST(CudaEngine, EpilogueInTheSearchGraphEqualsASplitAfterIt) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 70000, dim = 100;
  const int k = 20;
  for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32})
    for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
      const std::string what = std::string(mname(m)) + " " + dname(t);
      const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 1700), n, dim, m, t,
                                   shuffled_ids(n, 1701));
      Rig e = make_rig(c.input(), m, t, limits(64, 32));
      SplitEpilogue inside(*e.space, m, 64, 32), after(*e.space, m, 64, 32);
      for (const int b : {1, 7, 64})
        for (int rep = 0; rep < 3; ++rep) {
          const std::string at = what + ", batch " + std::to_string(b) + ", call " + std::to_string(rep);
          const std::vector<float> q = random_floats(static_cast<size_t>(b * dim), 1710 + 10 * b + rep);
          stage(e, q.data(), b);
          search(e, b, k);
          after.enqueue(e.out, b, k, nullptr);
          e.space->synchronize();
          const Answer want = after.read(b, k);
          stage(e, q.data(), b);
          search(e, b, k, &inside);
          e.space->synchronize();
          const Answer got = inside.read(b, k);
          EXPECT_EQ(got.ids, want.ids) << at;
          std::vector<std::uint32_t> got_bits(got.scores.size()), want_bits(want.scores.size());
          std::transform(got.scores.begin(), got.scores.end(), got_bits.begin(), bits_of);
          std::transform(want.scores.begin(), want.scores.end(), want_bits.begin(), bits_of);
          EXPECT_EQ(got_bits, want_bits) << at;
          if (rep == 0 && b == 7)
            expect_within_tolerance(oracle_metric(m), c.stored, c.n, c.ids.data(), q, b, dim, k, got, at + " vs oracle");
        }
    }
}

// An epilogue with a direct target (the one-rank index's export) gets the answer from the final
// sort of the search itself where a select makes it (batch 1, and batches of 2 to 8 without masks:
// no epilogue step queued), and through enqueue() elsewhere (the tensor-core path at batch 64):
// ids and score bits equal the split of a search without it, with the float64 oracle's answer, on
// capture and on replays, with deleted rows (batch 1 and 3 take the masked scan and the tensor
// cores) and for a shard smaller than k (padding: ids kPadId, scores -inf, +inf for l2).
TEST(CudaEngine, DirectExportEqualsTheSplit) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t dim = 100;
  const int k = 20;
  for (const std::int64_t n : {std::int64_t{70000}, std::int64_t{12}})
    for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32})
      for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
        const std::string what = std::string(mname(m)) + " " + dname(t) + ", " + std::to_string(n) + " rows";
        const Corpus c = make_corpus(small_ints(static_cast<size_t>(n * dim), 1750 + n, -2, 2), n, dim, m, t,
                                     shuffled_ids(n, 1751));
        Rig e = make_rig(c.input(), m, t, limits(64, 32));
        SplitEpilogue split(*e.space, m, 64, 32), direct(*e.space, m, 64, 32, /*direct=*/true);
        for (const bool deleted : {false, true}) {
          if (deleted) {  // every 7th row
            std::vector<std::int64_t> slots;
            for (std::int64_t r = 0; r < n; r += 7) slots.push_back(r);
            e->set_live(slots.data(), static_cast<std::int64_t>(slots.size()), false);
          }
          for (const int b : {1, 3, 8, 64})
            for (int rep = 0; rep < 2; ++rep) {
              const std::string at = what + (deleted ? ", deleted rows" : "") + ", batch " + std::to_string(b) +
                                     ", call " + std::to_string(rep);
              const std::vector<float> q = small_ints(static_cast<size_t>(b * dim), 1760 + 10 * b + rep, -2, 2);
              stage(e, q.data(), b);
              search(e, b, k, &split);
              e.space->synchronize();
              const Answer want = split.read(b, k);
              direct.poison(b, k);
              const int enqueued = direct.enqueued();
              stage(e, q.data(), b);
              search(e, b, k, &direct);
              e.space->synchronize();
              const Answer got = direct.read(b, k);
              EXPECT_EQ(got.ids, want.ids) << at;
              std::vector<std::uint32_t> got_bits(got.scores.size()), want_bits(want.scores.size());
              std::transform(got.scores.begin(), got.scores.end(), got_bits.begin(), bits_of);
              std::transform(want.scores.begin(), want.scores.end(), want_bits.begin(), bits_of);
              EXPECT_EQ(got_bits, want_bits) << at;
              const bool selected = b == 1 || (b <= 8 && !deleted);
              if (selected) EXPECT_EQ(direct.enqueued(), enqueued) << at << ": no epilogue step";
              if (!deleted && rep == 0) {
                // The first min(n, k) of each row against the oracle; the rest is padding.
                const int kk = static_cast<int>(std::min<std::int64_t>(n, k));
                Answer head;
                for (int i = 0; i < b; ++i)
                  for (int j = 0; j < k; ++j) {
                    const std::size_t at_ij = static_cast<std::size_t>(i) * k + j;
                    if (j < kk) {
                      head.ids.push_back(got.ids[at_ij]);
                      head.scores.push_back(got.scores[at_ij]);
                    } else {
                      EXPECT_EQ(got.ids[at_ij], kPadId) << at << ", query " << i << " rank " << j;
                      EXPECT_EQ(got.scores[at_ij], m == Metric::kL2 ? std::numeric_limits<float>::infinity()
                                                                    : -std::numeric_limits<float>::infinity())
                          << at << ", query " << i << " rank " << j;
                    }
                  }
                expect_exact(oracle_metric(m), c.stored, n, c.ids.data(), q, b, dim, kk, head, at + " vs oracle");
              }
            }
        }
      }
}

// A search ordered on a caller's stream (here another space's) starts after the work queued
// there and gives the bits of a search on the engine's stream: a graph captured on the
// engine's stream is replayed on the caller's, one captured on the caller's stream serves it
// too, and the batched path's side stream forks from and joins back into the caller's stream.
// Batch 1 and 7, with and without CUDA graphs; small integers: the oracle's answer exactly.
TEST(CudaEngine, SearchesOnACallersStream) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 20000, dim = 64;
  const int k = 16;
  const Corpus c = make_corpus(small_ints(static_cast<size_t>(n * dim), 1200, -2, 2), n, dim, Metric::kL2,
                               Dtype::kFloat32, shuffled_ids(n, 1201));
  for (const bool graphs : {true, false}) {
    EngineOptions opt;
    opt.cuda_graphs = graphs;
    Rig e = make_rig(c.input(), Metric::kL2, Dtype::kFloat32, limits(8, 16), opt);
    auto caller = make_cuda_space(test_device());
    float* cq = static_cast<float*>(caller->alloc(sizeof(float) * 8 * dim));
    Candidate* cout = static_cast<Candidate*>(caller->alloc(sizeof(Candidate) * 8 * k));
    for (const int b : {1, 7}) {
      const std::string what = std::string(graphs ? "graphs" : "no graphs") + ", batch " + std::to_string(b);
      const std::vector<float> q = small_ints(static_cast<size_t>(b * dim), 1202 + b, -2, 2);
      const std::vector<Candidate> want = run_candidates(e, q, b, k, b);
      expect_exact(Metric::kL2, c.stored, n, c.ids.data(), q, b, dim, k, to_answer(want, Metric::kL2, b, k, k), what);
      for (const bool own_buffers : {false, true}) {
        float* queries = own_buffers ? cq : e.queries;
        Candidate* out = own_buffers ? cout : e.out;
        caller->fill_pad(out, static_cast<std::int64_t>(b) * k);
        caller->from_host(queries, q.data(), sizeof(float) * b * dim, false);
        e->prepare_queries(queries, b, caller->stream());
        SearchArgs a;
        a.queries = queries;
        a.batch = b;
        a.k = k;
        a.out = out;
        a.stream = caller->stream();
        e->search(a);
        std::vector<Candidate> got(static_cast<size_t>(b) * k);
        caller->to_host(got.data(), out, got.size() * sizeof(Candidate), true);
        expect_same_candidates(got, want, what + (own_buffers ? ", the caller's buffers" : ", the engine's buffers"));
      }
    }
  }
}

// Options change no bit: without CUDA graphs, and with the path forced (batch 1 through the
// tensor-core path, batches through the scan), every answer equals the default engine's.
TEST(CudaEngine, PathAndGraphOptionsChangeNoBits) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 30000, dim = 100, nq = 16;
  const int k = 20;
  const std::vector<float> raw = random_floats(static_cast<size_t>(n * dim), 1800);
  const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 1801);
  for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32})
    for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
      const std::string what = std::string(mname(m)) + " " + dname(t);
      const Corpus c = make_corpus(raw, n, dim, m, t, shuffled_ids(n, 1802));
      Rig base = make_rig(c.input(), m, t, limits(16, 32));
      const std::vector<Candidate> ref = run_candidates(base, q, nq, k, 1);
      expect_same_candidates(run_candidates(base, q, nq, k, 8), ref, what + ": batch 8");
      for (int variant = 0; variant < 3; ++variant) {
        EngineOptions opt;
        std::string v;
        if (variant == 0) opt.cuda_graphs = false, v = " without graphs";
        if (variant == 1) opt.search_path = SearchPath::kScan, v = " forced scan";
        if (variant == 2) opt.search_path = SearchPath::kGemm, v = " forced gemm";
        Rig e = make_rig(c.input(), m, t, limits(16, 32), opt);
        expect_same_candidates(run_candidates(e, q, nq, k, 1), ref, what + v + ": batch 1");
        expect_same_candidates(run_candidates(e, q, nq, k, 8), ref, what + v + ": batch 8");
      }
    }
}

// A streamed shard (ShardInput::streamed: the ids now, the rows in blocks through load_buffer,
// load_rows and finish_load) answers as the same rows given at once, bit for bit, with blocks
// in the engine's pinned buffers and in any host memory; out-of-order, oversized and missing
// blocks, a cosine stream and a value that overflows the storage type are refused by number.
TEST(CudaEngine, StreamedLoadEqualsTheRowsGivenAtOnce) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 10007, dim = 33, block = 1000;
  const std::vector<float> q = random_floats(static_cast<size_t>(4 * dim), 1901);
  for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32})
    for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
      const std::string what = std::string(mname(m)) + " " + dname(t);
      const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 1900), n, dim, m, t,
                                   shuffled_ids(n, 1902));
      Rig whole = make_rig(c.input(), m, t, limits(4, 32));
      ShardInput s;
      s.rows = n;
      s.dim = dim;
      s.ids = c.ids.data();
      s.streamed = true;
      Rig st = make_rig(s, m, t, limits(4, 32));
      for (std::int64_t r0 = 0; r0 < n; r0 += block) {
        const std::int64_t rows = std::min(block, n - r0);
        if ((r0 / block) % 3 != 2) {
          float* buf = st->load_buffer(block);
          std::copy(c.rows.begin() + r0 * dim, c.rows.begin() + (r0 + rows) * dim, buf);
          st->load_rows(r0, rows, buf);
        } else {
          st->load_rows(r0, rows, c.rows.data() + r0 * dim);
        }
      }
      st->finish_load();
      expect_same_candidates(run_candidates(st, q, 4, 32, 1), run_candidates(whole, q, 4, 32, 1), what + " batch 1");
      expect_same_candidates(run_candidates(st, q, 4, 32, 4), run_candidates(whole, q, 4, 32, 4), what + " batch 4");
      EXPECT_NE(error_of([&] { st->finish_load(); }).find("streamed"), std::string::npos) << "the load has finished";
    }
  const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 1903), n, dim, Metric::kInnerProduct,
                               Dtype::kFloat16, shuffled_ids(n, 1904));
  ShardInput s;
  s.rows = n;
  s.dim = dim;
  s.ids = c.ids.data();
  s.streamed = true;
  Rig bad = make_rig(s, Metric::kInnerProduct, Dtype::kFloat16, limits(4, 32));
  const std::string order = error_of([&] { bad->load_rows(5, 10, c.rows.data()); });
  EXPECT_NE(order.find("expected row 0"), std::string::npos) << order;
  const std::string range = error_of([&] { bad->load_buffer(n + 1); });
  EXPECT_NE(range.find(std::to_string(n + 1) + " rows out of range"), std::string::npos) << range;
  bad->load_buffer(100);
  const std::string larger = error_of([&] { bad->load_buffer(200); });
  EXPECT_NE(larger.find("more than the first call's 100"), std::string::npos) << larger;
  bad->load_rows(0, 10, c.rows.data());
  const std::string missing = error_of([&] { bad->finish_load(); });
  EXPECT_NE(missing.find("10 of " + std::to_string(n) + " rows loaded"), std::string::npos) << missing;
  // a value beyond float16's range: refused at the end of the load, naming the row's global id
  std::vector<float> rows = c.rows;
  rows[7 * dim + 3] = 1e6f;
  Rig over = make_rig(s, Metric::kInnerProduct, Dtype::kFloat16, limits(4, 32));
  over->load_rows(0, n, rows.data());
  const std::string ovf = error_of([&] { over->finish_load(); });
  EXPECT_NE(ovf.find("corpus row " + std::to_string(c.ids[7])), std::string::npos) << ovf;
  EXPECT_NE(ovf.find("overflows float16"), std::string::npos) << ovf;
  const std::string cos = error_of([&] { make_rig(s, Metric::kCosine, Dtype::kFloat32, limits(4, 32)); });
  EXPECT_NE(cos.find("cannot be cosine"), std::string::npos) << cos;
}

// A shard streamed as IEEE binary16 bits (ShardInput::stream_format kFloat16Bits, what a float16
// corpus file sends: half the bytes) stores bit for bit what the float32 stream of the same values
// stores, in every storage type, and answers the same. Values: random finite patterns with ±0,
// subnormals and ±65504 among them. Rows: several blocks, in the engine's pinned buffers and in
// other host memory; dims 7 and 33 (not multiples of 8: the padding stays zero), 768 (real).
// A pattern that is not finite (±inf, NaN) is refused at finish_load naming the row's global id,
// the value and the column, and ends the load as a refused float32 load does; the float32
// calls are refused on a stream of bits.
TEST(CudaEngine, StreamedFloat16BitsStoreWhatFloat32Stores) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 5003, block = 1000;
  static const std::uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00};
  auto finite_bits = [](std::size_t count, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::uint16_t> v(count);
    for (auto& h : v) {
      do h = static_cast<std::uint16_t>(rng());
      while ((h & 0x7C00u) == 0x7C00u);
      if (rng() % 4 == 0) h = specials[rng() % (sizeof specials / sizeof specials[0])];
    }
    return v;
  };
  for (const std::int64_t dim : {std::int64_t{33}, std::int64_t{7}, std::int64_t{768}}) {
    const std::vector<std::uint16_t> bits = finite_bits(static_cast<std::size_t>(n * dim), 1905 + dim);
    std::vector<float> f32(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) f32[i] = half::from_f16(bits[i]);
    // queries of modest size: scores stay finite next to rows of ±65504
    std::vector<float> q = random_floats(static_cast<size_t>(4 * dim), 1906);
    for (float& x : q) x *= 1e-3f;
    const std::vector<std::int64_t> ids = shuffled_ids(n, 1907);
    std::vector<std::int64_t> slots(static_cast<std::size_t>(n));
    std::iota(slots.begin(), slots.end(), std::int64_t{0});
    for (const Dtype t : {Dtype::kFloat16, Dtype::kBFloat16, Dtype::kFloat32})
      for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
        const std::string what = std::string(mname(m)) + " " + dname(t) + " dim " + std::to_string(dim);
        ShardInput s;
        s.rows = n;
        s.dim = dim;
        s.ids = ids.data();
        s.streamed = true;
        Rig a = make_rig(s, m, t, limits(4, 32));
        s.stream_format = RowFormat::kFloat16Bits;
        Rig b = make_rig(s, m, t, limits(4, 32));
        for (std::int64_t r0 = 0; r0 < n; r0 += block) {
          const std::int64_t rows = std::min(block, n - r0);
          if ((r0 / block) % 3 != 2) {
            float* fa = a->load_buffer(block);
            std::uint16_t* fb = b->load_buffer_bits(block);
            std::copy(f32.begin() + r0 * dim, f32.begin() + (r0 + rows) * dim, fa);
            std::copy(bits.begin() + r0 * dim, bits.begin() + (r0 + rows) * dim, fb);
            a->load_rows(r0, rows, fa);
            b->load_rows_bits(r0, rows, fb);
          } else {
            a->load_rows(r0, rows, f32.data() + r0 * dim);
            b->load_rows_bits(r0, rows, bits.data() + r0 * dim);
          }
        }
        a->finish_load();
        b->finish_load();
        std::vector<float> ra(f32.size()), rb(f32.size());
        a->read_rows(slots.data(), n, ra.data());
        b->read_rows(slots.data(), n, rb.data());
        EXPECT_EQ(0, std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float))) << what;
        // the load's largest row norm, measured on the device: the host's shard_norms, bit for bit
        const NormSummary want = shard_norms(f32.data(), n, dim, 0, 1);
        for (Engine* e : {a.engine.get(), b.engine.get()}) {
          ASSERT_TRUE(e->measures_loaded_norms());
          const Engine::LoadedNorms got = e->loaded_norms();
          EXPECT_EQ(got.row, want.row) << what;
          EXPECT_EQ(0, std::memcmp(&got.max_norm, &want.max_norm, sizeof want.max_norm))
              << what << ": " << got.max_norm << " vs " << want.max_norm;
        }
        for (std::size_t i = 0; i < rb.size(); ++i)  // float16 storage: the file's bits; the others: its rounding
          ASSERT_EQ(half::bits(rb[i]), half::bits(round_through(t, f32[i]))) << what << " value " << i;
        expect_same_candidates(run_candidates(b, q, 4, 32, 1), run_candidates(a, q, 4, 32, 1), what + " batch 1");
        expect_same_candidates(run_candidates(b, q, 4, 32, 4), run_candidates(a, q, 4, 32, 4), what + " batch 4");
      }
  }
  // A pattern that is not finite: refused at the end of the load, naming the id, value, column.
  const std::int64_t dim = 33;
  const std::vector<std::int64_t> ids = shuffled_ids(n, 1908);
  const struct {
    std::uint16_t pattern;
    const char* value;
  } cases[] = {{0x7C00, "inf"}, {0xFC00, "-inf"}, {0x7E00, "nan"}};
  for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32})
    for (const auto& c : cases) {
      std::vector<std::uint16_t> bits = finite_bits(static_cast<std::size_t>(n * dim), 1909);
      bits[1234 * dim + 3] = c.pattern;
      bits[4321 * dim + 0] = 0x7C00;  // a later one: the first is named
      ShardInput s;
      s.rows = n;
      s.dim = dim;
      s.ids = ids.data();
      s.streamed = true;
      s.stream_format = RowFormat::kFloat16Bits;
      Rig bad = make_rig(s, Metric::kL2, t, limits(4, 32));
      for (std::int64_t r0 = 0; r0 < n; r0 += block) {
        const std::int64_t rows = std::min(block, n - r0);
        std::uint16_t* buf = bad->load_buffer_bits(block);
        std::copy(bits.begin() + r0 * dim, bits.begin() + (r0 + rows) * dim, buf);
        bad->load_rows_bits(r0, rows, buf);
      }
      const std::string msg = error_of([&] { bad->finish_load(); });
      EXPECT_NE(msg.find("corpus row " + std::to_string(ids[1234]) + " value " + c.value + " at column 3 is not finite"),
                std::string::npos)
          << dname(t) << ": " << msg;
      const std::string again = error_of([&] { bad->load_rows_bits(0, 1, bits.data()); });
      EXPECT_NE(again.find("load has finished"), std::string::npos) << again;
      EXPECT_NE(error_of([&] { bad->finish_load(); }).find("load has finished"), std::string::npos);
    }
  ShardInput s;
  s.rows = n;
  s.dim = dim;
  s.streamed = true;
  s.stream_format = RowFormat::kFloat16Bits;
  Rig st = make_rig(s, Metric::kInnerProduct, Dtype::kFloat16, limits(4, 32));
  const std::vector<float> ones(static_cast<std::size_t>(dim), 1.0f);
  const std::string f32_call = error_of([&] { st->load_rows(0, 1, ones.data()); });
  EXPECT_NE(f32_call.find("streams float16 bits"), std::string::npos) << f32_call;
  EXPECT_NE(error_of([&] { st->load_buffer(10); }).find("load_buffer_bits"), std::string::npos);
  s.stream_format = RowFormat::kFloat32;
  Rig sf = make_rig(s, Metric::kInnerProduct, Dtype::kFloat16, limits(4, 32));
  const std::vector<std::uint16_t> one(static_cast<std::size_t>(dim), 0x3C00);
  EXPECT_NE(error_of([&] { sf->load_rows_bits(0, 1, one.data()); }).find("streams float32 rows"), std::string::npos);
}

}  // namespace
}  // namespace shardtopk::test
