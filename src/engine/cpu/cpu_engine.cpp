// The CPU engine: a resident shard in float32/float16/bfloat16 host memory, scored by worker
// threads, each keeping a top-k per query that the host merge combines with the ordering rule.
// It composes the pieces of this folder:
//   layout.hpp       the pair-interleaved storage and the one fixed-order arithmetic (determinism)
//   scan.cpp         scoring kernels (portable, AVX2, AVX-512) feeding the selection
//   selector.hpp     per-thread exact top-k behind a threshold
//   worker_pool.hpp  the threads, started once
//   buffers.cpp      the memory plan, checked before anything is allocated
//   scan_spans.cpp   the blocks a filtered batch scans (some query may return a row of them)
// Slots, their live mask and the checks of updates are shared with the CUDA engine (../slots.hpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/half.hpp"
#include "core/log.hpp"
#include "engine/cpu/buffers.hpp"
#include "engine/cpu/layout.hpp"
#include "engine/cpu/scan.hpp"
#include "engine/cpu/scan_spans.hpp"
#include "engine/cpu/selector.hpp"
#include "engine/cpu/worker_pool.hpp"
#include "engine/search_args.hpp"
#include "engine/slots.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/generator.hpp"
#include "shardtopk/merge.hpp"

namespace shardtopk {
namespace {

using namespace cpu_detail;

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
      stream_format_ = s.stream_format;
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
    within_.assign(static_cast<size_t>(pool_.size()) * lim.batch_max, 0);
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
    check_streaming(RowFormat::kFloat32, "load_buffer");
    auto& b = load_buf_[next_load_buffer(rows, "load_buffer")];
    if (b.empty()) b.resize(static_cast<size_t>(load_cap_rows_ * dim_));
    return b.data();
  }
  std::uint16_t* load_buffer_bits(std::int64_t rows) override {
    check_streaming(RowFormat::kFloat16Bits, "load_buffer_bits");
    auto& b = load_bits_[next_load_buffer(rows, "load_buffer_bits")];
    if (b.empty()) b.resize(static_cast<size_t>(load_cap_rows_ * dim_));
    return b.data();
  }
  void load_rows(std::int64_t first, std::int64_t rows, const float* data) override {
    check_streaming(RowFormat::kFloat32, "load_rows");
    check_load_block(first, rows, data, "load_rows");
    store_rows(first, rows, data);
    loaded_ += rows;
  }
  /// Row by row: each pattern checked, converted exactly to float32 and stored as load_rows
  /// stores it (a row before a refused one stays stored; the load is then abandoned).
  void load_rows_bits(std::int64_t first, std::int64_t rows, const std::uint16_t* bits) override {
    check_streaming(RowFormat::kFloat16Bits, "load_rows_bits");
    check_load_block(first, rows, bits, "load_rows_bits");
    std::vector<float> row(static_cast<size_t>(dim_));
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::uint16_t* h = bits + i * dim_;
      for (std::int64_t c = 0; c < dim_; ++c) {
        row[static_cast<size_t>(c)] = half::from_f16(h[c]);
        if ((h[c] & 0x7C00u) == 0x7C00u)
          throw Error(engine_detail::nonfinite_bits_message(ids_[static_cast<size_t>(first + i)], row[c], c));
      }
      store_rows(first + i, 1, row.data());
    }
    loaded_ += rows;
  }
  void finish_load() override {
    SHARDTOPK_EXPECTS(streaming_, "finish_load: this CPU engine was not built with ShardInput::streamed, or its load "
                                  "has finished");
    SHARDTOPK_EXPECTS(loaded_ == rows_, "finish_load: ", loaded_, " of ", rows_, " rows loaded");
    streaming_ = false;
    load_buf_[0] = {};
    load_buf_[1] = {};
    load_bits_[0] = {};
    load_bits_[1] = {};
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
    const std::uint32_t* const* masks = filtered || dead ? query_mask_.data() : nullptr;
    run(a.queries, a.batch, a.k, a.out, masks, spans, a.windows);
    if (a.counts) write_counts(a.batch, masks, a.windows, a.counts);
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
        // Whole 8-wide chunks as fixed-size copies (one vector move each), then the remainder.
        float* dst = &f32_[row_offset(r, dp_)];
        const std::int64_t full = dim_ / kLanes * kLanes;
        for (std::int64_t d = 0; d < full; d += kLanes) std::memcpy(dst + 2 * d, row + d, sizeof(float) * kLanes);
        if (full < dim_) std::memcpy(dst + 2 * full, row + full, sizeof(float) * static_cast<std::size_t>(dim_ - full));
      } else {
        // One vectorised pass finds the first value that rounds past the type's range (the
        // common case: none), then the row is rounded in 8-wide chunks.
        const bool bf16 = dtype_ == Dtype::kBFloat16;
        const std::int64_t d = half::first_overflow(row, dim_, bf16);
        SHARDTOPK_EXPECTS(d < 0, "corpus row ", ids_[r], " value ", d < 0 ? 0.0f : row[d], " at column ", d,
                          " overflows ", to_string(dtype_), "; use engine.dtype float32");
        std::uint16_t* dst = &u16_[row_offset(r, dp_)];
        if (!bf16) {
          store_f16_row(row, dim_, dst);
        } else {
          for (std::int64_t c = 0; c < dim_; ++c) dst[(c / kLanes) * 2 * kLanes + c % kLanes] = half::to_bf16(row[c]);
        }
      }
    }
  }

  /// The checks every streamed-load call makes: a load under way, in the shard's format.
  void check_streaming(RowFormat format, const char* what) const {
    engine_detail::check_stream_call(streaming_, stream_format_, format, "CPU engine", what);
  }
  /// load_buffer's size checks; returns which of the two buffers to hand out.
  int next_load_buffer(std::int64_t rows, const char* what) {
    SHARDTOPK_EXPECTS(rows >= 1 && rows <= std::max<std::int64_t>(rows_, 1), what, ": ", rows,
                      " rows out of range 1 .. ", rows_);
    if (load_cap_rows_ == 0) load_cap_rows_ = rows;
    SHARDTOPK_EXPECTS(rows <= load_cap_rows_, what, ": ", rows, " rows, more than the first call's ", load_cap_rows_);
    const int i = load_next_;
    load_next_ ^= 1;
    return i;
  }
  /// load_rows' order, range and data checks.
  void check_load_block(std::int64_t first, std::int64_t rows, const void* data, const char* what) const {
    SHARDTOPK_EXPECTS(first == loaded_ && rows >= 0 && first + rows <= rows_, what, ": rows [", first, ", ",
                      first + rows, ") out of order or range: expected row ", loaded_, " of ", rows_);
    SHARDTOPK_EXPECTS(rows == 0 || data != nullptr, what, ": no data");
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
  /// counts[batch]: each thread's window counts summed; passing rows from the query's mask.
  void write_counts(int batch, const std::uint32_t* const* masks, const QueryWindow* windows,
                    QueryCounts* counts) const {
    const std::int64_t hw = slots_.scanned(), live = hw - slots_.dead();
    for (int b = 0; b < batch; ++b) {
      QueryCounts c;
      c.scanned = live;
      c.passing = masks && masks[b] ? count_bits(masks[b], hw) : live;
      if (windows)
        for (int t = 0; t < pool_.size(); ++t) c.within += within_[static_cast<size_t>(t) * limits_.batch_max + b];
      counts[b] = c;
    }
  }

  static std::int64_t count_bits(const std::uint32_t* mask, std::int64_t rows) {
    std::int64_t n = 0;
    for (std::int64_t w = 0; w < rows / 32; ++w) n += __builtin_popcount(mask[w]);
    if (rows % 32) n += __builtin_popcount(mask[rows / 32] & ((1u << (rows % 32)) - 1u));
    return n;
  }

  void run(const float* queries, int batch, int k, Candidate* out, const std::uint32_t* const* masks,
           const std::vector<RowRange>& spans, const QueryWindow* windows) {
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
                         masks,
                         windows,
                         windows ? within_.data() + static_cast<size_t>(t) * limits_.batch_max : nullptr};
      sel.reset(batch);
      const ScanInput in{f32_.data(), u16_.data(), dtype_, metric_ == Metric::kL2, isa_, dp_, padded_q_.data(), batch};
      for (const RowRange& piece : engine_detail::thread_pieces(spans, nt, t, 16)) scan_rows(in, piece.lo, piece.hi, sel);
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

  Metric metric_;
  Dtype dtype_;
  Isa isa_;
  std::int64_t rows_;    // rows loaded at build (slots [0, rows_))
  std::int64_t cap_;     // slots (ShardInput::capacity)
  std::int64_t dim_, dp_;
  EngineLimits limits_;
  Pool pool_;
  std::vector<std::int64_t> ids_;
  std::vector<float> f32_;          // [ceil(rows/2), dp/8, 2, 8] pair-interleaved (layout.hpp)
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
  RowFormat stream_format_ = RowFormat::kFloat32;  // the blocks' values (ShardInput::stream_format)
  std::vector<float> load_buf_[2];
  std::vector<std::uint16_t> load_bits_[2];
  std::int64_t load_cap_rows_ = 0, loaded_ = 0;
  int load_next_ = 0;
  std::vector<Candidate> lists_;        // [threads, batch, k]: each thread's top k, best first
  std::int64_t sel_stride_ = 0;         // selection slots per query: selection_cap(k_max)
  std::vector<Candidate> sel_buf_;      // [threads, batch_max, sel_stride_]
  std::vector<QueryState> sel_state_;   // [threads, batch_max]
  std::vector<std::int64_t> within_;    // [threads, batch_max] rows ahead of each counting window's floor
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(const ShardInput& shard, Metric metric, Dtype dtype, const EngineLimits& limits,
                                        const EngineOptions& options) {
  return std::make_unique<CpuEngine>(shard, metric, dtype, limits, options);
}

}  // namespace shardtopk
