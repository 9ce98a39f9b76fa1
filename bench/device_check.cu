// The count check on the rank's GPU (built only with SHARDTOPK_WITH_CUDA; see device_check.hpp).
//
// What it computes: for every sample (query, k, returned ids, returned K-th score thr, ε) the
// number of rows g of this rank's range with float64 score s beating thr by more than ε (inner
// product: s > thr + ε; l2, squared distance: s < thr − ε) and g not among the returned ids:
// the host scan of check_samples (bench/pipeline.cpp), row for row. Rows are regenerated with
// generated_value(seed, g, col) and rounded to the storage dtype with __float2half_rn /
// __float2bfloat16_rn; the engine's resident shard is never read.
//
// Why device and host agree bit for bit on generated corpora: every generated value is a multiple
// of 2^-15 below 4 in magnitude, and so is its float16/bfloat16 rounding, of at most 4 (the
// grid step at any magnitude is a power of two: where it is ≤ 2^-15 the value is kept, where it
// is coarser the result is a multiple of it), and every generated query (seed + 1) a multiple of
// 2^-15 below 4. Products are multiples of 2^-30 of at most 16,
// squared differences of at most 64; for D ≤ 2^17 every partial sum is a multiple of 2^-30 of at
// most 2^23, i.e. an integer multiple of 2^-30 no larger than 2^53 of them: exact in float64. So
// FMA contraction and summation order cannot change a score, and the device counts equal the
// host's exactly (--check-device 2 checks it). For other float queries the two sums could differ
// in the last bit, far below ε.
//
// Rounding equivalence: half::to_f16 / to_bf16 (src/core/half.hpp) round to nearest even for
// finite values, including float16 subnormals (2^-15 is one) and carries into the exponent
// (3.99994 → 4); so do __float2half_rn and __float2bfloat16_rn (cvt.rn.f16.f32 / cvt.rn.bf16.f32).
// The argument is also checked at run time before every pass: all 262,141 values the generator
// can produce are rounded on the device and compared bit for bit with half.hpp, and the first and
// last two rows of the range are regenerated on the device and compared with generate_rows +
// half.hpp (stored_rows' arithmetic); a difference throws, naming the value or row.
//
// Kernel shape (for 47.5M rows × D 768 × 100 queries per rank on an H200): a block of 256
// threads owns 64 rows × 128 queries (32 queries when nq ≤ 32); along D it walks chunks of 16
// columns: the chunk's 64 × 16 values are regenerated into shared memory as float64, the
// queries' 16 × 128 (transposed on the host, zero padded, read from L2) beside them, and each
// thread accumulates 4 rows × 8 queries in registers (128 registers, no spills, 2 blocks per SM),
// in column order. Work per rank at 100 queries (padded to 128): 4.7e12 FP64 FMAs, ≈ 0.3 s at
// the H200's ≈ 17e12 FMA/s FP64 vector peak, plus two splitmix64 per generated value on the
// integer pipes; expected 1–3 s, not yet measured.
//
// Device validation (GPU machine; expected outcome in brackets):
//   B="build/bench/bench_search -N 200000 -d 96 -k 10 -B 4 -n 2 -w 1 --check-mode count --check-queries 16"
//   $B -t float16 -m inner_product --check-device 1      [exit 0, "(count-device)", #wrong 0]
//   $B -t float32,float16,bfloat16 -m inner_product --check-device 2   [exit 0, "(count-device+host)"]
//   $B -t float32,float16,bfloat16 -m l2 --check-device 2              [exit 0, "(count-device+host)"]
//   SHARDTOPK_BENCH_CORRUPT=1 $B -t float16 -m inner_product --check-device 1
//                                [exit 1, #wrong > 0: "bad scores 1" (the swapped K-th id)]
//   SHARDTOPK_BENCH_CORRUPT=2 $B -t float16 -m inner_product --check-device 2
//                                [exit 1, "1 rows beat the returned K-th by more than eps" (the true
//                                 best row is missing), never "device and host counts differ"]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/cuda_check.cuh"
#include "core/half.hpp"
#include "device_check.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/generator.hpp"

namespace shardtopk::bench {
namespace {

constexpr int kThreads = 256;   // 16 × 16: threadIdx.x % 16 picks queries, / 16 picks rows
constexpr int kTileRows = 64;   // 16 row groups × 4 rows per thread
constexpr int kChunk = 16;      // columns per shared-memory stage
constexpr int kRowsPerThread = kTileRows / 16;

// Dtype as a template argument (0 float32, 1 float16, 2 bfloat16).
template <int kDtype>
__device__ __forceinline__ float stored_value(float v) {
  if constexpr (kDtype == 1) {
    return __half2float(__float2half_rn(v));
  } else if constexpr (kDtype == 2) {
    return __bfloat162float(__float2bfloat16_rn(v));
  } else {
    return v;
  }
}

template <int kDtype>
__device__ __forceinline__ float stored_generated(std::uint64_t seed, std::int64_t row, std::int64_t col) {
  return stored_value<kDtype>(generated_value(seed, row, col));
}

struct CountParams {
  std::uint64_t seed;
  std::int64_t lo;        // first global row of the range
  std::int64_t n;         // rows in the range
  std::int64_t dim;
  std::int64_t dim_pad;   // dim rounded up to kChunk
  int nq;
  int nq_pad;             // nq rounded up to the block's query tile
  const double* qt;       // [dim_pad, nq_pad]: queries transposed, zero padded
  const int* qs_off;      // [nq + 1]: samples of query slot q are qs_list[qs_off[q] .. qs_off[q + 1])
  const int* qs_list;     // [ns]
  const double* thr;      // [ns]
  const double* eps;      // [ns]
  const std::int64_t* ids;     // sorted returned ids, concatenated
  const std::int64_t* id_off;  // [ns + 1]
  unsigned long long* missed;  // [ns]
};

__device__ __forceinline__ bool contains(const std::int64_t* a, std::int64_t n, std::int64_t x) {
  std::int64_t lo = 0, hi = n;  // lower bound of x in the ascending a[0, n)
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (a[mid] < x) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < n && a[lo] == x;
}

/// Grid-stride over tiles of kTileRows rows of the range; per tile, over query tiles of
/// 16 × kQ queries; per query tile, over D in chunks of kChunk. Scores are float64 sums in
/// column order 0..dim-1 (exact on generated data, see the file comment).
template <int kDtype, bool kL2, int kQ>
__global__ void __launch_bounds__(kThreads, 2) count_missed_kernel(CountParams p) {
  constexpr int kTileQueries = 16 * kQ;
  __shared__ double xs[kChunk][kTileRows];
  __shared__ double qs[kChunk][kTileQueries];
  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
  const std::int64_t tiles = (p.n + kTileRows - 1) / kTileRows;
  for (std::int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::int64_t row0 = tile * kTileRows;
    for (int q0 = 0; q0 < p.nq; q0 += kTileQueries) {
      double acc[kRowsPerThread][kQ];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kQ; ++j) acc[i][j] = 0.0;
      for (std::int64_t k0 = 0; k0 < p.dim_pad; k0 += kChunk) {
        // Consecutive threads take consecutive rows of one column: conflict-free stores.
        for (int e = static_cast<int>(threadIdx.x); e < kChunk * kTileRows; e += kThreads) {
          const int r = e % kTileRows, k = e / kTileRows;
          const std::int64_t row = row0 + r, col = k0 + k;
          xs[k][r] = row < p.n && col < p.dim ? static_cast<double>(stored_generated<kDtype>(p.seed, p.lo + row, col))
                                              : 0.0;
        }
        for (int e = static_cast<int>(threadIdx.x); e < kChunk * kTileQueries; e += kThreads) {
          const int q = e % kTileQueries, k = e / kTileQueries;
          qs[k][q] = p.qt[(k0 + k) * p.nq_pad + q0 + q];
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kChunk; ++k) {
          double x[kRowsPerThread], q[kQ];
#pragma unroll
          for (int i = 0; i < kRowsPerThread; ++i) x[i] = xs[k][ty + 16 * i];
#pragma unroll
          for (int j = 0; j < kQ; ++j) q[j] = qs[k][tx + 16 * j];
#pragma unroll
          for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
            for (int j = 0; j < kQ; ++j) {
              if constexpr (kL2) {
                const double d = q[j] - x[i];
                acc[i][j] = fma(d, d, acc[i][j]);
              } else {
                acc[i][j] = fma(q[j], x[i], acc[i][j]);
              }
            }
        }
        __syncthreads();
      }
      // Misses are rare (a correct answer has none): the atomics cost nothing.
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        const std::int64_t row = row0 + ty + 16 * i;
        if (row >= p.n) continue;
        const std::int64_t g = p.lo + row;
#pragma unroll
        for (int j = 0; j < kQ; ++j) {
          const int q = q0 + tx + 16 * j;
          if (q >= p.nq) continue;
          const double s = acc[i][j];
          for (int t = p.qs_off[q]; t < p.qs_off[q + 1]; ++t) {
            const int si = p.qs_list[t];
            const bool beats = kL2 ? s < p.thr[si] - p.eps[si] : s > p.thr[si] + p.eps[si];
            if (beats && !contains(p.ids + p.id_off[si], p.id_off[si + 1] - p.id_off[si], g))
              atomicAdd(p.missed + si, 1ull);
          }
        }
      }
    }
  }
}

/// out[i] = in[i] rounded to the dtype and back (the rounding self-check).
template <int kDtype>
__global__ void round_kernel(const float* in, float* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = stored_value<kDtype>(in[i]);
}

/// out [rows.size(), dim]: rows first_row + i regenerated and rounded (the rows self-check).
template <int kDtype>
__global__ void rows_kernel(std::uint64_t seed, const std::int64_t* rows, int nrows, std::int64_t dim, float* out) {
  const std::int64_t n = nrows * dim;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = stored_generated<kDtype>(seed, rows[i / dim], i % dim);
}

// ---------------------------------------------------------------- host side

struct DeviceMem {
  void* p = nullptr;
  ~DeviceMem() {
    if (p) (void)cudaFree(p);  // the guard keeps the pass's device current until after this
  }
};

template <typename T>
T* upload(DeviceMem* m, const T* src, size_t count, cudaStream_t s) {
  const size_t bytes = std::max<size_t>(1, count) * sizeof(T);
  CHECK_CUDA(cudaMalloc(&m->p, bytes));
  if (count > 0) CHECK_CUDA(cudaMemcpyAsync(m->p, src, count * sizeof(T), cudaMemcpyHostToDevice, s));
  return static_cast<T*>(m->p);
}

struct Stream {
  cudaStream_t s = nullptr;
  ~Stream() {
    if (s) {
      (void)cudaStreamSynchronize(s);
      (void)cudaStreamDestroy(s);
    }
  }
};

float host_stored(Dtype dt, float v) {
  if (dt == Dtype::kFloat16) return half::from_f16(half::to_f16(v));
  if (dt == Dtype::kBFloat16) return half::from_bf16(half::to_bf16(v));
  return v;
}

int dtype_index(Dtype dt) { return dt == Dtype::kFloat16 ? 1 : dt == Dtype::kBFloat16 ? 2 : 0; }

std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Every value generated_value can return, rounded on the device, against half.hpp.
void check_rounding(Dtype dt, int device, cudaStream_t s) {
  std::vector<float> in;
  in.reserve(2 * 131070 + 1);
  for (std::int64_t v = -131070; v <= 131070; ++v) in.push_back(static_cast<float>(v) * (1.0f / 32768.0f));
  const std::int64_t n = static_cast<std::int64_t>(in.size());
  DeviceMem din, dout;
  float* d_in = upload(&din, in.data(), in.size(), s);
  CHECK_CUDA(cudaMalloc(&dout.p, in.size() * sizeof(float)));
  float* d_out = static_cast<float*>(dout.p);
  const int blocks = static_cast<int>((n + 255) / 256);
  switch (dtype_index(dt)) {
    case 1: round_kernel<1><<<blocks, 256, 0, s>>>(d_in, d_out, n); break;
    case 2: round_kernel<2><<<blocks, 256, 0, s>>>(d_in, d_out, n); break;
    default: round_kernel<0><<<blocks, 256, 0, s>>>(d_in, d_out, n); break;
  }
  CHECK_CUDA_LAUNCH();
  std::vector<float> out(in.size());
  CHECK_CUDA(cudaMemcpyAsync(out.data(), d_out, in.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (size_t i = 0; i < in.size(); ++i) {
    const float h = host_stored(dt, in[i]);
    if (float_bits(h) != float_bits(out[i]))
      throw Error(detail::concat("device count check: ", to_string(dt), " rounding of ", in[i], " differs on device ",
                                 device, ": device ", out[i], " (bits 0x", std::hex, float_bits(out[i]),
                                 "), host half.hpp ", h, " (bits 0x", float_bits(h), ")"));
  }
}

// The first and last rows of the range, regenerated on the device, against generate_rows + half.hpp.
void check_rows(const DeviceCountInput& in, cudaStream_t s) {
  std::vector<std::int64_t> rows;
  for (std::int64_t r : {in.rows.lo, in.rows.lo + 1, in.rows.hi - 2, in.rows.hi - 1})
    if (r >= in.rows.lo && r < in.rows.hi && std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
  if (rows.empty()) return;
  const int nr = static_cast<int>(rows.size());
  const size_t vals = static_cast<size_t>(nr) * static_cast<size_t>(in.dim);
  DeviceMem drows, dout;
  const std::int64_t* d_rows = upload(&drows, rows.data(), rows.size(), s);
  CHECK_CUDA(cudaMalloc(&dout.p, vals * sizeof(float)));
  float* d_out = static_cast<float*>(dout.p);
  const int blocks = static_cast<int>(std::min<size_t>((vals + 255) / 256, 4096));
  switch (dtype_index(in.dtype)) {
    case 1: rows_kernel<1><<<blocks, 256, 0, s>>>(in.seed, d_rows, nr, in.dim, d_out); break;
    case 2: rows_kernel<2><<<blocks, 256, 0, s>>>(in.seed, d_rows, nr, in.dim, d_out); break;
    default: rows_kernel<0><<<blocks, 256, 0, s>>>(in.seed, d_rows, nr, in.dim, d_out); break;
  }
  CHECK_CUDA_LAUNCH();
  std::vector<float> dev(vals), host(static_cast<size_t>(in.dim));
  CHECK_CUDA(cudaMemcpyAsync(dev.data(), d_out, vals * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int r = 0; r < nr; ++r) {
    generate_rows(in.seed, rows[r], 1, in.dim, host.data(), 1);
    for (std::int64_t j = 0; j < in.dim; ++j) {
      const float h = host_stored(in.dtype, host[j]), d = dev[static_cast<size_t>(r) * in.dim + j];
      if (float_bits(h) != float_bits(d))
        throw Error(detail::concat("device count check: regenerated row ", rows[r], " column ", j, " (seed ", in.seed,
                                   ", ", to_string(in.dtype), ") differs on device ", in.device, ": device ", d,
                                   ", host ", h));
    }
  }
}

template <int kDtype, bool kL2, int kQ>
void launch_count(const CountParams& p, int sms, cudaStream_t s) {
  int per_sm = 0;
  CHECK_CUDA(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, count_missed_kernel<kDtype, kL2, kQ>, kThreads, 0));
  const std::int64_t tiles = (p.n + kTileRows - 1) / kTileRows;
  const std::int64_t resident = static_cast<std::int64_t>(std::max(1, per_sm)) * sms;
  const int grid = static_cast<int>(std::max<std::int64_t>(1, std::min(tiles, resident)));
  count_missed_kernel<kDtype, kL2, kQ><<<grid, kThreads, 0, s>>>(p);
  CHECK_CUDA_LAUNCH();
}

template <int kQ>
void launch_count_q(Dtype dt, bool l2, const CountParams& p, int sms, cudaStream_t s) {
  switch (dtype_index(dt) * 2 + (l2 ? 1 : 0)) {
    case 0: launch_count<0, false, kQ>(p, sms, s); break;
    case 1: launch_count<0, true, kQ>(p, sms, s); break;
    case 2: launch_count<1, false, kQ>(p, sms, s); break;
    case 3: launch_count<1, true, kQ>(p, sms, s); break;
    case 4: launch_count<2, false, kQ>(p, sms, s); break;
    default: launch_count<2, true, kQ>(p, sms, s); break;
  }
}

}  // namespace

bool device_count_available(Metric metric, int device, std::string* why) {
  if (metric == Metric::kCosine) {
    *why = "cosine is checked on the host";
    return false;
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    *why = err != cudaSuccess ? detail::concat("no usable GPU (cudaGetDeviceCount: ", cudaGetErrorName(err), ")")
                              : std::string("no GPU visible");
    return false;
  }
  if (device < 0 || device >= count) {
    *why = detail::concat("device ", device, " does not exist (", count, " visible)");
    return false;
  }
  return true;
}

bool device_count_missed(const DeviceCountInput& in, long long* missed, double* seconds) {
  std::string why;
  if (!device_count_available(in.metric, in.device, &why)) return false;
  SHARDTOPK_EXPECTS(in.dim >= 1 && in.nq >= 0 && in.ns >= 0 && in.rows.lo >= 0 && in.rows.hi >= in.rows.lo,
                    "device count check: bad shape dim=", in.dim, " nq=", in.nq, " ns=", in.ns, " rows [",
                    in.rows.lo, ", ", in.rows.hi, ")");
  const auto t0 = std::chrono::steady_clock::now();
  cuda_detail::DeviceGuard guard(in.device);
  Stream stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream.s, cudaStreamNonBlocking));
  cudaStream_t s = stream.s;
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, in.device));

  check_rounding(in.dtype, in.device, s);
  check_rows(in, s);

  // Query tile: 128 queries (one tile at the usual 100 sampled queries), 32 for small pools.
  const int kq = in.nq <= 32 ? 2 : 8;
  const int tile_q = 16 * kq;
  const int nq_pad = std::max(tile_q, (in.nq + tile_q - 1) / tile_q * tile_q);
  const std::int64_t dim_pad = (in.dim + kChunk - 1) / kChunk * kChunk;
  std::vector<double> qt(static_cast<size_t>(dim_pad) * nq_pad, 0.0);
  for (int q = 0; q < in.nq; ++q)
    for (std::int64_t d = 0; d < in.dim; ++d)
      qt[static_cast<size_t>(d) * nq_pad + q] = static_cast<double>(in.queries[static_cast<size_t>(q) * in.dim + d]);
  std::vector<int> qs_off(static_cast<size_t>(in.nq) + 1, 0), qs_list(static_cast<size_t>(in.ns));
  for (int i = 0; i < in.ns; ++i) {
    const int q = in.sample_query[i];
    SHARDTOPK_EXPECTS(q >= 0 && q < in.nq, "device count check: sample ", i, " names query slot ", q, " of ", in.nq);
    ++qs_off[q + 1];
  }
  for (int q = 0; q < in.nq; ++q) qs_off[q + 1] += qs_off[q];
  {
    std::vector<int> fill(qs_off.begin(), qs_off.end() - 1);
    for (int i = 0; i < in.ns; ++i) qs_list[fill[in.sample_query[i]]++] = i;
  }

  DeviceMem m_qt, m_off, m_list, m_thr, m_eps, m_ids, m_idoff, m_missed;
  CountParams p{};
  p.seed = in.seed;
  p.lo = in.rows.lo;
  p.n = in.rows.size();
  p.dim = in.dim;
  p.dim_pad = dim_pad;
  p.nq = in.nq;
  p.nq_pad = nq_pad;
  p.qt = upload(&m_qt, qt.data(), qt.size(), s);
  p.qs_off = upload(&m_off, qs_off.data(), qs_off.size(), s);
  p.qs_list = upload(&m_list, qs_list.data(), qs_list.size(), s);
  p.thr = upload(&m_thr, in.thr, static_cast<size_t>(in.ns), s);
  p.eps = upload(&m_eps, in.eps, static_cast<size_t>(in.ns), s);
  p.ids = upload(&m_ids, in.sorted_ids, static_cast<size_t>(in.ns > 0 ? in.id_off[in.ns] : 0), s);
  p.id_off = upload(&m_idoff, in.id_off, static_cast<size_t>(in.ns) + 1, s);
  CHECK_CUDA(cudaMalloc(&m_missed.p, std::max<size_t>(1, in.ns) * sizeof(unsigned long long)));
  p.missed = static_cast<unsigned long long*>(m_missed.p);
  CHECK_CUDA(cudaMemsetAsync(p.missed, 0, std::max<size_t>(1, in.ns) * sizeof(unsigned long long), s));

  if (p.n > 0 && in.nq > 0 && in.ns > 0) {
    const bool l2 = in.metric == Metric::kL2;
    if (kq == 2) {
      launch_count_q<2>(in.dtype, l2, p, prop.multiProcessorCount, s);
    } else {
      launch_count_q<8>(in.dtype, l2, p, prop.multiProcessorCount, s);
    }
  }
  std::vector<unsigned long long> out(static_cast<size_t>(in.ns));
  if (in.ns > 0)
    CHECK_CUDA(
        cudaMemcpyAsync(out.data(), p.missed, out.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < in.ns; ++i) missed[i] = static_cast<long long>(out[i]);
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return true;
}

}  // namespace shardtopk::bench
