#pragma once
// The one scoring arithmetic of the CUDA engine (DESIGN.md invariant 3), shared by the batch-1
// scan and the re-scoring of the batched (tensor-core) path, so that every batch size reports
// the same bits.
//
// A row is stored zero-padded to D_pad = a multiple of V = 16 bytes / sizeof(T) elements and
// read as 16-byte vectors ("chunks"). The 32 lanes of a warp split the chunks: lane l takes
// chunks l, l + 32, l + 64, … in increasing order and keeps ONE float accumulator, advanced by
// one fused multiply-add per element in element order (inner product: fma(q, x, acc); l2:
// d = q − x, fma(d, d, acc)). The 32 partial sums are then added by the xor butterfly
// (offsets 16, 8, 4, 2, 1); a + b = b + a exactly, so every lane ends with the same bits. The
// order depends on D_pad and the dtype only: never on the batch, the tile, the shard or the
// rank. Padding elements are 0 in row and query, so they add fma(0, 0, acc) = acc.
// Explicit _rn intrinsics: the compiler may neither contract nor reorder them.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace shardtopk {
namespace cuda_detail {

constexpr unsigned kFullMask = 0xFFFFFFFFu;

template <typename T>
struct VecTraits {
  static constexpr int kElems = 16 / static_cast<int>(sizeof(T));
};

template <bool kL2>
__device__ __forceinline__ float fma_step(float q, float x, float acc) {
  if (kL2) {
    const float d = __fsub_rn(q, x);
    return __fmaf_rn(d, d, acc);
  }
  return __fmaf_rn(q, x, acc);
}

/// The elements of one 16-byte chunk `raw` of storage type T as floats (exact), in element order.
template <typename T>
__device__ __forceinline__ void chunk_floats(const uint4& raw, float (&x)[VecTraits<T>::kElems]) {
  if constexpr (std::is_same<T, float>::value) {
    x[0] = __uint_as_float(raw.x);
    x[1] = __uint_as_float(raw.y);
    x[2] = __uint_as_float(raw.z);
    x[3] = __uint_as_float(raw.w);
  } else {
    const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f;
      if constexpr (std::is_same<T, __half>::value) {
        __half2 h;
        *reinterpret_cast<unsigned*>(&h) = w[i];
        f = __half22float2(h);
      } else {
        __nv_bfloat162 h;
        *reinterpret_cast<unsigned*>(&h) = w[i];
        f = __bfloat1622float2(h);
      }
      x[2 * i] = f.x;
      x[2 * i + 1] = f.y;
    }
  }
}

/// Advances `acc` over the elements x [V] of one chunk against the matching query floats
/// q [V], in element order.
template <typename T, bool kL2>
__device__ __forceinline__ float chunk_fma(const float (&q)[VecTraits<T>::kElems],
                                           const float (&x)[VecTraits<T>::kElems], float acc) {
#pragma unroll
  for (int e = 0; e < VecTraits<T>::kElems; ++e) acc = fma_step<kL2>(q[e], x[e], acc);
  return acc;
}

/// The query floats matching one chunk of storage type T, in element order: float e at
/// q[(e / 4) · step + 4 · chunk + e % 4] (q 16-byte aligned). The defaults read q[0 .. V), the
/// chunk order; kernels/scan_few keeps its queries in planes of 4 floats (step = nvec · 4).
template <typename T>
__device__ __forceinline__ void query_floats(const float* __restrict__ q, float (&qv)[VecTraits<T>::kElems],
                                             int step = 4, int chunk = 0) {
#pragma unroll
  for (int e4 = 0; e4 < VecTraits<T>::kElems / 4; ++e4) {
    const float4 f = reinterpret_cast<const float4*>(q + e4 * step)[chunk];
    qv[4 * e4] = f.x;
    qv[4 * e4 + 1] = f.y;
    qv[4 * e4 + 2] = f.z;
    qv[4 * e4 + 3] = f.w;
  }
}

/// Advances `acc` over one 16-byte chunk `raw` of storage type T against the matching query
/// floats q[0 .. V) (16-byte aligned), in element order.
template <typename T, bool kL2>
__device__ __forceinline__ float chunk_step(const float* __restrict__ q, const uint4& raw, float acc) {
  constexpr int V = VecTraits<T>::kElems;
  float qv[V], x[V];
  query_floats<T>(q, qv);
  chunk_floats<T>(raw, x);
  return chunk_fma<T, kL2>(qv, x, acc);
}

__device__ __forceinline__ uint4 load_chunk(const void* base, std::int64_t chunk) {
  return __ldg(reinterpret_cast<const uint4*>(base) + chunk);
}

/// L2 eviction-priority policies for load_chunk_hint (PTX ISA, "createpolicy"; sm_80+):
/// evict_first lines are the first the L2 replaces, evict_normal lines the default.
__device__ __forceinline__ std::uint64_t l2_evict_first() {
  std::uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ std::uint64_t l2_evict_normal() {
  std::uint64_t p;
  asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p));
  return p;
}

/// load_chunk with an L2 eviction-priority policy (l2_evict_first / l2_evict_normal).
__device__ __forceinline__ uint4 load_chunk_hint(const void* base, std::int64_t chunk, std::uint64_t pol) {
  uint4 r;
  asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(reinterpret_cast<const uint4*>(base) + chunk), "l"(pol));
  return r;
}

/// The xor butterfly over the warp (offsets 16 … 1); every lane returns the same bits.
__device__ __forceinline__ float warp_tree(float acc) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(kFullMask, acc, o));
  return acc;
}

/// warp_tree for two rows side by side (lanes 0–15 and 16–31, each half's lanes ≥ the row's
/// chunk count holding +0): the step at offset 16 would add such a +0 to every partial, so it
/// is `acc + 0`; the steps 8 … 1 stay within each half. Every lane of a half returns the same
/// bits, equal to warp_tree over that row alone.
__device__ __forceinline__ float half_warp_tree(float acc) {
  acc = __fadd_rn(acc, 0.0f);
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(kFullMask, acc, o));
  return acc;
}

/// The ranking score of query q [nvec · V] (float32, zero-padded) against `row`
/// [nvec chunks of T]: every lane of the warp calls it and gets the same value. l2: the
/// negated squared distance.
template <typename T, bool kL2>
__device__ __forceinline__ float exact_score(const float* __restrict__ q, const T* __restrict__ row, int nvec,
                                             int lane) {
  constexpr int V = VecTraits<T>::kElems;
  float acc = 0.0f;
  for (int v = lane; v < nvec; v += 32) acc = chunk_step<T, kL2>(q + v * V, load_chunk(row, v), acc);
  const float s = warp_tree(acc);
  return kL2 ? -s : s;
}

/// exact_score of R rows at once, each step's loads of all R rows issued before their FMAs (a
/// warp re-scoring scattered rows one at a time waited on a memory round trip per step of each):
/// per row the same steps in the same order and the same warp_tree, so s[r] has the bits of
/// exact_score(q, rows[r], nvec, lane).
template <typename T, bool kL2, int R>
__device__ __forceinline__ void exact_scores(const float* __restrict__ q, const T* const (&rows)[R], int nvec,
                                             int lane, float (&s)[R]) {
  constexpr int V = VecTraits<T>::kElems;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (int v = lane; v < nvec; v += 32) {
    uint4 x[R];
#pragma unroll
    for (int r = 0; r < R; ++r) x[r] = load_chunk(rows[r], v);
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = chunk_step<T, kL2>(q + v * V, x[r], acc[r]);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float t = warp_tree(acc[r]);
    s[r] = kL2 ? -t : t;
  }
}

/// An order-preserving 32-bit key of a ranking score: key(a) > key(b) ⇔ a > b, with −0 and +0
/// mapped to the same key (they are equal under the ordering rule). NaN never reaches here.
__device__ __forceinline__ std::uint32_t score_key(float s) {
  const std::uint32_t b = __float_as_uint(__fadd_rn(s, 0.0f));  // −0 + 0 = +0
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_score(std::uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

}  // namespace cuda_detail
}  // namespace shardtopk
