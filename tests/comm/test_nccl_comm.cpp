// GPU tests of the NCCL communicator with the CUDA engine, through the public API only.
// Run under `mpirun -np P` with one GPU per rank (P = 1 works: a one-rank communicator). The
// sharded search must give the single-GPU answer bit for bit (DESIGN.md invariant 3), and a
// stalled peer must produce CommError naming the rank within the timeout (invariant 7).
//
// gtest_main does not initialise MPI, so the first test that needs it does (a function-local
// MpiSession, finalised at exit). Every rank runs the same tests in the same order; the tests
// are plain TESTs (no TEST_P, which gtest registers after plain tests) so that definition order
// is run order: the stall test, which aborts communicators on purpose, comes last.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shardtopk/communicator.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "tools/oracle.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/shard_plan.hpp"
#include "shardtopk/types.hpp"
#include "shardtopk/space.hpp"
#include "engine_runner.hpp"
#include "test_support.hpp"

namespace shardtopk::test {
namespace {

MpiSession& mpi() {
  static MpiSession session(nullptr, nullptr);
  return session;
}

/// The host communicator, and this rank's GPU; skip (saying why) when there is no GPU per rank.
struct RankGpu {
  std::unique_ptr<Communicator> host;
  int device = 0;
  std::string skip;  // non-empty: why this test cannot run here
};

RankGpu rank_gpu() {
  RankGpu s;
  mpi();
  s.host = make_mpi_communicator(60.0);
  const int gpus = cuda_device_count();
  if (s.host->local_size() > gpus)
    s.skip = "needs at least " + std::to_string(s.host->local_size()) + " GPUs (one per rank on this node); " +
             std::to_string(gpus) + " visible";
  s.device = gpus > 0 ? s.host->local_rank() % gpus : 0;
  return s;
}

EngineOptions on_device(int device) {
  EngineOptions o;
  o.device = device;
  return o;
}

/// Device buffers of a test: queries [rows, dim] floats, candidates [cands], gathered [P, cands].
struct Buffers {
  std::unique_ptr<Space> space;
  float* queries = nullptr;
  Candidate* local = nullptr;
  Candidate* gathered = nullptr;
  Candidate* merged = nullptr;
};

Buffers buffers(int device, std::size_t query_floats, std::size_t cands, int world) {
  Buffers b;
  b.space = make_cuda_space(device);
  b.queries = static_cast<float*>(b.space->alloc(query_floats * sizeof(float)));
  b.local = static_cast<Candidate*>(b.space->alloc(cands * sizeof(Candidate)));
  b.gathered = static_cast<Candidate*>(b.space->alloc(cands * static_cast<std::size_t>(world) * sizeof(Candidate)));
  b.merged = static_cast<Candidate*>(b.space->alloc(cands * sizeof(Candidate)));
  return b;
}

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<Candidate> device_search(Engine& e, const std::vector<float>& q, int nq, int k) {
  return EngineRunner(e).search(q.data(), nq, k);
}

TEST(NcclComm, BroadcastAndAllgather) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: NCCL test skipped";
  ASSERT_TRUE(built_with_nccl());
  RankGpu s = rank_gpu();
  if (!s.skip.empty()) GTEST_SKIP() << s.skip;
  const int P = s.host->world_size(), r = s.host->rank();
  const int dim = 8, batch = 4, k = 16;
  Buffers b = buffers(s.device, static_cast<std::size_t>(batch) * dim, static_cast<std::size_t>(batch) * k, P);
  Space& sp = *b.space;
  auto nccl = make_nccl_communicator(*s.host, sp.stream(), s.device, 30.0);
  EXPECT_EQ(nccl->name(), "nccl");
  EXPECT_EQ(nccl->rank(), r);
  EXPECT_EQ(nccl->world_size(), P);
  EXPECT_EQ(nccl->local_rank(), s.host->local_rank());
  EXPECT_EQ(nccl->local_size(), s.host->local_size());
  EXPECT_EQ(nccl->space(), MemSpace::kDevice);
  EXPECT_EQ(nccl->timeout_s(), 30.0);

  for (int root = 0; root < P; ++root) {
    std::vector<float> q(static_cast<size_t>(batch) * dim);
    for (size_t i = 0; i < q.size(); ++i) q[i] = r == root ? static_cast<float>(root * 1000 + i) : -1.0f;
    sp.from_host(b.queries, q.data(), q.size() * sizeof(float), true);
    nccl->broadcast(b.queries, q.size() * sizeof(float), root);
    std::vector<float> got(q.size());
    sp.to_host(got.data(), b.queries, got.size() * sizeof(float), true);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], static_cast<float>(root * 1000 + i)) << "broadcast from root " << root << " element " << i;
  }

  const int per = 3 * k;  // a [3, k] candidate block per rank
  std::vector<Candidate> mine(static_cast<size_t>(per));
  for (int i = 0; i < per; ++i) mine[i] = Candidate{static_cast<float>(r * 100 + i), r * 100000LL + i};
  sp.from_host(b.local, mine.data(), mine.size() * sizeof(Candidate), true);
  nccl->allgather(b.local, b.gathered, mine.size() * sizeof(Candidate));
  std::vector<Candidate> all(static_cast<size_t>(P) * per);
  sp.to_host(all.data(), b.gathered, all.size() * sizeof(Candidate), true);
  for (int p = 0; p < P; ++p)
    for (int i = 0; i < per; ++i) {
      ASSERT_EQ(all[p * per + i].id, p * 100000LL + i) << "block of rank " << p;
      ASSERT_EQ(all[p * per + i].score, static_cast<float>(p * 100 + i)) << "block of rank " << p;
    }
  // check()/barrier() go through the host communicator
  EXPECT_NO_THROW(nccl->barrier());
  EXPECT_NO_THROW(nccl->check(true, ""));
}

// The communicator captures a collective in a CUDA graph the first time it sees its (buffers,
// bytes, root) and replays the graph from then on (nccl_comm.cu). Every round here must carry
// that round's data, captured or replayed, for two sizes on the same buffers and, for the
// broadcast, every root.
TEST(NcclComm, RepeatedCollectivesCarryEachRoundsData) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: NCCL test skipped";
  RankGpu s = rank_gpu();
  if (!s.skip.empty()) GTEST_SKIP() << s.skip;
  const int P = s.host->world_size(), r = s.host->rank();
  const int dim = 16, batch = 4, k = 32;
  Buffers b = buffers(s.device, static_cast<std::size_t>(batch) * dim, static_cast<std::size_t>(batch) * k, P);
  Space& sp = *b.space;
  auto nccl = make_nccl_communicator(*s.host, sp.stream(), s.device, 30.0);
  for (int round = 0; round < 6; ++round) {
    for (const int rows : {1, batch}) {
      SCOPED_TRACE("round " + std::to_string(round) + ", " + std::to_string(rows) + " row(s)");
      const int root = round % P;
      std::vector<float> q(static_cast<size_t>(rows) * dim);
      for (size_t i = 0; i < q.size(); ++i)
        q[i] = r == root ? static_cast<float>(round * 10000 + rows * 100 + static_cast<int>(i)) : -1.0f;
      sp.from_host(b.queries, q.data(), q.size() * sizeof(float), true);
      nccl->broadcast_async(b.queries, q.size() * sizeof(float), root);
      const int per = rows * k;
      std::vector<Candidate> mine(static_cast<size_t>(per));
      for (int i = 0; i < per; ++i) mine[i] = Candidate{static_cast<float>(round), r * 1000000LL + round * 1000 + i};
      // queued after the broadcast on the space's stream (from_host then waits for both)
      sp.from_host(b.local, mine.data(), mine.size() * sizeof(Candidate), true);
      nccl->allgather_async(b.local, b.gathered, mine.size() * sizeof(Candidate));
      nccl->wait("test collectives");
      std::vector<float> got(q.size());
      sp.to_host(got.data(), b.queries, got.size() * sizeof(float), true);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], static_cast<float>(round * 10000 + rows * 100 + static_cast<int>(i)))
            << "broadcast from root " << root << ", element " << i;
      std::vector<Candidate> all(static_cast<size_t>(P) * per);
      sp.to_host(all.data(), b.gathered, all.size() * sizeof(Candidate), true);
      for (int p = 0; p < P; ++p)
        for (int i = 0; i < per; ++i) {
          ASSERT_EQ(all[p * per + i].id, p * 1000000LL + round * 1000 + i) << "block of rank " << p;
          ASSERT_EQ(all[p * per + i].score, static_cast<float>(round)) << "block of rank " << p;
        }
    }
  }
}

// Each rank holds a contiguous shard (shard_rows) of the same corpus with shuffled global ids;
// broadcast the queries from rank 0, search, all-gather, merge on the device. The answer must
// equal a single engine over the whole corpus bit for bit, for any rank count, and (small
// integers) the oracle's ids exactly.
TEST(NcclComm, ShardedSearchEqualsOneGpu) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: NCCL test skipped";
  RankGpu s = rank_gpu();
  if (!s.skip.empty()) GTEST_SKIP() << s.skip;
  const int P = s.host->world_size(), r = s.host->rank();
  struct Case {
    Metric m;
    Dtype dt;
    bool ints;
  };
  // inner product on small ints (exact ids, ties on global ids); cosine and l2 on random floats
  // (bit-exact versus one GPU); float16 and bfloat16 storage.
  const Case cases[] = {{Metric::kInnerProduct, Dtype::kFloat32, true},
                        {Metric::kL2, Dtype::kFloat16, true},
                        {Metric::kCosine, Dtype::kFloat32, false},
                        {Metric::kL2, Dtype::kBFloat16, false}};
  const std::int64_t n = 10007, dim = 33;
  const int nq = 6, k = 64;
  for (const Case& c : cases) {
    const std::string what = to_string(c.m) + "/" + to_string(c.dt) + " over " + std::to_string(P) + " rank(s)";
    SCOPED_TRACE(what);
    std::vector<float> corpus = c.ints ? small_ints(static_cast<size_t>(n * dim), 21, -2, 2)
                                       : random_floats(static_cast<size_t>(n * dim), 22);
    if (c.m == Metric::kCosine) normalize_rows(corpus.data(), n, dim, 0, "corpus row");
    std::vector<std::int64_t> ids(static_cast<size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) ids[i] = 50 + 3 * i;
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(23));
    const std::vector<float> q = c.ints ? small_ints(static_cast<size_t>(nq * dim), 24, -2, 2)
                                        : random_floats(static_cast<size_t>(nq * dim), 25);

    const RowRange rr = shard_rows(n, P, r);
    const ShardInput mine{corpus.data() + rr.lo * dim, rr.size(), dim, ids.data() + rr.lo};
    Buffers b = buffers(s.device, static_cast<std::size_t>(8) * dim, static_cast<std::size_t>(8) * 128, P);
    Space& sp = *b.space;
    auto e = make_cuda_engine(mine, c.m, c.dt, EngineLimits{8, 128}, on_device(s.device), sp.stream());
    auto nccl = make_nccl_communicator(*s.host, sp.stream(), s.device, 30.0);
    const std::size_t qbytes = q.size() * sizeof(float), cbytes = sizeof(Candidate) * nq * k;
    if (r == 0) {
      sp.from_host(b.queries, q.data(), qbytes, true);
      e->prepare_queries(b.queries, nq, sp.stream());
    }
    nccl->broadcast(b.queries, qbytes, 0);
    SearchArgs a;
    a.queries = b.queries;
    a.batch = nq;
    a.k = k;
    a.out = b.local;
    a.stream = sp.stream();
    e->search(a);
    // every local candidate comes from this rank's rows
    std::vector<Candidate> local(static_cast<size_t>(nq) * k);
    sp.to_host(local.data(), b.local, cbytes, true);
    for (const Candidate& x : local) {
      if (x.id == kPadId) continue;
      const auto pos = std::find(ids.begin(), ids.end(), x.id) - ids.begin();
      ASSERT_TRUE(pos >= rr.lo && pos < rr.hi) << "rank " << r << " returned id " << x.id << " of row " << pos;
    }
    nccl->allgather(b.local, b.gathered, cbytes);
    sp.merge(b.gathered, P, static_cast<std::int64_t>(nq) * k, nq, k, b.merged);
    std::vector<Candidate> merged(static_cast<size_t>(nq) * k);
    sp.to_host(merged.data(), b.merged, cbytes, true);

    auto whole = make_cuda_engine(ShardInput{corpus.data(), n, dim, ids.data()}, c.m, c.dt, EngineLimits{8, 128},
                                  on_device(s.device));
    const std::vector<Candidate> ref = device_search(*whole, q, nq, k);
    int bad = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      if ((merged[i].id != ref[i].id || bits_of(merged[i].score) != bits_of(ref[i].score)) && ++bad <= 5)
        ADD_FAILURE() << "slot " << i << ": sharded id " << merged[i].id << " score " << merged[i].score
                      << ", one GPU id " << ref[i].id << " score " << ref[i].score;
    EXPECT_EQ(bad, 0) << bad << " slots differ from the one-GPU answer";
    if (c.ints) {
      std::vector<float> stored = corpus;  // small ints are exact in every dtype
      Answer a;
      for (const Candidate& x : merged) {
        a.ids.push_back(x.id);
        a.scores.push_back(reported_score(c.m, x.score));
      }
      expect_exact(c.m, stored, n, ids.data(), q, nq, dim, k, a, what);
    }
    EXPECT_NO_THROW(nccl->barrier());
  }
}

// The last test: aborts communicators on purpose. Rank 1 arrives 6 s late to an all-gather with
// a 2 s timeout; every other rank must throw CommError naming itself, the collective and the
// timeout within about 2 s, and rank 1 must fail too (the peers are gone), never hang. A failed
// communicator refuses further use.
TEST(NcclComm, StalledPeerGivesCommErrorWithinTimeout) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: NCCL test skipped";
  RankGpu s = rank_gpu();
  if (!s.skip.empty()) GTEST_SKIP() << s.skip;
  const int P = s.host->world_size(), r = s.host->rank();
  if (P < 2) GTEST_SKIP() << "needs at least 2 ranks (run under mpirun -np 2): a stalled peer needs a peer";
  Buffers b = buffers(s.device, 4, 4, P);
  Space& sp = *b.space;
  auto nccl = make_nccl_communicator(*s.host, sp.stream(), s.device, 2.0);
  s.host->barrier();
  if (r == 1) std::this_thread::sleep_for(std::chrono::seconds(6));
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg = "<no exception>";
  bool comm_error = false;
  try {
    nccl->allgather(b.local, b.gathered, 4 * sizeof(Candidate));
  } catch (const CommError& ex) {
    comm_error = true;
    msg = ex.what();
  } catch (const std::exception& ex) {
    msg = std::string("not a CommError: ") + ex.what();
  }
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  [rank %d] after %.2f s: %s\n", r, took, msg.c_str());
  if (r == 1 && !comm_error) {
    // The late rank may find its peers' data already posted and complete this one collective;
    // it must then fail on the next one instead of waiting for peers that have gone.
    const auto t1 = std::chrono::steady_clock::now();
    try {
      nccl->allgather(b.local, b.gathered, 4 * sizeof(Candidate));
      msg = "<no exception>";
    } catch (const CommError& ex) {
      comm_error = true;
      msg = ex.what();
    }
    took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::printf("  [rank %d] second collective after %.2f s: %s\n", r, took, msg.c_str());
  }
  EXPECT_TRUE(comm_error) << msg;
  EXPECT_NE(msg.find("rank " + std::to_string(r) + ":"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ncclAllGather"), std::string::npos) << msg;
  EXPECT_LT(took, 2.0 + 3.0) << "the collective must give up within about comm.timeout_s";
  if (r != 1) {
    EXPECT_NE(msg.find("did not complete within 2 s"), std::string::npos) << msg;
    EXPECT_NE(msg.find("stalled or dead"), std::string::npos) << msg;
  }
  const std::string again =
      error_of([&] { nccl->allgather(b.local, b.gathered, 4 * sizeof(Candidate)); });
  EXPECT_NE(again.find("aborted"), std::string::npos) << again;
  // the stream is usable after the abort
  EXPECT_NO_THROW(sp.synchronize());
  s.host->barrier();
}

}  // namespace
}  // namespace shardtopk::test
