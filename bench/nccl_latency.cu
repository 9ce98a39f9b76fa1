// bench_nccl_latency: what a batch-1 search's collectives cost between GPUs, host to host.
// One step = [rank 0: query H2D] → ncclBroadcast (bytes_q) → ncclAllGather (bytes_c per rank)
// → [rank 0: candidates D2H], then a wait on the stream, the shape of ShardedIndex's data path.
// Timed for a blocking and a non-blocking NCCL communicator (shardtopk uses non-blocking: its
// initialisation and enqueues can never hang), each issued eagerly and replayed from one CUDA
// graph, with the host waiting by cudaStreamSynchronize or by polling cudaStreamQuery (as the
// communicator's timeout loop does); and the same step staged through pinned host memory with
// MPI collectives (comm.backend mpi). Each: median and p90 of `iters` steps after 30 warm-ups,
// an MPI barrier before each step, rank 0's clock. Output: one JSON line per configuration, then
// a table. docs/PERFORMANCE.md ("Two GPUs") has the numbers.
//
// usage: mpirun -np 2 bench_nccl_latency [iters=300] [bytes_q=3072] [bytes_c=3200]
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void check(bool ok, const char* what, int line) {
  if (ok) return;
  std::fprintf(stderr, "bench_nccl_latency: %s failed (line %d)\n", what, line);
  MPI_Abort(MPI_COMM_WORLD, 1);
}
#define CHECK_OK(x) check((x) == 0, #x, __LINE__)

struct Stats {
  double p50, p90;
};

Stats stats(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return Stats{t[t.size() / 2], t[t.size() * 9 / 10]};
}

void wait_ready(ncclComm_t c) {
  ncclResult_t s = ncclInProgress;
  while (s == ncclInProgress) CHECK_OK(ncclCommGetAsyncError(c, &s));
  check(s == ncclSuccess, "NCCL asynchronous state", __LINE__);
}

void issued(ncclComm_t c, ncclResult_t r) {
  check(r == ncclSuccess || r == ncclInProgress, "NCCL collective", __LINE__);
  if (r == ncclInProgress) wait_ready(c);
}

void wait_stream(cudaStream_t s, ncclComm_t c, bool poll) {
  if (!poll) {
    CHECK_OK(cudaStreamSynchronize(s));
    return;
  }
  cudaError_t q;
  while ((q = cudaStreamQuery(s)) == cudaErrorNotReady) {
    ncclResult_t st;
    CHECK_OK(ncclCommGetAsyncError(c, &st));
  }
  CHECK_OK(q);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int iters = argc > 1 ? std::atoi(argv[1]) : 300;
  const size_t qb = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 3072;  // one 768-d float32 query
  const size_t cb = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 3200;  // 2 rows x 100 candidates x 16 B
  check(iters >= 10 && qb > 0 && cb > 0, "arguments: iters >= 10, bytes > 0", __LINE__);
  int ngpu = 0;
  CHECK_OK(cudaGetDeviceCount(&ngpu));
  check(ngpu > 0, "a GPU per rank", __LINE__);
  CHECK_OK(cudaSetDevice(rank % ngpu));
  cudaStream_t s;
  CHECK_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  char *q, *mine, *all;
  CHECK_OK(cudaMalloc(&q, qb));
  CHECK_OK(cudaMalloc(&mine, cb));
  CHECK_OK(cudaMalloc(&all, cb * world));
  CHECK_OK(cudaMemset(q, 0, qb));
  CHECK_OK(cudaMemset(mine, 0, cb));
  void *hq, *hc, *hall;
  CHECK_OK(cudaMallocHost(&hq, qb));
  CHECK_OK(cudaMallocHost(&hc, cb));
  CHECK_OK(cudaMallocHost(&hall, cb * world));

  struct Row {
    std::string comm, issue, wait;
    Stats t;
  };
  std::vector<Row> rows;
  auto time_steps = [&](const auto& step) {
    std::vector<double> t;
    for (int i = 0; i < iters + 30; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = Clock::now();
      step();
      if (i >= 30) t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    return stats(t);
  };

  for (const int blocking : {1, 0}) {
    ncclUniqueId id;
    if (rank == 0) CHECK_OK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    ncclComm_t c = nullptr;
    issued(c, ncclCommInitRankConfig(&c, world, id, rank, &cfg));
    wait_ready(c);
    auto enqueue = [&] {
      if (rank == 0) CHECK_OK(cudaMemcpyAsync(q, hq, qb, cudaMemcpyHostToDevice, s));
      issued(c, ncclBroadcast(q, q, qb, ncclUint8, 0, c, s));
      issued(c, ncclAllGather(mine, all, cb, ncclUint8, c, s));
      if (rank == 0) CHECK_OK(cudaMemcpyAsync(hall, all, cb * world, cudaMemcpyDeviceToHost, s));
    };
    const std::string name = blocking ? "nccl blocking" : "nccl non-blocking";
    for (const bool poll : {false, true})
      rows.push_back({name, "eager", poll ? "poll" : "sync", time_steps([&] {
                        enqueue();
                        wait_stream(s, c, poll);
                      })});
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    enqueue();
    CHECK_OK(cudaStreamEndCapture(s, &g));
    CHECK_OK(cudaGraphInstantiate(&ge, g, 0));
    for (const bool poll : {false, true})
      rows.push_back({name, "graph", poll ? "poll" : "sync", time_steps([&] {
                        CHECK_OK(cudaGraphLaunch(ge, s));
                        wait_stream(s, c, poll);
                      })});
    CHECK_OK(cudaGraphExecDestroy(ge));
    CHECK_OK(cudaGraphDestroy(g));
    CHECK_OK(cudaStreamSynchronize(s));
    issued(c, ncclCommFinalize(c));
    wait_ready(c);
    CHECK_OK(ncclCommDestroy(c));
  }
  rows.push_back({"mpi staged", "eager", "sync", time_steps([&] {
                    if (rank == 0) {
                      CHECK_OK(cudaMemcpyAsync(hq, q, qb, cudaMemcpyDeviceToHost, s));
                      CHECK_OK(cudaStreamSynchronize(s));
                    }
                    MPI_Bcast(hq, static_cast<int>(qb), MPI_BYTE, 0, MPI_COMM_WORLD);
                    CHECK_OK(cudaMemcpyAsync(q, hq, qb, cudaMemcpyHostToDevice, s));
                    CHECK_OK(cudaMemcpyAsync(hc, mine, cb, cudaMemcpyDeviceToHost, s));
                    CHECK_OK(cudaStreamSynchronize(s));
                    MPI_Allgather(hc, static_cast<int>(cb), MPI_BYTE, hall, static_cast<int>(cb), MPI_BYTE,
                                  MPI_COMM_WORLD);
                    if (rank == 0) {
                      CHECK_OK(cudaMemcpyAsync(all, hall, cb * world, cudaMemcpyHostToDevice, s));
                      CHECK_OK(cudaStreamSynchronize(s));
                    }
                  })});
  if (rank == 0) {
    for (const Row& r : rows)
      std::printf("{\"bench\":\"bench_nccl_latency\",\"ranks\":%d,\"bytes_q\":%zu,\"bytes_c\":%zu,\"comm\":\"%s\","
                  "\"issue\":\"%s\",\"wait\":\"%s\",\"iters\":%d,\"p50_us\":%.1f,\"p90_us\":%.1f}\n",
                  world, qb, cb, r.comm.c_str(), r.issue.c_str(), r.wait.c_str(), iters, r.t.p50, r.t.p90);
    std::printf("# %-18s %-6s %-5s %9s %9s\n", "comm", "issue", "wait", "p50 (us)", "p90 (us)");
    for (const Row& r : rows)
      std::printf("  %-18s %-6s %-5s %9.1f %9.1f\n", r.comm.c_str(), r.issue.c_str(), r.wait.c_str(), r.t.p50,
                  r.t.p90);
  }
  MPI_Finalize();
  return 0;
}
