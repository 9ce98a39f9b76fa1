// CPU engine: resident shard in float32/float16/bfloat16, blocked scoring with a fixed
// reduction order, and a per-thread heap top-k merged with the ordering rule.
//
// Determinism (DESIGN.md invariant 3): every (query, row) score is computed by the same
// arithmetic whatever the batch, tile shape, thread count or shard: D is zero-padded to a
// multiple of 8; lane j of an 8-wide accumulator sums dimensions d ≡ j (mod 8) in increasing
// order with fused multiply-add; the 8 lanes are then added by one fixed tree (hsum8). The
// AVX2 kernels and the portable fallback follow exactly this order, so they agree bit for bit.
//
// Tiling: a tile is QB queries × RB rows with one accumulator per pair (QB·RB ≤ 8 vector
// registers), tuned for 2-core AVX2 machines: 4×2 for batches, 1×8 for a single query (eight
// independent FMA chains hide the FMA latency; the shard streams from memory once per batch).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "half.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/merge.hpp"

namespace shardtopk {
namespace {

constexpr int kLanes = 8;

inline std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

// ---------------------------------------------------------------- fixed-order lane arithmetic

inline float hsum8(const float* l) {
  // The one horizontal-sum tree. Changing it changes every score: keep AVX2 and portable equal.
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// Storage element -> float (portable).
inline float load1(const float* p) { return *p; }
inline float load1(const std::uint16_t* p, Dtype dt) {
  return dt == Dtype::kFloat16 ? half::from_f16(*p) : half::from_bf16(*p);
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

// ---------------------------------------------------------------- top-k heap (worst on top)

struct Heap {
  Candidate* a;  // [k], starts full of padding
  int k;
  void reset() {
    for (int i = 0; i < k; ++i) a[i] = pad_candidate();
  }
  const Candidate& worst() const { return a[0]; }
  // Replace the worst with c (caller checked better(c, worst())) and restore the heap.
  void replace_top(Candidate c) {
    int i = 0;
    for (;;) {
      const int l = 2 * i + 1, r = l + 1;
      int w = i;
      Candidate wc = c;
      if (l < k && better(wc, a[l])) { w = l; wc = a[l]; }
      if (r < k && better(wc, a[r])) { w = r; wc = a[r]; }
      if (w == i) break;
      a[i] = a[w];
      i = w;
    }
    a[i] = c;
  }
  void offer(float s, std::int64_t id) {
    if (better(s, id, a[0].score, a[0].id)) replace_top(Candidate{s, id});
  }
  void sort_best_first() {
    std::sort(a, a + k, [](const Candidate& x, const Candidate& y) { return better(x, y); });
  }
};

// ---------------------------------------------------------------- scoring kernels

// Portable tile: QB queries × RB rows, identical arithmetic to the AVX2 tile.
template <bool kL2, typename Load>
void tile_portable(const float* const* q, int qb, const Load& row_at, const std::int64_t* rows, int rb,
                   std::int64_t dp, float* out /*[qb][rb]*/) {
  for (int i = 0; i < qb; ++i) {
    for (int r = 0; r < rb; ++r) {
      float lane[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (std::int64_t d = 0; d < dp; d += kLanes) {
        for (int j = 0; j < kLanes; ++j) {
          const float x = row_at(rows[r], d + j);
          const float a = q[i][d + j];
          if (kL2) {
            const float diff = a - x;
            lane[j] = std::fma(diff, diff, lane[j]);
          } else {
            lane[j] = std::fma(a, x, lane[j]);
          }
        }
      }
      out[i * rb + r] = hsum8(lane);
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const float* p, Dtype) { return _mm256_loadu_ps(p); }
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const std::uint16_t* p, Dtype dt) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (dt == Dtype::kFloat16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <int QB, int RB, bool kL2, typename T>
__attribute__((target("avx2,fma,f16c"))) void tile_avx2(const float* const* q, const T* const* x, std::int64_t dp,
                                                        Dtype dt, float* out /*[QB][RB]*/) {
  __m256 acc[QB][RB];
  for (int i = 0; i < QB; ++i)
    for (int r = 0; r < RB; ++r) acc[i][r] = _mm256_setzero_ps();
  for (std::int64_t d = 0; d < dp; d += kLanes) {
    __m256 xv[RB];
    for (int r = 0; r < RB; ++r) xv[r] = load8(x[r] + d, dt);
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
#endif

bool have_avx2() {
#if defined(__x86_64__)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
#else
  return false;
#endif
}

// ---------------------------------------------------------------- engine

class CpuEngine final : public Engine {
 public:
  CpuEngine(const ShardInput& s, Metric metric, Dtype dtype, int threads, const EngineLimits& lim)
      : metric_(metric), dtype_(dtype), rows_(s.rows), dim_(s.dim), dp_(round_up(std::max<std::int64_t>(s.dim, 1), kLanes)),
        limits_(lim), pool_(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {
    SHARDTOPK_EXPECTS(s.dim >= 1, "cpu engine: dimension must be >= 1");
    SHARDTOPK_EXPECTS(lim.batch_max >= 1 && lim.k_max >= 1 && lim.world_size >= 1, "cpu engine: bad limits");
    ids_.assign(s.ids, s.ids + s.rows);
    const size_t n = static_cast<size_t>(rows_ * dp_);
    if (dtype_ == Dtype::kFloat32) {
      f32_.assign(n, 0.0f);
      for (std::int64_t r = 0; r < rows_; ++r) std::memcpy(&f32_[r * dp_], s.data + r * dim_, sizeof(float) * dim_);
    } else {
      u16_.assign(n, 0);
      for (std::int64_t r = 0; r < rows_; ++r)
        for (std::int64_t d = 0; d < dim_; ++d) {
          const float v = s.data[r * dim_ + d];
          const std::uint16_t h = dtype_ == Dtype::kFloat16 ? half::to_f16(v) : half::to_bf16(v);
          const float back = load1(&h, dtype_);
          SHARDTOPK_EXPECTS(std::isfinite(back), "corpus row ", s.ids[r], " value ", v, " at column ", d,
                            " overflows ", to_string(dtype_), "; use engine.dtype float32");
          u16_[r * dp_ + d] = h;
        }
    }
    const size_t bk = static_cast<size_t>(lim.batch_max) * lim.k_max;
    queries_.assign(static_cast<size_t>(lim.batch_max) * dim_, 0.0f);
    padded_q_.assign(static_cast<size_t>(lim.batch_max) * dp_, 0.0f);
    local_.assign(bk, pad_candidate());
    gathered_.assign(bk * lim.world_size, pad_candidate());
    merged_.assign(bk, pad_candidate());
    heaps_.assign(bk * pool_.size(), pad_candidate());
  }

  std::string name() const override { return "cpu"; }
  MemSpace space() const override { return MemSpace::kHost; }
  Metric metric() const override { return metric_; }
  Dtype dtype() const override { return dtype_; }
  std::int64_t rows() const override { return rows_; }
  std::int64_t dim() const override { return dim_; }
  float* query_buffer() override { return queries_.data(); }
  Candidate* local_buffer() override { return local_.data(); }
  Candidate* gathered_buffer() override { return gathered_.data(); }
  Candidate* merged_buffer() override { return merged_.data(); }

  void prepare_queries(float* q, int batch) override {
    if (metric_ == Metric::kCosine) normalize_rows(q, batch, dim_, 0, "query");
  }

  void search(const float* queries, int batch, int k, Candidate* out) override {
    SHARDTOPK_ASSERT(batch >= 0 && batch <= limits_.batch_max && k >= 1 && k <= limits_.k_max);
    if (batch == 0) return;
    for (int b = 0; b < batch; ++b)
      std::memcpy(&padded_q_[b * dp_], queries + static_cast<std::int64_t>(b) * dim_, sizeof(float) * dim_);
    const int nt = pool_.size();
    const size_t bk = static_cast<size_t>(batch) * k;
    auto work = [&](int t) {
      const std::int64_t per = (rows_ + nt - 1) / nt;
      const std::int64_t r0 = std::min(rows_, t * per), r1 = std::min(rows_, r0 + per);
      Candidate* hp = heaps_.data() + bk * t;
      for (int b = 0; b < batch; ++b) Heap{hp + static_cast<size_t>(b) * k, k}.reset();
      if (dtype_ == Dtype::kFloat32) {
        scan(f32_.data(), r0, r1, batch, k, hp);
      } else {
        scan(u16_.data(), r0, r1, batch, k, hp);
      }
      for (int b = 0; b < batch; ++b) Heap{hp + static_cast<size_t>(b) * k, k}.sort_best_first();
    };
    pool_.run(work);
    if (nt == 1) {
      std::memcpy(out, heaps_.data(), bk * sizeof(Candidate));
    } else {
      merge_topk_host(heaps_.data(), nt, batch, k, out);
    }
  }

  void merge(const Candidate* lists, int parts, int batch, int k, Candidate* out) override {
    merge_topk_host(lists, parts, batch, k, out);
  }
  void export_results(const Candidate* list, int batch, int k, std::int64_t* ids, float* scores) override {
    for (size_t i = 0; i < static_cast<size_t>(batch) * k; ++i) {
      ids[i] = list[i].id;
      scores[i] = reported_score(metric_, list[i].score);
    }
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_within(void* dst, const void* src, std::size_t bytes) override { std::memmove(dst, src, bytes); }
  void synchronize() override {}
  void* stream() override { return nullptr; }
  TransferCounters transfer_counters() const override { return {}; }
  void reset_transfer_counters() override {}
  std::uint64_t resident_bytes() const override {
    return f32_.size() * 4 + u16_.size() * 2 + ids_.size() * 8 +
           (local_.size() + gathered_.size() + merged_.size() + heaps_.size()) * sizeof(Candidate) +
           (queries_.size() + padded_q_.size()) * 4;
  }

 private:
  template <typename T>
  void scan(const T* base, std::int64_t r0, std::int64_t r1, int batch, int k, Candidate* heaps) {
    const bool l2 = metric_ == Metric::kL2;
#if defined(__x86_64__)
    if (have_avx2()) {
      if (l2) return scan_avx2<true>(base, r0, r1, batch, k, heaps);
      return scan_avx2<false>(base, r0, r1, batch, k, heaps);
    }
#endif
    if (l2) return scan_portable<true>(base, r0, r1, batch, k, heaps);
    scan_portable<false>(base, r0, r1, batch, k, heaps);
  }

  void offer(Candidate* heaps, int k, int b, std::int64_t row, float s, bool l2) {
    Heap{heaps + static_cast<size_t>(b) * k, k}.offer(l2 ? -s : s, ids_[row]);
  }

#if defined(__x86_64__)
  template <bool kL2, typename T>
  void scan_avx2(const T* base, std::int64_t r0, std::int64_t r1, int batch, int k, Candidate* heaps) {
    float sc[8];
    const float* qp[4];
    const T* xp[8];
    if (batch == 1) {
      qp[0] = padded_q_.data();
      std::int64_t r = r0;
      for (; r + 8 <= r1; r += 8) {
        for (int j = 0; j < 8; ++j) xp[j] = base + (r + j) * dp_;
        tile_avx2<1, 8, kL2>(qp, xp, dp_, dtype_, sc);
        for (int j = 0; j < 8; ++j) offer(heaps, k, 0, r + j, sc[j], kL2);
      }
      for (; r < r1; ++r) {
        xp[0] = base + r * dp_;
        tile_avx2<1, 1, kL2>(qp, xp, dp_, dtype_, sc);
        offer(heaps, k, 0, r, sc[0], kL2);
      }
      return;
    }
    std::int64_t r = r0;
    for (; r < r1; r += 2) {
      const int rb = r + 2 <= r1 ? 2 : 1;
      for (int j = 0; j < rb; ++j) xp[j] = base + (r + j) * dp_;
      int b = 0;
      for (; b + 4 <= batch; b += 4) {
        for (int i = 0; i < 4; ++i) qp[i] = padded_q_.data() + (b + i) * dp_;
        if (rb == 2) tile_avx2<4, 2, kL2>(qp, xp, dp_, dtype_, sc);
        else tile_avx2<4, 1, kL2>(qp, xp, dp_, dtype_, sc);
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < rb; ++j) offer(heaps, k, b + i, r + j, sc[i * rb + j], kL2);
      }
      for (; b < batch; ++b) {
        qp[0] = padded_q_.data() + b * dp_;
        if (rb == 2) tile_avx2<1, 2, kL2>(qp, xp, dp_, dtype_, sc);
        else tile_avx2<1, 1, kL2>(qp, xp, dp_, dtype_, sc);
        for (int j = 0; j < rb; ++j) offer(heaps, k, b, r + j, sc[j], kL2);
      }
    }
  }
#endif

  template <bool kL2, typename T>
  void scan_portable(const T* base, std::int64_t r0, std::int64_t r1, int batch, int k, Candidate* heaps) {
    const Dtype dt = dtype_;
    const std::int64_t dp = dp_;
    auto row_at = [base, dp, dt](std::int64_t row, std::int64_t d) -> float {
      if constexpr (std::is_same_v<T, float>) {
        (void)dt;
        return base[row * dp + d];
      } else {
        return load1(base + row * dp + d, dt);
      }
    };
    float sc[1];
    for (std::int64_t r = r0; r < r1; ++r)
      for (int b = 0; b < batch; ++b) {
        const float* qp[1] = {padded_q_.data() + b * dp_};
        tile_portable<kL2>(qp, 1, row_at, &r, 1, dp_, sc);
        offer(heaps, k, b, r, sc[0], kL2);
      }
  }

  Metric metric_;
  Dtype dtype_;
  std::int64_t rows_, dim_, dp_;
  EngineLimits limits_;
  Pool pool_;
  std::vector<std::int64_t> ids_;
  std::vector<float> f32_;          // [rows, dp]
  std::vector<std::uint16_t> u16_;  // [rows, dp] float16 or bfloat16 bits
  std::vector<float> queries_, padded_q_;
  std::vector<Candidate> local_, gathered_, merged_, heaps_;  // heaps_: [threads, batch_max, k]
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(const ShardInput& shard, Metric metric, Dtype dtype, int threads,
                                        const EngineLimits& limits) {
  return std::make_unique<CpuEngine>(shard, metric, dtype, threads, limits);
}

}  // namespace shardtopk
