// CPU engine: resident shard in float32/float16/bfloat16, blocked scoring with a fixed
// reduction order, and a per-thread top-k selection merged with the ordering rule.
//
// Determinism (DESIGN.md invariant 3): every (query, row) score is computed by the same
// arithmetic whatever the batch, tile shape, thread count, shard or instruction set: D is
// zero-padded to a multiple of 8 (dp); lane j of an 8-wide accumulator sums dimensions
// d ≡ j (mod 8) in increasing order with fused multiply-add; the 8 lanes are then added by one
// fixed tree (hsum8). The AVX-512 and AVX2 kernels and the portable fallback all follow exactly
// this order, so they agree bit for bit (and with the CUDA engine, which mirrors it).
//
// Layout: rows are stored pair-interleaved, 8 dimensions at a time: element (r, d) lives at
// (r/2)·2·dp + (d/8)·16 + (r%2)·8 + d%8 (an odd row count gets a zero padding row, never
// offered). One 512-bit load holds the same 8-dimension chunk of two rows; a 256-bit load holds
// one row's chunk at row_offset(r) + 16·chunk, which is what the AVX2 and portable paths read.
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
//
// Selection: per query, a buffer compacted with nth_element behind a threshold (see Selector);
// the result is the exact top K under the ordering rule, independent of the order rows arrive.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics initialise their "undefined" operand from itself, which
// -Wuninitialized reports at every use; silence that for the header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "core/half.hpp"
#include "core/log.hpp"
#include "engine/search_args.hpp"
#include "engine/slots.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/generator.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/merge.hpp"
#include "engine/cpu/scan_spans.hpp"

namespace shardtopk {
namespace {

constexpr int kLanes = 8;

inline std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

// ---------------------------------------------------------------- pair-interleaved layout

// Offset of row r's first 8-dimension chunk; chunk c of the row is at row_offset(r) + 16·c.
inline std::int64_t row_offset(std::int64_t r, std::int64_t dp) { return (r / 2) * 2 * dp + (r % 2) * kLanes; }
inline std::int64_t elem_offset(std::int64_t r, std::int64_t d, std::int64_t dp) {
  return row_offset(r, dp) + (d / kLanes) * 2 * kLanes + d % kLanes;
}

// ---------------------------------------------------------------- fixed-order lane arithmetic

inline float hsum8(const float* l) {
  // The one horizontal-sum tree. Changing it changes every score: keep every path equal
  // (reduce8x2 below is the same tree on 16 pairs at once).
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// Storage element -> float (portable).
inline float load1(const float* p) { return *p; }
inline float load1(const std::uint16_t* p, Dtype dt) {
  return dt == Dtype::kFloat16 ? half::from_f16(*p) : half::from_bf16(*p);
}

// ---------------------------------------------------------------- instruction set

enum class Isa { kPortable, kAvx2, kAvx512 };

const char* isa_name(Isa i) {
  switch (i) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "portable";
  }
}

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

// The best the CPU has, or what engine.cpu_isa asks for (an Error when the CPU lacks it).
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

// ---------------------------------------------------------------- worker pool

class Pool {
 public:
  explicit Pool(int threads) : n_(std::max(1, threads)) {
    for (int t = 1; t < n_; ++t) workers_.emplace_back([this, t] { loop(t); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      ++gen_;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return n_; }
  // Runs fn(t) for t in [0, n) and waits; the caller runs t = 0. `fn` must not throw.
  void run(const std::function<void(int)>& fn) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      pending_ = n_ - 1;
      ++gen_;
    }
    cv_.notify_all();
    fn(0);
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return pending_ == 0; });
    fn_ = nullptr;
  }

 private:
  void loop(int t) {
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* fn;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return gen_ != seen; });
        seen = gen_;
        if (stop_) return;
        fn = fn_;
      }
      (*fn)(t);
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (--pending_ == 0) done_cv_.notify_one();
      }
    }
  }
  int n_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* fn_ = nullptr;
  int pending_ = 0;
  std::uint64_t gen_ = 0;
  bool stop_ = false;
};

// ---------------------------------------------------------------- top-k selection

// Per query: a buffer of candidates and a threshold, the K-th best candidate as of the last
// compaction (padding until K were seen). A candidate enters only when better than the
// threshold, which no candidate of the final top K can fail (K seen ones are better than it), so
// the result is exactly the top K of all offered rows under the ordering rule, whatever the
// order rows come in. When the buffer is full, nth_element keeps the best K and raises the
// threshold: a few cycles per entering row instead of a heap sift-down.
// Buffer slots per query for K: compaction every cap - K entries, each an O(cap) nth_element.
constexpr int selection_cap(int k) { return 2 * k + 32; }

struct QueryState {
  Candidate thr;
  int n;
};

struct Selector {               // one per thread
  Candidate* buf;               // [batch][stride]
  QueryState* st;               // [batch]
  std::int64_t stride;          // slots per query, >= cap
  int k, cap;                   // cap: compact when this many are buffered (> k)
  const std::int64_t* ids;      // the shard's global ids
  bool l2;                      // scores are distances: rank by -distance
  const std::uint32_t* const* masks = nullptr;  // [batch]: query b's row mask, or nullptr (every row)

  static bool better_c(const Candidate& x, const Candidate& y) { return better(x, y); }
  void reset(int batch) const {
    for (int b = 0; b < batch; ++b) st[b] = QueryState{pad_candidate(), 0};
  }
  // The current threshold's score in the units of the raw score (distance for l2).
  float raw_threshold(int b) const { return l2 ? -st[b].thr.score : st[b].thr.score; }
  void offer(int b, std::int64_t row, float s) const {
    if (masks && masks[b] && ((masks[b][row >> 5] >> (row & 31)) & 1u) == 0u) return;  // filtered out
    const Candidate c{l2 ? -s : s, ids[row]};
    QueryState& q = st[b];
    if (!better(c, q.thr)) return;
    Candidate* a = buf + b * stride;
    a[q.n++] = c;
    if (q.n == cap) {
      std::nth_element(a, a + (k - 1), a + q.n, better_c);
      q.n = k;
      q.thr = a[k - 1];
    }
  }
  // The best K of query b, best first, padded, into out[k].
  void finish(int b, Candidate* out) const {
    Candidate* a = buf + b * stride;
    int n = st[b].n;
    if (n > k) {
      std::nth_element(a, a + (k - 1), a + n, better_c);
      n = k;
    }
    std::sort(a, a + n, better_c);
    std::copy(a, a + n, out);
    std::fill(out + n, out + k, pad_candidate());
  }
};

// ---------------------------------------------------------------- scoring kernels

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
#endif

// ---------------------------------------------------------------- buffer plan

// Every buffer the engine allocates at start-up, sized from the limits (the constructor and
// cpu_engine_host_bytes() both use this list, so `plan` shows what the engine will hold).
// Saturating arithmetic: absurd limits give UINT64_MAX, never a wrapped small number.
struct CpuBuffer {
  const char* name;
  std::string shape;
  std::uint64_t bytes;
};

std::uint64_t mul_sat(std::uint64_t a, std::uint64_t b) {
  return (a != 0 && b > UINT64_MAX / a) ? UINT64_MAX : a * b;
}
std::uint64_t mul_sat(std::initializer_list<std::uint64_t> xs) {
  std::uint64_t p = 1;
  for (std::uint64_t x : xs) p = mul_sat(p, x);
  return p;
}

int pool_threads(int threads) {
  return threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::vector<CpuBuffer> cpu_buffers(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& lim,
                                   int threads) {
  const std::uint64_t dp = static_cast<std::uint64_t>(round_up(std::max<std::int64_t>(dim, 1), kLanes));
  const std::uint64_t r2 = static_cast<std::uint64_t>(round_up(std::max<std::int64_t>(rows, 0), 2));
  const std::uint64_t b = static_cast<std::uint64_t>(std::max(lim.batch_max, 0));
  const std::uint64_t k = static_cast<std::uint64_t>(std::max(lim.k_max, 0));
  const std::uint64_t t = static_cast<std::uint64_t>(pool_threads(threads));
  const std::uint64_t cand = sizeof(Candidate);
  const std::uint64_t cap = static_cast<std::uint64_t>(selection_cap(0)) + 2 * k;  // selection_cap(k_max)
  const std::string bk = "[batch_max=" + std::to_string(b) + ", k_max=" + std::to_string(k) + "]";
  return {
      {"shard", "[" + std::to_string(rows) + " rows, " + std::to_string(dp) + " padded dims] " + to_string(dtype),
       mul_sat({r2, dp, static_cast<std::uint64_t>(dtype == Dtype::kFloat32 ? 4 : 2)})},
      {"ids", "[" + std::to_string(rows) + "] int64", mul_sat(static_cast<std::uint64_t>(std::max<std::int64_t>(rows, 0)), 8)},
      {"padded queries", "[batch_max, padded dim] float32", mul_sat({b, dp, 4})},
      {"per-thread lists", "[threads=" + std::to_string(t) + "] x " + bk + " x 16 B", mul_sat({t, b, k, cand})},
      {"selection", "[threads=" + std::to_string(t) + ", batch_max, 2*k_max+32] x 16 B", mul_sat({t, b, cap, cand})},
      {"selection state", "[threads, batch_max]", mul_sat({t, b, static_cast<std::uint64_t>(sizeof(QueryState))})},
      {"filter masks", "[max_filters=" + std::to_string(lim.max_filters) + ", rows/32] x 4 B",
       mul_sat({static_cast<std::uint64_t>(std::max(lim.max_filters, 0)),
                static_cast<std::uint64_t>(filter_mask_words(std::max<std::int64_t>(rows, 0))), 4})},
      {"filter block flags", "[max_filters=" + std::to_string(lim.max_filters) + ", rows/1024] x 1 B",
       mul_sat(static_cast<std::uint64_t>(std::max(lim.max_filters, 0)),
               static_cast<std::uint64_t>((std::max<std::int64_t>(rows, 0) + kFilterBlockRows - 1) / kFilterBlockRows))},
      {"live mask", "[rows/32] x 4 B",
       mul_sat(static_cast<std::uint64_t>(filter_mask_words(std::max<std::int64_t>(rows, 0))), 4)},
  };
}

std::uint64_t total_bytes(const std::vector<CpuBuffer>& bufs) {
  std::uint64_t s = 0;
  for (const auto& b : bufs) s = (UINT64_MAX - s < b.bytes) ? UINT64_MAX : s + b.bytes;
  return s;
}

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : UINT64_MAX;
}

std::string human_bytes(std::uint64_t n) {
  if (n == UINT64_MAX) return "more than 2^64 bytes";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%llu bytes (%.1f %s)", static_cast<unsigned long long>(n), v, units[u]);
  return buf;
}

// Refuse, before allocating anything, buffers that cannot fit this machine's memory: name the
// largest buffer, its shape and bytes, and the total (what `plan` shows as engine_bytes).
void check_buffers_fit(const std::vector<CpuBuffer>& bufs, const EngineLimits& lim) {
  const std::uint64_t total = total_bytes(bufs), phys = physical_memory_bytes();
  if (total <= phys) return;
  const CpuBuffer& big = *std::max_element(bufs.begin(), bufs.end(),
                                           [](const CpuBuffer& a, const CpuBuffer& b) { return a.bytes < b.bytes; });
  throw Error(detail::concat("cpu engine: search.batch_max=", lim.batch_max, " and search.k_max=", lim.k_max,
                             " need ", human_bytes(big.bytes), " for the ", big.name, " buffer ", big.shape, ", ",
                             human_bytes(total), " in all (`shardtopk plan` shows it as engine_bytes), but this "
                             "machine has ", human_bytes(phys), " of memory; lower search.batch_max or search.k_max"));
}

// ---------------------------------------------------------------- engine

class CpuEngine final : public Engine {
 public:
  CpuEngine(const ShardInput& s, Metric metric, Dtype dtype, const EngineLimits& lim, const EngineOptions& opt)
      : metric_(metric), dtype_(dtype), isa_(choose_isa(opt.cpu_isa)), rows_(s.rows),
        cap_(s.capacity > 0 ? s.capacity : s.rows), dim_(s.dim),
        dp_(round_up(std::max<std::int64_t>(s.dim, 1), kLanes)), limits_(lim), pool_(pool_threads(opt.threads)) {
    SHARDTOPK_EXPECTS(s.dim >= 1, "cpu engine: dimension must be >= 1");
    SHARDTOPK_EXPECTS(lim.batch_max >= 1 && lim.k_max >= 1, "cpu engine: bad limits (batch_max ", lim.batch_max,
                      ", k_max ", lim.k_max, ")");
    SHARDTOPK_EXPECTS(s.capacity == 0 || s.capacity >= s.rows, "cpu engine: capacity ", s.capacity,
                      " is less than the shard's ", s.rows, " rows");
    check_buffers_fit(cpu_buffers(cap_, s.dim, dtype, lim, pool_.size()), lim);
    SHARDTOPK_EXPECTS(s.rows >= 0 && (s.generated || s.streamed || s.rows == 0 || s.data != nullptr),
                      "cpu engine: shard has no data (data == nullptr and not generated or streamed)");
    ids_ = engine_detail::slot_ids(s, cap_);
    const size_t n = static_cast<size_t>(round_up(cap_, 2) * dp_);  // an odd count gets a zero row
    if (dtype_ == Dtype::kFloat32) {
      f32_.assign(n, 0.0f);
    } else {
      u16_.assign(n, 0);
    }
    if (s.streamed) {
      streaming_ = true;
    } else if (s.generated) {
      // Materialised in blocks (bounded host memory beyond the shard itself), normalised for
      // cosine with normalize_rows' arithmetic as the ingest of a file would be.
      const std::int64_t block_rows = 16384;
      std::vector<float> block(static_cast<size_t>(std::min(block_rows, rows_) * dim_));
      for (std::int64_t b0 = 0; b0 < rows_; b0 += block_rows) {
        const std::int64_t nb = std::min(block_rows, rows_ - b0);
        generate_rows(s.seed, s.first_row + b0, nb, dim_, block.data(), pool_.size());
        if (metric_ == Metric::kCosine) normalize_rows(block.data(), nb, dim_, s.first_row + b0, "generated row");
        store_rows(b0, nb, block.data());
      }
    } else {
      store_rows(0, rows_, s.data);
    }
    padded_q_.assign(static_cast<size_t>(lim.batch_max) * dp_, 0.0f);
    // Filters: the attribute table over every slot, and a row mask per program of a batch.
    // Searches scan the rows and every slot written since (slots_.scanned()).
    table_ = engine_detail::slot_attribute_table(s, cap_, opt.threads, "cpu engine");
    slots_ = engine_detail::Slots(cap_, rows_, rows_);
    mask_words_ = filter_mask_words(cap_);
    masks_.assign(static_cast<size_t>(std::max(lim.max_filters, 0)) * static_cast<size_t>(mask_words_), 0u);
    blocks_ = (cap_ + kFilterBlockRows - 1) / kFilterBlockRows;
    flags_.assign(static_cast<size_t>(std::max(lim.max_filters, 0)) * static_cast<size_t>(blocks_), 0u);
    query_mask_.assign(static_cast<size_t>(lim.batch_max), nullptr);
    const size_t bk = static_cast<size_t>(lim.batch_max) * lim.k_max;
    lists_.assign(bk * pool_.size(), pad_candidate());
    sel_stride_ = selection_cap(lim.k_max);
    sel_buf_.assign(static_cast<size_t>(pool_.size()) * lim.batch_max * sel_stride_, pad_candidate());
    sel_state_.assign(static_cast<size_t>(pool_.size()) * lim.batch_max, QueryState{pad_candidate(), 0});
    spdlog::info("cpu engine: {}, {} threads", isa_name(isa_), pool_.size());
  }

  EngineInfo info() const override {
    const std::uint64_t bytes = f32_.size() * 4 + u16_.size() * 2 + ids_.size() * 8 +
                                (lists_.size() + sel_buf_.size()) * sizeof(Candidate) +
                                sel_state_.size() * sizeof(QueryState) + padded_q_.size() * 4 + masks_.size() * 4 +
                                flags_.size() + slots_.live_mask().size() * 4;
    return EngineInfo{"cpu", MemSpace::kHost, metric_, dtype_, rows_, cap_, dim_, /*device=*/-1,
                      std::string(isa_name(isa_)) + ", " + std::to_string(pool_.size()) + " threads", bytes};
  }
  const EngineLimits& limits() const override { return limits_; }
  void* stream() const override { return nullptr; }

  // Streamed loading: each block is converted into the storage as it arrives.
  float* load_buffer(std::int64_t rows) override {
    SHARDTOPK_EXPECTS(streaming_, "load_buffer: this CPU engine was not built with ShardInput::streamed, or its load "
                                  "has finished");
    SHARDTOPK_EXPECTS(rows >= 1 && rows <= std::max<std::int64_t>(rows_, 1), "load_buffer: ", rows,
                      " rows out of range 1 .. ", rows_);
    if (load_cap_rows_ == 0) load_cap_rows_ = rows;
    SHARDTOPK_EXPECTS(rows <= load_cap_rows_, "load_buffer: ", rows, " rows, more than the first call's ",
                      load_cap_rows_);
    auto& b = load_buf_[load_next_];
    load_next_ ^= 1;
    if (b.empty()) b.resize(static_cast<size_t>(load_cap_rows_ * dim_));
    return b.data();
  }
  void load_rows(std::int64_t first, std::int64_t rows, const float* data) override {
    SHARDTOPK_EXPECTS(streaming_, "load_rows: this CPU engine was not built with ShardInput::streamed, or its load "
                                  "has finished");
    SHARDTOPK_EXPECTS(first == loaded_ && rows >= 0 && first + rows <= rows_, "load_rows: rows [", first, ", ",
                      first + rows, ") out of order or range: expected row ", loaded_, " of ", rows_);
    SHARDTOPK_EXPECTS(rows == 0 || data != nullptr, "load_rows: no data");
    store_rows(first, rows, data);
    loaded_ += rows;
  }
  void finish_load() override {
    SHARDTOPK_EXPECTS(streaming_, "finish_load: this CPU engine was not built with ShardInput::streamed, or its load "
                                  "has finished");
    SHARDTOPK_EXPECTS(loaded_ == rows_, "finish_load: ", loaded_, " of ", rows_, " rows loaded");
    streaming_ = false;
    load_buf_[0] = {};
    load_buf_[1] = {};
  }

  void prepare_queries(float* q, int batch, void*, std::uint8_t* invalid) override {
    if (!invalid) {
      if (metric_ == Metric::kCosine) normalize_rows(q, batch, dim_, 0, "query");
      return;
    }
    for (int b = 0; b < batch; ++b) {
      float* x = q + static_cast<std::int64_t>(b) * dim_;
      bool ok = std::all_of(x, x + dim_, [](float v) { return std::isfinite(v); });
      if (ok && metric_ == Metric::kCosine) {
        try {
          normalize_rows(x, 1, dim_, b, "query");
        } catch (const Error&) {
          ok = false;  // zero norm
        }
      }
      invalid[b] = ok ? 0 : 1;
      if (!ok) std::fill(x, x + dim_, 0.0f);
    }
  }

  void search(const SearchArgs& a) override {
    engine_detail::check_search_args(a, limits_);
    SHARDTOPK_EXPECTS(!streaming_, "search: the shard's rows are still loading (finish_load)");
    if (a.batch == 0) return;
    const bool filtered = a.filters.count > 0, dead = slots_.dead() > 0;
    const std::int64_t hw = slots_.scanned();
    std::vector<RowRange> spans{RowRange{0, hw}};
    if (filtered) {
      prepare_masks(a.filters, a.batch);
      // only the blocks some query may return a row of
      spans = engine_detail::scan_spans(flags_.data(), blocks_, a.filters.query_program, a.batch, hw);
    }
    if (!filtered && dead)  // deleted rows: every query reads the live mask
      std::fill(query_mask_.begin(), query_mask_.begin() + a.batch, slots_.live_mask().data());
    run(a.queries, a.batch, a.k, a.out, filtered || dead ? query_mask_.data() : nullptr, spans);
    if (a.epilogue) a.epilogue->enqueue(a.out, a.batch, a.k, nullptr);
  }

  TransferCounters transfer_counters() const override { return {}; }
  void reset_transfer_counters() override {}

  void write_rows(const SlotRows& w) override {
    SHARDTOPK_EXPECTS(!streaming_, "write_rows: the shard's rows are still loading (finish_load)");
    slots_.check_write(w, dim_, dtype_);
    if (w.n <= 0) return;
    table_.write_rows(w.slots, w.n, w.ids, w.attributes);
    for (std::int64_t i = 0; i < w.n; ++i) {
      const std::int64_t s = w.slots[i];
      ids_[static_cast<size_t>(s)] = w.ids[i];
      store_rows(s, 1, w.vectors + i * dim_);
      slots_.scan_through(s);  // never-used slots join the scan dead, until set_live
    }
  }

  void set_live(const std::int64_t* slots, std::int64_t n, bool live) override { slots_.set_live(slots, n, live); }

  void read_rows(const std::int64_t* slots, std::int64_t n, float* out) override {
    slots_.check_read(slots, n, out);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t d = 0; d < dim_; ++d) {
        const std::int64_t o = elem_offset(slots[i], d, dp_);
        out[i * dim_ + d] = dtype_ == Dtype::kFloat32 ? f32_[o] : load1(&u16_[o], dtype_);
      }
  }

  const AttributeTable& attribute_table() const override { return table_; }

 private:
  /// Host float32 rows src [n, dim] → storage rows [first, first + n) (pair-interleaved layout;
  /// float16 / bfloat16 rounding with an overflow check naming the row's global id).
  void store_rows(std::int64_t first, std::int64_t n, const float* src) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t r = first + i;
      const float* row = src + i * dim_;
      if (dtype_ == Dtype::kFloat32) {
        for (std::int64_t d = 0; d < dim_; d += kLanes)
          std::memcpy(&f32_[elem_offset(r, d, dp_)], row + d, sizeof(float) * std::min<std::int64_t>(kLanes, dim_ - d));
      } else {
        for (std::int64_t d = 0; d < dim_; ++d) {
          const float v = row[d];
          const std::uint16_t h = dtype_ == Dtype::kFloat16 ? half::to_f16(v) : half::to_bf16(v);
          const float back = load1(&h, dtype_);
          SHARDTOPK_EXPECTS(std::isfinite(back), "corpus row ", ids_[r], " value ", v, " at column ", d, " overflows ",
                            to_string(dtype_), "; use engine.dtype float32");
          u16_[elem_offset(r, d, dp_)] = h;
        }
      }
    }
  }

  /// Row masks and block flags of the batch's programs (without the dead slots), and each
  /// query's mask in query_mask_ (unfiltered: the live mask, or nullptr when every slot is live).
  void prepare_masks(const FilterBatch& f, int batch) {
    for (int m = 0; m < f.count; ++m) {
      std::uint32_t* mask = masks_.data() + m * static_cast<size_t>(mask_words_);
      const std::int64_t hw = slots_.scanned();
      evaluate_mask(*f.programs[m], table_, RowRange{0, hw}, mask, flags_.data() + m * static_cast<size_t>(blocks_),
                    pool_.size());
      if (slots_.dead() > 0)
        for (std::int64_t w = 0; w < filter_mask_words(hw); ++w) mask[w] &= slots_.live_mask()[static_cast<size_t>(w)];
    }
    for (int b = 0; b < batch; ++b) {
      const std::int32_t m = f.query_program[b];
      query_mask_[b] = m >= 0 ? masks_.data() + m * static_cast<size_t>(mask_words_)
                              : slots_.dead() > 0 ? slots_.live_mask().data() : nullptr;
    }
  }

  /// The batch over the rows of `spans` (block runs, ascending), split among the threads.
  void run(const float* queries, int batch, int k, Candidate* out, const std::uint32_t* const* masks,
           const std::vector<RowRange>& spans) {
    for (int b = 0; b < batch; ++b)
      std::memcpy(&padded_q_[b * dp_], queries + static_cast<std::int64_t>(b) * dim_, sizeof(float) * dim_);
    const int nt = pool_.size();
    const size_t bk = static_cast<size_t>(batch) * k;
    auto work = [&](int t) {
      // Thread pieces start on 16-row bounds (whole row pairs, whole 8-pair blocks). A row's
      // score does not depend on which thread or tile computes it.
      // Slots past the high-water mark were never written: not scanned.
      const Selector sel{sel_buf_.data() + static_cast<size_t>(t) * limits_.batch_max * sel_stride_,
                         sel_state_.data() + static_cast<size_t>(t) * limits_.batch_max,
                         sel_stride_,
                         k,
                         selection_cap(k),
                         ids_.data(),
                         metric_ == Metric::kL2,
                         masks};
      sel.reset(batch);
      for (const RowRange& piece : engine_detail::thread_pieces(spans, nt, t, 16)) {
        if (dtype_ == Dtype::kFloat32) {
          scan(f32_.data(), piece.lo, piece.hi, batch, sel);
        } else {
          scan(u16_.data(), piece.lo, piece.hi, batch, sel);
        }
      }
      Candidate* lp = lists_.data() + bk * t;
      for (int b = 0; b < batch; ++b) sel.finish(b, lp + static_cast<size_t>(b) * k);
    };
    pool_.run(work);
    if (nt == 1) {
      std::memcpy(out, lists_.data(), bk * sizeof(Candidate));
    } else {
      merge_topk_host(lists_.data(), nt, batch, k, out);
    }
  }

  template <typename T>
  void scan(const T* base, std::int64_t r0, std::int64_t r1, int batch, const Selector& sel) {
    const bool l2 = metric_ == Metric::kL2;
#if defined(__x86_64__)
    if (isa_ == Isa::kAvx512) {
      const float* q = padded_q_.data();
      if constexpr (std::is_same_v<T, float>) {
        if (l2) return scan512<true, Store::kF32>(base, dp_, r0, r1, q, batch, sel);
        return scan512<false, Store::kF32>(base, dp_, r0, r1, q, batch, sel);
      } else if (dtype_ == Dtype::kFloat16) {
        if (l2) return scan512<true, Store::kF16>(base, dp_, r0, r1, q, batch, sel);
        return scan512<false, Store::kF16>(base, dp_, r0, r1, q, batch, sel);
      } else {
        if (l2) return scan512<true, Store::kBF16>(base, dp_, r0, r1, q, batch, sel);
        return scan512<false, Store::kBF16>(base, dp_, r0, r1, q, batch, sel);
      }
    }
    if (isa_ == Isa::kAvx2) {
      if (l2) return scan_avx2<true>(base, r0, r1, batch, sel);
      return scan_avx2<false>(base, r0, r1, batch, sel);
    }
#endif
    if (l2) return scan_portable<true>(base, r0, r1, batch, sel);
    scan_portable<false>(base, r0, r1, batch, sel);
  }

#if defined(__x86_64__)
  template <bool kL2, typename T>
  void scan_avx2(const T* base, std::int64_t r0, std::int64_t r1, int batch, const Selector& sel) {
    float sc[8];
    const float* qp[4];
    const T* xp[8];
    if (batch == 1) {
      qp[0] = padded_q_.data();
      std::int64_t r = r0;
      for (; r + 8 <= r1; r += 8) {
        for (int j = 0; j < 8; ++j) xp[j] = base + row_offset(r + j, dp_);
        tile_avx2<1, 8, kL2>(qp, xp, dp_, dtype_, sc);
        for (int j = 0; j < 8; ++j) sel.offer(0, r + j, sc[j]);
      }
      for (; r < r1; ++r) {
        xp[0] = base + row_offset(r, dp_);
        tile_avx2<1, 1, kL2>(qp, xp, dp_, dtype_, sc);
        sel.offer(0, r, sc[0]);
      }
      return;
    }
    std::int64_t r = r0;
    for (; r < r1; r += 2) {
      const int rb = r + 2 <= r1 ? 2 : 1;
      for (int j = 0; j < rb; ++j) xp[j] = base + row_offset(r + j, dp_);
      int b = 0;
      for (; b + 4 <= batch; b += 4) {
        for (int i = 0; i < 4; ++i) qp[i] = padded_q_.data() + (b + i) * dp_;
        if (rb == 2) tile_avx2<4, 2, kL2>(qp, xp, dp_, dtype_, sc);
        else tile_avx2<4, 1, kL2>(qp, xp, dp_, dtype_, sc);
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < rb; ++j) sel.offer(b + i, r + j, sc[i * rb + j]);
      }
      for (; b < batch; ++b) {
        qp[0] = padded_q_.data() + b * dp_;
        if (rb == 2) tile_avx2<1, 2, kL2>(qp, xp, dp_, dtype_, sc);
        else tile_avx2<1, 1, kL2>(qp, xp, dp_, dtype_, sc);
        for (int j = 0; j < rb; ++j) sel.offer(b, r + j, sc[j]);
      }
    }
  }
#endif

  template <bool kL2, typename T>
  void scan_portable(const T* base, std::int64_t r0, std::int64_t r1, int batch, const Selector& sel) {
    const Dtype dt = dtype_;
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* x = base + row_offset(r, dp_);
      auto x_at = [x, dt](std::int64_t i) -> float {
        if constexpr (std::is_same_v<T, float>) {
          (void)dt;
          return x[i];
        } else {
          return load1(x + i, dt);
        }
      };
      for (int b = 0; b < batch; ++b)
        sel.offer(b, r, score_portable<kL2>(padded_q_.data() + b * dp_, x_at, dp_));
    }
  }

  Metric metric_;
  Dtype dtype_;
  Isa isa_;
  std::int64_t rows_;    // rows loaded at build (slots [0, rows_))
  std::int64_t cap_;     // slots (ShardInput::capacity)
  std::int64_t dim_, dp_;
  EngineLimits limits_;
  Pool pool_;
  std::vector<std::int64_t> ids_;
  std::vector<float> f32_;          // [ceil(rows/2), dp/8, 2, 8] pair-interleaved (see the top)
  std::vector<std::uint16_t> u16_;  // the same layout, float16 or bfloat16 bits
  std::vector<float> padded_q_;
  // filters: the attribute table, a row mask per distinct filter, each query's mask
  AttributeTable table_;
  std::int64_t mask_words_ = 0;
  std::vector<std::uint32_t> masks_;                 // [max_filters, mask_words_]
  std::int64_t blocks_ = 0;                          // summary blocks of the slots
  std::vector<std::uint8_t> flags_;                  // [max_filters, blocks_] evaluate_mask's block flags
  std::vector<const std::uint32_t*> query_mask_;     // [batch_max]
  engine_detail::Slots slots_;                       // live mask, scanned slots [0, scanned)
  // streamed loading (ShardInput::streamed): two host blocks used in turn
  bool streaming_ = false;
  std::vector<float> load_buf_[2];
  std::int64_t load_cap_rows_ = 0, loaded_ = 0;
  int load_next_ = 0;
  std::vector<Candidate> lists_;        // [threads, batch, k]: each thread's top k, best first
  std::int64_t sel_stride_ = 0;         // selection slots per query: selection_cap(k_max)
  std::vector<Candidate> sel_buf_;      // [threads, batch_max, sel_stride_]
  std::vector<QueryState> sel_state_;   // [threads, batch_max]
};

}  // namespace

std::uint64_t cpu_engine_host_bytes(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& limits,
                                    int threads) {
  return total_bytes(cpu_buffers(rows, dim, dtype, limits, threads));
}

std::uint64_t host_memory_bytes() { return physical_memory_bytes(); }

void check_cpu_engine_fits(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& limits, int threads,
                           std::uint64_t other_bytes) {
  std::vector<CpuBuffer> bufs = cpu_buffers(rows, dim, dtype, limits, threads);
  if (other_bytes > 0) bufs.push_back({"index", "[queries and candidates of the data path]", other_bytes});
  check_buffers_fit(bufs, limits);
}

std::unique_ptr<Engine> make_cpu_engine(const ShardInput& shard, Metric metric, Dtype dtype, const EngineLimits& limits,
                                        const EngineOptions& options) {
  return std::make_unique<CpuEngine>(shard, metric, dtype, limits, options);
}

}  // namespace shardtopk
