// The CPU engine's scan: portable, AVX2 and AVX-512 scoring kernels behind one entry point.
//
// Instruction set: AVX-512 (F/BW/VL) when the CPU has it, else AVX2+FMA+F16C, else portable;
// engine.cpu_isa (portable, avx2, avx512, auto) picks one when the engine is built.
//
// Tiling: a tile is QB queries × RB rows with one 8-lane sum per (query, row) pair.
//  - AVX-512: a zmm accumulator holds two pairs (low half: even row, high half: odd row of a row
//    pair); 4 queries × 4 row pairs (16 accumulators) for batches, 1 query × 8 row pairs for a
//    single query. hsum8 runs on 16 pairs at once with shuffles (the same adds on the same
//    operands as the scalar tree), and one vector compare against each query's selection
//    threshold skips the selection for most rows. The tiles of one slab of rows prefetch the
//    next slab. Thread ranges start on 16-row bounds.
//  - AVX2: 4 × 2 for batches, 1 × 8 for a single query.
#include "engine/cpu/scan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics initialise their "undefined" operand from itself, which
// -Wuninitialized reports at every use; silence that for the header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "engine/cpu/layout.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::cpu_detail {
namespace {

bool have_avx2() {
#if defined(__x86_64__)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
#else
  return false;
#endif
}

bool have_avx512() {
#if defined(__x86_64__)
  static const bool ok = have_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl");
  return ok;
#else
  return false;
#endif
}

// Portable tile: one query × one row (x: the row's first chunk, chunk c at x + 16·c).
template <bool kL2, typename Load>
float score_portable(const float* q, const Load& x_at, std::int64_t dp) {
  float lane[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t d = 0; d < dp; d += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float x = x_at(2 * d + j);
      const float a = q[d + j];
      if (kL2) {
        const float diff = a - x;
        lane[j] = std::fma(diff, diff, lane[j]);
      } else {
        lane[j] = std::fma(a, x, lane[j]);
      }
    }
  }
  return hsum8(lane);
}

#if defined(__x86_64__)
#define SHARDTOPK_AVX2 __attribute__((target("avx2,fma,f16c")))
#define SHARDTOPK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

SHARDTOPK_AVX2 inline __m256 load8(const float* p, Dtype) { return _mm256_loadu_ps(p); }
SHARDTOPK_AVX2 inline __m256 load8(const std::uint16_t* p, Dtype dt) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (dt == Dtype::kFloat16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// AVX2 tile: QB queries × RB rows; x[r] is row r's first chunk (chunk c at x[r] + 16·c).
template <int QB, int RB, bool kL2, typename T>
SHARDTOPK_AVX2 void tile_avx2(const float* const* q, const T* const* x, std::int64_t dp, Dtype dt,
                              float* out /*[QB][RB]*/) {
  __m256 acc[QB][RB];
  for (int i = 0; i < QB; ++i)
    for (int r = 0; r < RB; ++r) acc[i][r] = _mm256_setzero_ps();
  for (std::int64_t d = 0; d < dp; d += kLanes) {
    __m256 xv[RB];
    for (int r = 0; r < RB; ++r) xv[r] = load8(x[r] + 2 * d, dt);
    for (int i = 0; i < QB; ++i) {
      const __m256 qv = _mm256_loadu_ps(q[i] + d);
      for (int r = 0; r < RB; ++r) {
        if (kL2) {
          const __m256 diff = _mm256_sub_ps(qv, xv[r]);
          acc[i][r] = _mm256_fmadd_ps(diff, diff, acc[i][r]);
        } else {
          acc[i][r] = _mm256_fmadd_ps(qv, xv[r], acc[i][r]);
        }
      }
    }
  }
  alignas(32) float lane[kLanes];
  for (int i = 0; i < QB; ++i)
    for (int r = 0; r < RB; ++r) {
      _mm256_store_ps(lane, acc[i][r]);
      out[i * RB + r] = hsum8(lane);
    }
}

// ---- AVX-512

enum class Store { kF32, kF16, kBF16 };

// 16 floats: chunk of a row pair (8 of the even row, then 8 of the odd row).
template <Store S>
SHARDTOPK_AVX512 inline __m512 load16(const void* p) {
  if constexpr (S == Store::kF32) {
    return _mm512_loadu_ps(p);
  } else {
    const __m256i h = _mm256_loadu_si256(static_cast<const __m256i*>(p));
    if constexpr (S == Store::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// The same 8 query floats in both 256-bit halves (a pure load: bits moved, no arithmetic).
SHARDTOPK_AVX512 inline __m512 load_q8x2(const float* q) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(reinterpret_cast<const double*>(q))));
}

// hsum8 of 16 (query, row) pairs at once. a[m] holds two pairs: pair (m, 0) in floats 0..7 and
// pair (m, 1) in floats 8..15. Each step adds the same operands, in the same order, as hsum8:
// (l0+l4, l1+l5, l2+l6, l3+l7), then (t0+t2, t1+t3), then u0+u1. Output float 4c + e is the sum
// of pair (2e + c/2, c%2).
SHARDTOPK_AVX512 __attribute__((always_inline)) inline __m512 reduce8x2(__m512 a0, __m512 a1, __m512 a2, __m512 a3,
                                                                      __m512 a4, __m512 a5, __m512 a6, __m512 a7) {
  constexpr int kLo = _MM_SHUFFLE(2, 0, 2, 0), kHi = _MM_SHUFFLE(3, 1, 3, 1);  // l0..l3 / l4..l7 of 4 pairs
  const __m512 t0 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, kLo), _mm512_shuffle_f32x4(a0, a1, kHi));
  const __m512 t1 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, kLo), _mm512_shuffle_f32x4(a2, a3, kHi));
  const __m512 t2 = _mm512_add_ps(_mm512_shuffle_f32x4(a4, a5, kLo), _mm512_shuffle_f32x4(a4, a5, kHi));
  const __m512 t3 = _mm512_add_ps(_mm512_shuffle_f32x4(a6, a7, kLo), _mm512_shuffle_f32x4(a6, a7, kHi));
  // (t0 + t2, t1 + t3) of 8 pairs
  const __m512 u0 = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 u1 = _mm512_add_ps(_mm512_shuffle_ps(t2, t3, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(t2, t3, _MM_SHUFFLE(3, 2, 3, 2)));
  // u0 + u1 of 16 pairs
  return _mm512_add_ps(_mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Which lanes of reduce8x2's output belong to which query / row of a QB × (2·RB2) tile.
template <int QB, int RB2>
struct LaneMap {
  static constexpr int kAcc = QB * RB2, kGroups = (kAcc + 7) / 8;
  std::uint16_t qmask[kGroups][QB] = {};  // lanes of group g that hold query i
  std::int8_t query[kGroups][16] = {};    // -1: padding accumulator
  std::int8_t row[kGroups][16] = {};      // row within the tile, 0 .. 2·RB2-1
  constexpr LaneMap() {
    for (int g = 0; g < kGroups; ++g)
      for (int s = 0; s < 16; ++s) {
        const int c = s / 4, e = s % 4;
        const int acc = 8 * g + 2 * e + c / 2, half = c % 2;
        if (acc >= kAcc) {
          query[g][s] = -1;
          row[g][s] = 0;
          continue;
        }
        query[g][s] = static_cast<std::int8_t>(acc / RB2);
        row[g][s] = static_cast<std::int8_t>(2 * (acc % RB2) + half);
        qmask[g][acc / RB2] = static_cast<std::uint16_t>(qmask[g][acc / RB2] | (1u << s));
      }
  }
};

// The rare path: lanes of one reduced group that passed the filter are offered.
template <int QB, int RB2>
__attribute__((noinline)) void offer_hits(int g, const float* lanes, unsigned bits, int valid_rows, int b0,
                                          std::int64_t row0, const Selector& sel) {
  static constexpr LaneMap<QB, RB2> map{};
  while (bits) {
    const int lane = __builtin_ctz(bits);
    bits &= bits - 1;
    const int r = map.row[g][lane];
    if (r < valid_rows) sel.offer(b0 + map.query[g][lane], row0 + r, lanes[lane]);
  }
}

// The next slab, shared out in 64-byte lines among the tiles of this one (tile t prefetches
// lines [t·share, (t+1)·share)), per_chunk lines per 8-dimension chunk.
struct Prefetch {
  const char* next;
  std::int64_t lines, share;
  int per_chunk;
};

// AVX-512 tiles: queries [b_begin, b_end) (a multiple of QB of them), QB at a time, each against
// the RB2 row pairs whose block starts at x (rows row0 ..; rows at or past `valid_rows`, counted
// from row0, are padding and never offered). Scores go straight to the selector. Tile t (counting
// from first_tile) prefetches its share of the next slab.
template <int QB, int RB2, bool kL2, Store S, typename T>
SHARDTOPK_AVX512 void tiles512(const float* queries, int b_begin, int b_end, int first_tile, const T* x,
                               std::int64_t dp, int valid_rows, std::int64_t row0, const Selector& sel,
                               const Prefetch& pf) {
  static constexpr LaneMap<QB, RB2> kMap{};
  constexpr int kGroups = LaneMap<QB, RB2>::kGroups;
  constexpr int kCmp = kL2 ? _CMP_LE_OQ : _CMP_GE_OQ;
  const std::int64_t pair_stride = 2 * dp;
  for (int b0 = b_begin, t = first_tile; b0 < b_end; b0 += QB, ++t) {
    const float* q[QB];
    for (int i = 0; i < QB; ++i) q[i] = queries + (b0 + i) * dp;
    const char* pf_at = pf.next + std::min(pf.lines, t * pf.share) * 64;
    const char* pf_end = pf.next + std::min(pf.lines, (t + 1) * pf.share) * 64;
    __m512 acc[kGroups * 8];  // the padding accumulators stay zero
#pragma GCC unroll 32  // unrolled, not turned into a memset that stays behind as a dead 1 KB store
    for (int a = 0; a < kGroups * 8; ++a) acc[a] = _mm512_setzero_ps();
    for (std::int64_t d = 0; d < dp; d += kLanes) {
      for (int n = 0; n < pf.per_chunk && pf_at < pf_end; ++n, pf_at += 64) _mm_prefetch(pf_at, _MM_HINT_T1);
      __m512 xv[RB2];
      for (int j = 0; j < RB2; ++j) xv[j] = load16<S>(x + j * pair_stride + 2 * d);
      for (int i = 0; i < QB; ++i) {
        const __m512 qv = load_q8x2(q[i] + d);
        for (int j = 0; j < RB2; ++j) {
          if (kL2) {
            const __m512 diff = _mm512_sub_ps(qv, xv[j]);
            acc[i * RB2 + j] = _mm512_fmadd_ps(diff, diff, acc[i * RB2 + j]);
          } else {
            acc[i * RB2 + j] = _mm512_fmadd_ps(qv, xv[j], acc[i * RB2 + j]);
          }
        }
      }
    }
    // Per group of 8 accumulators (16 pairs): hsum8, then the filter: a row can only enter a
    // query's selection when score >= its threshold score (ip) or -distance >= it (l2);
    // Selector::offer then decides exactly (ties on the id; NaN never enters).
#pragma GCC unroll 4
    for (int g = 0; g < kGroups; ++g) {
      const __m512* a = acc + 8 * g;
      const __m512 s = reduce8x2(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
      __mmask16 hit = 0;
      for (int i = 0; i < QB; ++i) {
        if (kMap.qmask[g][i] == 0) continue;
        hit |= _mm512_mask_cmp_ps_mask(kMap.qmask[g][i], s, _mm512_set1_ps(sel.raw_threshold(b0 + i)), kCmp);
      }
      if (hit != 0) {
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, s);
        offer_hits<QB, RB2>(g, lanes, hit, valid_rows, b0, row0, sel);
      }
    }
  }
}

// Runtime (qb, rb2) -> instantiation, for rb2 in [1, max_rb2(qb)].
constexpr int max_rb2(int qb) { return qb <= 2 ? 8 : 4; }

template <int QB, bool kL2, Store S, typename T, int RB2 = 1>
SHARDTOPK_AVX512 void tiles512_rb2(int rb2, const float* queries, int b_begin, int b_end, int first_tile, const T* x,
                                   std::int64_t dp, int valid_rows, std::int64_t row0, const Selector& sel,
                                   const Prefetch& pf) {
  if constexpr (RB2 <= max_rb2(QB)) {
    if (rb2 == RB2)
      return tiles512<QB, RB2, kL2, S>(queries, b_begin, b_end, first_tile, x, dp, valid_rows, row0, sel, pf);
    return tiles512_rb2<QB, kL2, S, T, RB2 + 1>(rb2, queries, b_begin, b_end, first_tile, x, dp, valid_rows, row0,
                                                sel, pf);
  }
}

template <bool kL2, Store S, typename T>
SHARDTOPK_AVX512 void tiles512_any(int qb, int rb2, const float* queries, int b_begin, int b_end, int first_tile,
                                   const T* x, std::int64_t dp, int valid_rows, std::int64_t row0, const Selector& sel,
                                   const Prefetch& pf) {
  switch (qb) {
    case 1: return tiles512_rb2<1, kL2, S, T>(rb2, queries, b_begin, b_end, first_tile, x, dp, valid_rows, row0, sel, pf);
    case 2: return tiles512_rb2<2, kL2, S, T>(rb2, queries, b_begin, b_end, first_tile, x, dp, valid_rows, row0, sel, pf);
    case 3: return tiles512_rb2<3, kL2, S, T>(rb2, queries, b_begin, b_end, first_tile, x, dp, valid_rows, row0, sel, pf);
    default: return tiles512_rb2<4, kL2, S, T>(rb2, queries, b_begin, b_end, first_tile, x, dp, valid_rows, row0, sel, pf);
  }
}

// Rows [r0, r1) (r0 even) of the pair-interleaved shard against `batch` padded queries, one slab
// of row pairs at a time: 4 pairs when there are groups of 4 queries (8 rows; the slab stays in
// L1 while every query group passes over it, leftover queries included), else up to 8 (one or
// two queries) or 4 (three). While the tiles of one slab run, they prefetch the next slab into
// L2, each tile an equal share, spread over its chunks.
template <bool kL2, Store S, typename T>
SHARDTOPK_AVX512 void scan512(const T* base, std::int64_t dp, std::int64_t r0, std::int64_t r1, const float* queries,
                              int batch, const Selector& sel) {
  const std::int64_t p0 = r0 / 2, p1 = (r1 + 1) / 2, pair_stride = 2 * dp;
  const int rem = batch % 4, full = batch - rem;
  const int slab = full > 0 ? 4 : max_rb2(rem);
  const int tiles = full / 4 + (rem > 0 ? 1 : 0);
  const std::int64_t chunks = dp / kLanes;
  for (std::int64_t p = p0; p < p1; p += slab) {
    const int rb2 = static_cast<int>(std::min<std::int64_t>(slab, p1 - p));
    const std::int64_t row0 = 2 * p;
    const int valid = static_cast<int>(std::min<std::int64_t>(2 * rb2, r1 - row0));
    const T* x = base + p * pair_stride;
    const std::int64_t next_pairs = std::min<std::int64_t>(slab, p1 - (p + slab));
    const std::int64_t lines = next_pairs > 0 ? (next_pairs * pair_stride * std::int64_t{sizeof(T)} + 63) / 64 : 0;
    const std::int64_t share = (lines + tiles - 1) / tiles;
    const Prefetch pf{reinterpret_cast<const char*>(lines > 0 ? x + slab * pair_stride : x), lines, share,
                      static_cast<int>((share + chunks - 1) / chunks)};
    if (full > 0) {
      if (rb2 == 4) {
        tiles512<4, 4, kL2, S>(queries, 0, full, 0, x, dp, valid, row0, sel, pf);
      } else {
        tiles512_any<kL2, S>(4, rb2, queries, 0, full, 0, x, dp, valid, row0, sel, pf);
      }
    }
    if (rem > 0) tiles512_any<kL2, S>(rem, rb2, queries, full, batch, full / 4, x, dp, valid, row0, sel, pf);
  }
}

template <bool kL2, typename T>
void scan_avx2(const ScanInput& in, const T* base, std::int64_t r0, std::int64_t r1, const Selector& sel) {
  const std::int64_t dp = in.dp;
  const Dtype dt = in.dtype;
  const int batch = in.batch;
  float sc[8];
  const float* qp[4];
  const T* xp[8];
  if (batch == 1) {
    qp[0] = in.queries;
    std::int64_t r = r0;
    for (; r + 8 <= r1; r += 8) {
      for (int j = 0; j < 8; ++j) xp[j] = base + row_offset(r + j, dp);
      tile_avx2<1, 8, kL2>(qp, xp, dp, dt, sc);
      for (int j = 0; j < 8; ++j) sel.offer(0, r + j, sc[j]);
    }
    for (; r < r1; ++r) {
      xp[0] = base + row_offset(r, dp);
      tile_avx2<1, 1, kL2>(qp, xp, dp, dt, sc);
      sel.offer(0, r, sc[0]);
    }
    return;
  }
  std::int64_t r = r0;
  for (; r < r1; r += 2) {
    const int rb = r + 2 <= r1 ? 2 : 1;
    for (int j = 0; j < rb; ++j) xp[j] = base + row_offset(r + j, dp);
    int b = 0;
    for (; b + 4 <= batch; b += 4) {
      for (int i = 0; i < 4; ++i) qp[i] = in.queries + (b + i) * dp;
      if (rb == 2) tile_avx2<4, 2, kL2>(qp, xp, dp, dt, sc);
      else tile_avx2<4, 1, kL2>(qp, xp, dp, dt, sc);
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < rb; ++j) sel.offer(b + i, r + j, sc[i * rb + j]);
    }
    for (; b < batch; ++b) {
      qp[0] = in.queries + b * dp;
      if (rb == 2) tile_avx2<1, 2, kL2>(qp, xp, dp, dt, sc);
      else tile_avx2<1, 1, kL2>(qp, xp, dp, dt, sc);
      for (int j = 0; j < rb; ++j) sel.offer(b, r + j, sc[j]);
    }
  }
}
#endif

template <bool kL2, typename T>
void scan_portable(const ScanInput& in, const T* base, std::int64_t r0, std::int64_t r1, const Selector& sel) {
  const std::int64_t dp = in.dp;
  const Dtype dt = in.dtype;
  const int batch = in.batch;
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* x = base + row_offset(r, dp);
    auto x_at = [x, dt](std::int64_t i) -> float {
      if constexpr (std::is_same_v<T, float>) {
        (void)dt;
        return x[i];
      } else {
        return load1(x + i, dt);
      }
    };
    for (int b = 0; b < batch; ++b)
      sel.offer(b, r, score_portable<kL2>(in.queries + b * dp, x_at, dp));
  }
}

template <typename T>
void scan_storage(const ScanInput& in, const T* base, std::int64_t r0, std::int64_t r1, const Selector& sel) {
  const bool l2 = in.l2;
#if defined(__x86_64__)
  if (in.isa == Isa::kAvx512) {
    const float* q = in.queries;
    const std::int64_t dp = in.dp;
    const int batch = in.batch;
    if constexpr (std::is_same_v<T, float>) {
      if (l2) return scan512<true, Store::kF32>(base, dp, r0, r1, q, batch, sel);
      return scan512<false, Store::kF32>(base, dp, r0, r1, q, batch, sel);
    } else if (in.dtype == Dtype::kFloat16) {
      if (l2) return scan512<true, Store::kF16>(base, dp, r0, r1, q, batch, sel);
      return scan512<false, Store::kF16>(base, dp, r0, r1, q, batch, sel);
    } else {
      if (l2) return scan512<true, Store::kBF16>(base, dp, r0, r1, q, batch, sel);
      return scan512<false, Store::kBF16>(base, dp, r0, r1, q, batch, sel);
    }
  }
  if (in.isa == Isa::kAvx2) {
    if (l2) return scan_avx2<true>(in, base, r0, r1, sel);
    return scan_avx2<false>(in, base, r0, r1, sel);
  }
#endif
  if (l2) return scan_portable<true>(in, base, r0, r1, sel);
  scan_portable<false>(in, base, r0, r1, sel);
}

}  // namespace

const char* isa_name(Isa i) {
  switch (i) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "portable";
  }
}

Isa choose_isa(CpuIsa want) {
  switch (want) {
    case CpuIsa::kAuto: return have_avx512() ? Isa::kAvx512 : have_avx2() ? Isa::kAvx2 : Isa::kPortable;
    case CpuIsa::kPortable: return Isa::kPortable;
    case CpuIsa::kAvx2:
      SHARDTOPK_EXPECTS(have_avx2(), "engine.cpu_isa avx2: this CPU lacks AVX2/FMA/F16C (use portable or auto)");
      return Isa::kAvx2;
    case CpuIsa::kAvx512:
      SHARDTOPK_EXPECTS(have_avx512(), "engine.cpu_isa avx512: this CPU lacks AVX-512 F/BW/VL (use avx2, portable or auto)");
      return Isa::kAvx512;
  }
  throw Error("engine.cpu_isa: unknown value");
}

#if defined(__x86_64__)
namespace {
__attribute__((target("avx,f16c"))) void store_f16_chunks(const float* row, std::int64_t full, std::uint16_t* dst) {
  for (std::int64_t d = 0; d < full; d += kLanes)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * d),
                     _mm256_cvtps_ph(_mm256_loadu_ps(row + d), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
}  // namespace
#endif

void store_f16_row(const float* row, std::int64_t dim, std::uint16_t* dst) {
  std::int64_t d = 0;
#if defined(__x86_64__)
  static const bool f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  if (f16c) {
    d = dim / kLanes * kLanes;
    store_f16_chunks(row, d, dst);
  }
#endif
  for (; d < dim; ++d) dst[(d / kLanes) * 2 * kLanes + d % kLanes] = half::to_f16(row[d]);
}

void scan_rows(const ScanInput& in, std::int64_t r0, std::int64_t r1, const Selector& sel) {
  if (r0 >= r1) return;
  if (in.dtype == Dtype::kFloat32) {
    scan_storage(in, in.f32, r0, r1, sel);
  } else {
    scan_storage(in, in.u16, r0, r1, sel);
  }
}

}  // namespace shardtopk::cpu_detail
