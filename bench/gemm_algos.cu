// bench_gemm_algos: how fast can the batched path's GEMM stream a float16 shard? (docs/PERFORMANCE.md)
// The batched engine multiplies [batch, D] float16 queries by chunks of shard
// rows with cuBLAS (float32 accumulation, float16 output): S[q, i] = Σ_d Q[q, d] · X[r0 + i, d].
// At batch ≤ 64 that GEMM is bound by reading the rows (D · 2 bytes per row), so its rate in
// bytes per second is the number that matters. This program times, over a generated shard of
// `--rows` rows, one chunk shape per batch size: cublasGemmEx's default choice, then every
// algorithm cuBLASLt's heuristic offers for the same problem, each streamed over the whole shard
// chunk after chunk (the rows come from HBM, as in a search). Prints a JSON line per (batch,
// algorithm), then a table. Not a test: it checks nothing but that the calls succeed.
//
// usage: bench_gemm_algos [--rows N] [--dim D] [--batches 8,64,256] [--chunk-bytes B] [--algos A] [--reps R]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

#define CK(call)                                                                                     \
  do {                                                                                               \
    cudaError_t e_ = (call);                                                                         \
    if (e_ != cudaSuccess) {                                                                         \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));    \
      std::exit(1);                                                                                  \
    }                                                                                                \
  } while (0)
#define CB(call)                                                                                     \
  do {                                                                                               \
    cublasStatus_t s_ = (call);                                                                      \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cublasGetStatusString(s_)); \
      std::exit(1);                                                                                  \
    }                                                                                                \
  } while (0)

__global__ void fill_kernel(__half* x, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    z ^= z >> 29;
    x[i] = __float2half(static_cast<float>(static_cast<std::int64_t>(z % 2001) - 1000) * 1e-3f);
  }
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ',')) v.push_back(std::stoi(t));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  long long rows = 10'000'000;
  int dim = 768, reps = 3, max_algos = 16;
  long long chunk_bytes = 24ll << 20;  // the engine's L2 budget per output buffer
  std::string batches = "8,64,256";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--rows") rows = std::stoll(v);
    else if (a == "--dim") dim = std::stoi(v);
    else if (a == "--batches") batches = v;
    else if (a == "--chunk-bytes") chunk_bytes = std::stoll(v);
    else if (a == "--algos") max_algos = std::stoi(v);
    else if (a == "--reps") reps = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  const std::size_t xn = static_cast<std::size_t>(rows) * dim;
  __half *X = nullptr, *Q = nullptr, *S = nullptr;
  CK(cudaMalloc(&X, xn * sizeof(__half)));
  CK(cudaMalloc(&Q, static_cast<std::size_t>(1024) * dim * sizeof(__half)));
  CK(cudaMalloc(&S, 2 * static_cast<std::size_t>(chunk_bytes)));  // room for float32 output at the same R
  fill_kernel<<<4096, 256>>>(X, xn, 1);
  fill_kernel<<<256, 256>>>(Q, static_cast<std::size_t>(1024) * dim, 2);
  CK(cudaDeviceSynchronize());
  const std::size_t ws_bytes = 32u << 20;
  void* ws = nullptr;
  CK(cudaMalloc(&ws, ws_bytes));
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cublasHandle_t h;
  CB(cublasCreate(&h));
  CB(cublasSetStream(h, st));
  CB(cublasSetWorkspace(h, ws, ws_bytes));
  cublasLtHandle_t lt;
  CB(cublasLtCreate(&lt));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const float one = 1.0f, zero = 0.0f;
  std::vector<std::string> table;

  for (int batch : parse_list(batches)) {
    if (batch < 1 || batch > 1024 || chunk_bytes / (2ll * batch) < 1) {
      std::fprintf(stderr, "batch %d: allowed 1 .. 1024 with at least one row per chunk (--chunk-bytes)\n", batch);
      return 2;
    }
    long long R = std::min<long long>(rows, chunk_bytes / (2ll * batch));
    if (R >= 256) R = R / 256 * 256;
    const long long nchunks = rows / R;  // whole chunks only: every timed GEMM has the same shape
    const double bytes = static_cast<double>(nchunks) * R * dim * 2.0;
    const double flop = 2.0 * nchunks * R * static_cast<double>(batch) * dim;
    auto time_stream = [&](auto&& gemm) {
      for (long long c = 0; c < std::min<long long>(nchunks, 3); ++c) gemm(c);  // warm-up
      CK(cudaStreamSynchronize(st));
      float best = 1e30f;
      for (int r = 0; r < reps; ++r) {
        CK(cudaEventRecord(e0, st));
        for (long long c = 0; c < nchunks; ++c) gemm(c);
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        best = std::min(best, ms);
      }
      return best;
    };
    auto report = [&](const std::string& name, float ms) {
      const double gbs = bytes / (ms * 1e-3) / 1e9, tf = flop / (ms * 1e-3) / 1e12;
      std::printf("{\"bench\":\"gemm_algos\",\"batch\":%d,\"rows_per_chunk\":%lld,\"chunks\":%lld,\"dim\":%d,"
                  "\"algo\":\"%s\",\"ms\":%.4f,\"us_per_chunk\":%.2f,\"GBps\":%.1f,\"TFLOPs\":%.1f}\n",
                  batch, R, nchunks, dim, name.c_str(), ms, ms * 1e3 / nchunks, gbs, tf);
      char line[256];
      std::snprintf(line, sizeof line, "%6d %9lld %6lld  %-34s %9.3f %9.2f %8.0f %8.1f", batch, R, nchunks,
                    name.c_str(), ms, ms * 1e3 / nchunks, gbs, tf);
      table.push_back(line);
    };
    // cublasGemmEx, as the engine calls it: S [R, batch] column-major = X[r0 : r0 + R]ᵀ-view · Q.
    for (int out16 = 1; out16 >= 0; --out16) {
      const float ms = time_stream([&](long long c) {
        CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(R), batch, dim, &one,
                        X + static_cast<std::size_t>(c) * R * dim, CUDA_R_16F, dim, Q, CUDA_R_16F, dim, &zero, S,
                        out16 ? CUDA_R_16F : CUDA_R_32F, static_cast<int>(R), CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT));
      });
      report(out16 ? "GemmEx default, f16 out" : "GemmEx default, f32 out", ms);
    }
    // cuBLASLt: every algorithm its heuristic offers for the same problem (f16 out).
    cublasLtMatmulDesc_t op;
    CB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtMatrixLayout_t la, lb, lc;
    CB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, dim, R, dim));
    CB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, dim, batch, dim));
    CB(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16F, R, batch, R));
    cublasLtMatmulPreference_t pref;
    CB(cublasLtMatmulPreferenceCreate(&pref));
    CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    std::vector<cublasLtMatmulHeuristicResult_t> res(static_cast<std::size_t>(max_algos));
    int got = 0;
    CB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, max_algos, res.data(), &got));
    for (int a = 0; a < got; ++a) {
      if (res[a].state != CUBLAS_STATUS_SUCCESS) continue;
      const float ms = time_stream([&](long long c) {
        CB(cublasLtMatmul(lt, op, &one, X + static_cast<std::size_t>(c) * R * dim, la, Q, lb, &zero, S, lc, S, lc,
                          &res[a].algo, ws, ws_bytes, st));
      });
      int id = -1, tile = -1, stages = -1, splitk = -1;
      std::size_t w = 0;
      cublasLtMatmulAlgoConfigGetAttribute(&res[a].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&res[a].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&res[a].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&res[a].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
      char name[96];
      std::snprintf(name, sizeof name, "Lt #%d id=%d tile=%d st=%d sk=%d", a, id, tile, stages, splitk);
      report(name, ms);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
  }
  std::printf("# batch   rows/ch chunks  algorithm                          total ms  us/chunk     GB/s  TFLOP/s\n");
  for (const auto& l : table) std::printf("  %s\n", l.c_str());
  return 0;
}
