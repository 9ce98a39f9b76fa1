// The data path of a GPU search, end to end through ShardedIndex: a host query moves D×4 bytes
// in and K×(8+4) bytes out per query (plus one 16-byte status per rank when P > 1); a query
// already on the device moves nothing in; both give the same bits. Registered in CTest under
// mpiexec -n 1 and -n 2 (label gpu, one GPU per rank); skips visibly without one. Built only with
// CUDA (it allocates the caller's device queries with the CUDA runtime, as a caller would).
#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "shardtopk/corpus_io.hpp"
#include "index/index_impl.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/ingest.hpp"
#include "tools/oracle.hpp"
#include "test_support.hpp"

namespace shardtopk::test {
namespace {

using ::testing::HasSubstr;

constexpr std::int64_t kN = 1000, kDim = 33;
constexpr int kB = 3, kK = 10;

struct Fixture {
  std::string path;
  std::vector<float> corpus, queries;
};

Fixture make_fixture() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Fixture f;
  f.corpus = small_ints(static_cast<size_t>(kN * kDim), 11);
  f.queries = small_ints(static_cast<size_t>(kB * kDim), 12);
  char name[256] = {0};
  if (rank == 0) {
    const char* tmp = std::getenv("TMPDIR");
    std::snprintf(name, sizeof name, "%s/shardtopk-devapi-%d.h5", tmp && *tmp ? tmp : "/tmp",
                  static_cast<int>(::getpid()));
    H5Writer w(name);
    w.write_f32("train", f.corpus.data(), kN, kDim);
    w.close();
  }
  MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
  f.path = name;
  return f;
}

Config gpu_config(const std::string& path) {
  Config c;
  c.source = "test";
  c.corpus.path = path;
  c.search.metric = Metric::kInnerProduct;
  c.search.k_max = 64;
  c.search.batch_max = 8;
  c.engine.backend = EngineBackend::kCuda;
  c.comm.backend = CommBackend::kNccl;  // the device data path this test counts bytes of
  c.comm.timeout_s = 60;
  return c;
}

TEST(DeviceApi, HostAndDeviceQueriesMoveOnlyWhatTheyMust) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU visible: device API test skipped";
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (cuda_device_count() < world) GTEST_SKIP() << "needs at least " << world << " GPUs (one per rank)";
  const Fixture f = make_fixture();
  auto idx_holder = load_index(gpu_config(f.path), false);
  ShardedIndex& idx = *idx_holder;
  const IndexInfo info = idx.info();
  ASSERT_EQ(info.engine.name, "cuda");
  ASSERT_EQ(info.comm, "nccl");
  const bool root = info.rank == 0;
  // With P > 1 the answer comes back with every rank's 16-byte status (SearchProtocol::run_data_path).
  const std::uint64_t status_bytes = info.world_size > 1 ? 16u * static_cast<std::uint64_t>(info.world_size) : 0u;
  // The device-pointer query of rank 0: admitted (k, batch), its values checked on the device.
  const auto search_device = [&](const float* d_q, std::int64_t* ids, float* scores) {
    idx.search(idx.admit_device(d_q, nullptr, kB, kK), ids, scores);
  };

  // host query
  std::vector<std::int64_t> ids_h(kB * kK, -1), ids_d(kB * kK, -2);
  std::vector<float> sc_h(kB * kK, NAN), sc_d(kB * kK, NAN);
  IndexAccess::reset_transfer_counters(idx);
  idx.search(root ? f.queries.data() : nullptr, kB, kK, root ? ids_h.data() : nullptr, root ? sc_h.data() : nullptr);
  TransferCounters t = IndexAccess::transfer_counters(idx);
  if (root) {
    EXPECT_EQ(t.host_to_device, static_cast<std::uint64_t>(kB * kDim * 4)) << "host query: D×4 bytes in per query";
    // K×(8+4) bytes out per query, plus the ranks' statuses when P > 1
    EXPECT_EQ(t.device_to_host, static_cast<std::uint64_t>(kB * kK * (8 + 4)) + status_bytes)
        << "K×(8+4) bytes out per query";
  } else {
    EXPECT_EQ(t.host_to_device, 0u);
    EXPECT_EQ(t.device_to_host, 0u);
  }

  // device-pointer query: the caller's embeddings already on the GPU
  float* d_q = nullptr;
  if (root) {
    ASSERT_EQ(cudaMalloc(&d_q, sizeof(float) * kB * kDim), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_q, f.queries.data(), sizeof(float) * kB * kDim, cudaMemcpyHostToDevice), cudaSuccess);
  }
  IndexAccess::reset_transfer_counters(idx);
  if (root) {
    search_device(d_q, ids_d.data(), sc_d.data());
  } else {
    idx.search(nullptr, kB, kK, nullptr, nullptr);  // other ranks join the collective as usual
  }
  t = IndexAccess::transfer_counters(idx);
  if (root) {
    EXPECT_EQ(t.host_to_device, 0u) << "a device-pointer query moves nothing in";
    EXPECT_EQ(t.device_to_host, static_cast<std::uint64_t>(kB * kK * (8 + 4)) + status_bytes);
    EXPECT_EQ(ids_d, ids_h);
    for (int i = 0; i < kB * kK; ++i) EXPECT_EQ(std::memcmp(&sc_d[i], &sc_h[i], 4), 0) << "slot " << i;
    // exact ids on small integers: the float64 oracle agrees
    std::vector<std::int64_t> tid;
    std::vector<double> tsc;
    oracle::topk(Metric::kInnerProduct, f.corpus.data(), kN, nullptr, f.queries.data(), kB, kDim, kK, &tid, &tsc, 1);
    EXPECT_EQ(ids_h, tid);
  }

  // a bad device query is rejected by rank 0, naming it; the index keeps serving
  if (root) {
    const float nan = NAN;
    ASSERT_EQ(cudaMemcpy(d_q + kDim + 5, &nan, sizeof nan, cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::string msg = "<no exception>";
  try {
    if (root) search_device(d_q, ids_d.data(), sc_d.data());
    else idx.search(nullptr, kB, kK, nullptr, nullptr);
  } catch (const Error& e) {
    msg = e.what();
  }
  if (root) EXPECT_THAT(msg, HasSubstr("query 1")) << msg;
  else EXPECT_THAT(msg, HasSubstr("rank 0 rejected the batch")) << msg;
  std::fill(ids_d.begin(), ids_d.end(), -3);
  if (root) {
    ASSERT_EQ(cudaMemcpy(d_q, f.queries.data(), sizeof(float) * kB * kDim, cudaMemcpyHostToDevice), cudaSuccess);
    search_device(d_q, ids_d.data(), sc_d.data());
    EXPECT_EQ(ids_d, ids_h);
    cudaFree(d_q);
  } else {
    idx.search(nullptr, kB, kK, nullptr, nullptr);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (root) std::remove(f.path.c_str());
}

}  // namespace
}  // namespace shardtopk::test

int main(int argc, char** argv) {
  shardtopk::MpiSession mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
