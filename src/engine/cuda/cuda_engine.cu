// The CUDA engine: a resident shard on one GPU, scored and reduced to a local top-k on the
// device. It composes the pieces of this folder:
//   plan.hpp            the one device allocation (shard + workspace), sized at construction
//   kernels/shard_store the shard's upload and slot writes (convert + pad, generated rows, norms, ids)
//   kernels/query_prep  query validation and cosine normalisation
//   kernels/scan_select batch 1 (and the batched path's fallback): one scan + radix select
//   batched_search      batch ≥ 2: tensor-core GEMM per chunk, candidates within 2Δ, exact re-score
//   filtered_search     a search's filters: evaluated per summary block, then the filtered scan
//                       of each query's candidate blocks (batch 1) or the chunk schedule (batches)
//   graph_cache         each search shape replayed from a CUDA graph
// Scoring (DESIGN.md invariant 3): kernels/score.cuh, one arithmetic for every batch size.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda_check.cuh"
#include "core/half.hpp"
#include "core/cuda_raii.cuh"
#include "engine/cuda/batched_search.hpp"
#include "engine/cuda/filtered_search.hpp"
#include "engine/search_args.hpp"
#include "engine/slots.hpp"
#include "engine/cuda/graph_cache.hpp"
#include "engine/cuda/kernels/fill.hpp"
#include "engine/cuda/kernels/filter_table.cuh"
#include "engine/cuda/kernels/load_norms.hpp"
#include "engine/cuda/kernels/query_prep.hpp"
#include "engine/cuda/kernels/scan_few.hpp"
#include "engine/cuda/kernels/scan_select.hpp"
#include "engine/cuda/kernels/shard_store.hpp"
#include "engine/cuda/kernels/store_f16_bits.hpp"
#include "engine/cuda/plan.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk {
namespace {

using namespace cuda_detail;
using namespace engine_detail;

static_assert(sizeof(Candidate) == 16, "Candidate layout is shared by host and device");

constexpr std::uint64_t kPinnedOverflowOff = 4096;  // pinned: status words, then overflow flags
/// Each of write_rows' two pinned staging buffers (a batch of rows: about 2,600 of 768 float32).
constexpr std::size_t kWriteStageBytes = 8u << 20;

class CudaEngine final : public Engine {
 public:
  CudaEngine(const ShardInput& s, Metric metric, Dtype dtype, const EngineLimits& lim, const EngineOptions& opt,
             cudaStream_t stream)
      : device_(opt.device),
        metric_(metric),
        dtype_(dtype),
        rows_(s.capacity > 0 ? s.capacity : s.rows),
        base_rows_(s.rows),
        dim_(s.dim),
        limits_(lim),
        search_path_(opt.search_path),
        graphs_(opt.cuda_graphs) {
    check_shape(rows_, s.dim, lim);
    SHARDTOPK_EXPECTS(s.capacity == 0 || s.capacity >= s.rows, "CUDA engine: capacity ", s.capacity,
                      " is less than the shard's ", s.rows, " rows");
    SHARDTOPK_EXPECTS(s.rows == 0 || s.generated || s.streamed || s.data != nullptr, "CUDA engine: shard of ", s.rows,
                      " rows given without data");
    SHARDTOPK_EXPECTS(!(s.streamed && s.rows > 0 && metric == Metric::kCosine), "CUDA engine: a streamed shard cannot "
                      "be cosine (rows are normalised on the host before the upload)");
    select_device();
    cap_ = cand_cap(lim);
    const std::size_t smem = rescore_smem_bytes(lim);
    SHARDTOPK_EXPECTS(smem_optin_ >= smem, "CUDA engine: device ", device_, " (", device_name_, ") offers ", smem_optin_,
                      " bytes of shared memory per block; the top-k sort for search.k_max=", lim.k_max, " needs ", smem,
                      "; lower search.k_max");

    plan_ = make_plan(rows_, s.dim, dtype, lim);
    dpad_ = plan_.dpad;
    std::size_t free_b = 0, total_b = 0;
    CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (plan_.total + plan_.table_bytes > free_b) throw_does_not_fit(free_b, total_b);

    if (stream == nullptr) {
      own_stream_.create(cudaStreamNonBlocking);
      stream = own_stream_.get();
    }
    stream_ = stream;
    const cudaError_t merr = arena_.try_allocate(plan_.total);
    if (merr == cudaErrorMemoryAllocation) {
      CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
      throw_does_not_fit(free_b, total_b);
    }
    CHECK_CUDA(merr);
    pinned_.allocate(kPinnedOverflowOff + 4 * static_cast<std::size_t>(lim.batch_max));
    host_status_ = pinned_.as<unsigned long long>();
    host_overflow_ = reinterpret_cast<std::uint32_t*>(pinned_.as<char>() + kPinnedOverflowOff);
    ws_ = plan_.carve(arena_.get(), metric == Metric::kL2);

    if (rows_ > 0) {
      batched_.emplace(dtype, metric == Metric::kL2, rows_, dim_, plan_, ws_, lim, cap_, stream_,
                       opt.search_path != SearchPath::kCublas);
      scan_ = plan_scan_select(dtype, metric == Metric::kL2, rows_, dim_, dpad_, cap_, opt.scan_rows,
                               opt.scan_schedule, opt.scan_l2_hints, sms_);
      scan_args_.shard = ws_.shard;
      scan_args_.ids = ws_.ids;
      scan_args_.scores = ws_.scores;
      scan_args_.hists = ws_.hists;
      scan_args_.count = ws_.counts;
      scan_args_.state = ws_.state;
      scan_args_.clear_bytes = plan_.select_state_bytes();
      scan_args_.cand = ws_.pool;
      scan_args_.dir = reinterpret_cast<std::uint32_t*>(ws_.status + kStatusScanDir);
      few_ = plan_scan_few(scan_, plan_.few_queries, sms_, smem_optin_);
    }
    host_table_ = slot_attribute_table(s, rows_, 0, "CUDA engine");
    upload(s);
    init_filters(s, opt);
    CHECK_CUDA(cudaMemsetAsync(ws_.qpad, 0, static_cast<std::size_t>(lim.batch_max) * dpad_ * sizeof(float), stream_));
    CHECK_CUDA(cudaMemsetAsync(ws_.status + kStatusScanDir, 0, sizeof(unsigned long long), stream_));
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    counters_ = {};
  }

  ~CudaEngine() override {
    // No work of this engine may still read the memory freed below: searches may have been
    // ordered on callers' streams, so wait for the whole device (its stream may outlive it).
    int prev = -1;
    const bool known = cudaGetDevice(&prev) == cudaSuccess;
    if (known && prev != device_) (void)cudaSetDevice(device_);
    (void)cudaDeviceSynchronize();
    if (known && prev != device_ && prev >= 0) (void)cudaSetDevice(prev);
  }

  EngineInfo info() const override {
    return EngineInfo{"cuda", MemSpace::kDevice, metric_, dtype_, base_rows_, /*capacity=*/rows_, dim_, device_,
                      device_name_,
                      plan_.total + (table_ ? table_->bytes() : 0) +
                          (filters_ ? filters_->id_index_bytes() + filters_->column_order_bytes() : 0)};
  }
  const EngineLimits& limits() const override { return limits_; }
  void* stream() const override { return stream_; }
  TransferCounters transfer_counters() const override { return counters_; }
  void reset_transfer_counters() override { counters_ = {}; }

  // ------------------------------------------------------------ updates

  /// Rows go in slot order, in batches staged in the scores workspace (ordered on the engine's
  /// stream after the searches queued there so far: a search queued on another stream must be
  /// joined first, as Engine::write_rows says): per batch one copy of its slots, attribute words,
  /// ids and float32 rows, then the slot-list store (converted as an upload converts), norms,
  /// ids and the attribute table's scatter (write_batches). One wait at the end, for the status
  /// words. A larger largest norm drops the captured graphs (the batched path's Δ bound is
  /// captured in them).
  void write_rows(const SlotRows& w) override {
    SHARDTOPK_EXPECTS(!streaming_, "write_rows: the shard's rows are still loading (finish_load)");
    slots_.check_write(w, dim_, dtype_);
    if (w.n <= 0) return;
    host_table_.write_rows(w.slots, w.n, w.ids, w.attributes);
    DeviceGuard guard(device_);
    std::vector<std::int64_t> order(static_cast<std::size_t>(w.n));
    for (std::int64_t i = 0; i < w.n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return w.slots[a] < w.slots[b]; });
    CHECK_CUDA(cudaMemsetAsync(ws_.status + kStatusValues, 0xFF, sizeof(unsigned long long), stream_));
    CHECK_CUDA(cudaMemsetAsync(ws_.status + kStatusMaxSq, 0, sizeof(unsigned long long), stream_));
    if (write_batch_rows() > 0) write_batches(w, order);
    else write_lone_rows(w, order);
    filters_->rows_written();
    CHECK_CUDA(cudaMemcpyAsync(host_status_, ws_.status, 3 * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                               stream_));
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    SHARDTOPK_ASSERT(host_status_[kStatusValues] == kStatusOk, "a written value overflowed the storage type after "
                     "the host check passed");
    double run_max = 0.0;
    std::memcpy(&run_max, &host_status_[kStatusMaxSq], sizeof run_max);
    if (run_max > max_sq_) {
      max_sq_ = run_max;
      graphs_.clear();
    }
  }

  void set_live(const std::int64_t* slots, std::int64_t n, bool live) override {
    const WordSpan changed = slots_.set_live(slots, n, live);
    if (changed.empty()) return;
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaMemcpyAsync(ws_.live + changed.lo, slots_.live_mask().data() + changed.lo,
                               sizeof(std::uint32_t) * (changed.hi - changed.lo + 1), cudaMemcpyHostToDevice, stream_));
  }

  /// Runs of consecutive slots (in the order given) come back in one strided copy each.
  void read_rows(const std::int64_t* slots, std::int64_t n, float* out) override {
    slots_.check_read(slots, n, out);
    if (n <= 0) return;
    DeviceGuard guard(device_);
    const std::size_t elem = dtype_bytes(dtype_), width = static_cast<std::size_t>(dim_) * elem;
    const std::size_t pitch = static_cast<std::size_t>(dpad_) * elem;
    constexpr std::int64_t kRunRows = 4096;
    std::vector<std::uint16_t> halfs;
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    for (std::int64_t i = 0; i < n;) {
      std::int64_t m = 1;
      while (i + m < n && m < kRunRows && slots[i + m] == slots[i] + m) ++m;
      const char* src = static_cast<const char*>(ws_.shard) + slots[i] * static_cast<std::int64_t>(pitch);
      float* o = out + i * dim_;
      if (dtype_ == Dtype::kFloat32) {
        CHECK_CUDA(cudaMemcpy2D(o, width, src, pitch, width, static_cast<std::size_t>(m), cudaMemcpyDeviceToHost));
      } else {
        halfs.resize(static_cast<std::size_t>(m * dim_));
        CHECK_CUDA(cudaMemcpy2D(halfs.data(), width, src, pitch, width, static_cast<std::size_t>(m),
                                cudaMemcpyDeviceToHost));
        for (std::size_t e = 0; e < halfs.size(); ++e)
          o[e] = dtype_ == Dtype::kFloat16 ? half::from_f16(halfs[e]) : half::from_bf16(halfs[e]);
      }
      i += m;
    }
  }

  const AttributeTable& attribute_table() const override { return host_table_; }

  /// One 8-byte status readback into pinned memory per call (not counted in the transfer
  /// counters); returns after `stream` has drained. @throws Error naming the first bad query.
  void prepare_queries(float* queries, int batch, void* stream, std::uint8_t* invalid) override {
    check_batch(batch, limits_);
    if (batch == 0) return;
    SHARDTOPK_EXPECTS(queries != nullptr, "prepare_queries: no queries given");
    DeviceGuard guard(device_);
    const cudaStream_t s = stream ? static_cast<cudaStream_t>(stream) : stream_;
    if (invalid) {  // the stream-ordered path: mark, do not wait
      validate_queries_marking(queries, batch, dim_, metric_ == Metric::kCosine, invalid, s);
      return;
    }
    validate_queries(queries, batch, dim_, metric_ == Metric::kCosine, ws_.status + kStatusValues, s);
    CHECK_CUDA(cudaMemcpyAsync(host_status_, ws_.status + kStatusValues, sizeof(unsigned long long),
                               cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    const unsigned long long st = host_status_[0];
    if (st == kQueriesOk) return;
    const QueryProblem p = decode_query_status(st);
    if (p.zero_norm)
      throw Error(detail::concat("query ", p.query, " has zero norm and cannot be scored by cosine similarity"));
    float v = 0.0f;
    CHECK_CUDA(cudaMemcpyAsync(&host_status_[1], queries + p.query * dim_ + p.column, sizeof(float),
                               cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    std::memcpy(&v, &host_status_[1], sizeof v);
    throw Error(detail::concat("query ", p.query, " of the batch has a non-finite value (", v, ") at column ",
                               p.column));
  }

  /// One CUDA graph per (queries, out, k, batch, epilogue), captured once and replayed on the
  /// search's stream. Batch 1 returns without waiting; batch ≥ 2 waits for its overflow flags
  /// and re-runs an overflowing query through the batch-1 scan (same bits). Searches share the
  /// engine's workspace: one on another stream must be ordered after the previous one.
  void search(const SearchArgs& a) override {
    check_search_args(a, limits_);
    const cudaStream_t s = a.stream ? static_cast<cudaStream_t>(a.stream) : stream_;
    DeviceGuard guard(device_);
    if (a.batch == 0) {  // nothing to search; the epilogue still runs (on an empty list)
      if (a.epilogue) a.epilogue->enqueue(a.out, 0, a.k, s);
      return;
    }
    // Filters (evaluated now, outside the search's graph: the programs change from search to
    // search) and deleted rows. Filters the shard's bounds prove every row passes are dropped:
    // the unfiltered search returns the same rows, on its faster schedule.
    const bool filtered = rows_ > 0 && a.filters.count > 0 && !every_row_passes(a.filters, a.batch);
    // Windows and counts (ranges, pages, ranks, stats): every query through the batch-1 scan,
    // whose exact scores the window pass reads before the select.
    const bool windowed = a.windows != nullptr || a.counts != nullptr;
    const bool force_scan = search_path_ == SearchPath::kScan,
               force_gemm = search_path_ == SearchPath::kGemm || search_path_ == SearchPath::kCublas;
    const bool batched = rows_ > 0 && !windowed && !((a.batch == 1 && !force_gemm) || force_scan);
    if (filtered) filters_->prepare(a.filters, a.batch, /*row_masks=*/!batched, s);
    const std::uint32_t* live = rows_ > 0 && slots_.dead() > 0 ? ws_.live : nullptr;
    RowMasks masks = filtered ? filters_->masks(live) : RowMasks{};
    if (!filtered && live) {
      masks.live = live;
      masks.words = ws_.mask_words;
    }
    const RowMasks* m = filtered || live ? &masks : nullptr;
    const int mask_kinds = (filtered ? GraphCache::kMaskFilters : 0) | (live ? GraphCache::kMaskLive : 0);
    const GraphCache::Key key{a.queries, a.out, a.k, a.batch, a.epilogue, mask_kinds};
    // The epilogue's direct target, where the answer comes from a select's final sort (a search
    // without filters or windows of a non-empty shard): written there, no epilogue step after it.
    const SearchEpilogue::Direct* direct =
        a.epilogue && rows_ > 0 && !filtered && !windowed ? a.epilogue->direct() : nullptr;
    ExportTarget ex;
    if (direct) ex = ExportTarget{direct->ids, direct->scores, direct->l2};
    // Batches of 2 to few_.max_batch without masks: one pass over the shard for all of them (the
    // batch-1 arithmetic: the same bits), no host synchronisation.
    if (batched && m == nullptr &&
        a.batch <= (search_path_ == SearchPath::kAuto  ? few_.max_batch
                    : search_path_ == SearchPath::kFew ? few_.fit_batch
                                                       : 0)) {
      graphs_.run(key, s, [&] {
        ScanFewArgs f;
        f.shard = ws_.shard;
        f.ids = ws_.ids;
        f.queries = a.queries;
        f.batch = a.batch;
        f.k = a.k;
        f.out = a.out;
        f.scores = ws_.scores;
        f.states = ws_.few;
        f.cand = ws_.pool;
        f.dir = scan_args_.dir;
        f.exp = ex;
        scan_few(scan_, few_, f, s);
        if (a.epilogue && !direct) a.epilogue->enqueue(a.out, a.batch, a.k, s);
      });
      return;
    }
    if (batched) return search_batched(a, key, s, m);
    if (windowed) return search_windowed(a, s, m);
    // Batch 1 (or an empty shard): one scan + select per query, then the epilogue: one graph
    // (a filtered query's scan reads its program index on the device: one graph serves all).
    graphs_.run(key, s, [&] {
      if (rows_ == 0) {
        fill_pad(a.out, static_cast<std::int64_t>(a.batch) * a.k, s);
      } else {
        for (int q = 0; q < a.batch; ++q) scan_one(a, q, s, m, nullptr, ex.at(q * static_cast<std::int64_t>(a.k)));
      }
      if (a.epilogue && !direct) a.epilogue->enqueue(a.out, a.batch, a.k, s);
    });
  }

  // ------------------------------------------------------------ streamed load

  float* load_buffer(std::int64_t rows) override {
    return static_cast<float*>(stream_buffer(rows, RowFormat::kFloat32, "load_buffer"));
  }
  std::uint16_t* load_buffer_bits(std::int64_t rows) override {
    return static_cast<std::uint16_t*>(stream_buffer(rows, RowFormat::kFloat16Bits, "load_buffer_bits"));
  }
  void load_rows(std::int64_t first, std::int64_t rows, const float* data) override {
    stream_block(first, rows, data, RowFormat::kFloat32, "load_rows");
  }
  void load_rows_bits(std::int64_t first, std::int64_t rows, const std::uint16_t* bits) override {
    stream_block(first, rows, bits, RowFormat::kFloat16Bits, "load_rows_bits");
  }

  bool measures_loaded_norms() const override { return true; }
  LoadedNorms loaded_norms() const override {
    SHARDTOPK_EXPECTS(loaded_norms_.has_value(), "loaded_norms: no streamed load of this CUDA engine has finished");
    return *loaded_norms_;
  }

  void finish_load() override {
    SHARDTOPK_EXPECTS(streaming_, "finish_load: this CUDA engine was not built with ShardInput::streamed, or its "
                                  "load has finished");
    SHARDTOPK_EXPECTS(up_rows_done_ == base_rows_, "finish_load: ", up_rows_done_, " of ", base_rows_, " rows loaded");
    if (base_rows_ == 0) {
      streaming_ = false;
      loaded_norms_ = LoadedNorms{};
      return;
    }
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    streaming_ = false;
    for (PinnedBuffer& b : up_buf_) b.reset();
    loaded_norms_ = combined_load_norms();
    ShardInput s;
    s.rows = base_rows_;
    s.dim = dim_;
    s.streamed = true;
    s.stream_format = stream_format_;
    s.ids = stream_ids_;
    s.first_row = stream_first_row_;
    upload_checks(s);
    stream_ids_ = nullptr;
  }

 private:
  /// The checks every streamed-load call makes: a load under way, in the shard's format.
  void check_streaming(RowFormat format, const char* what) const {
    engine_detail::check_stream_call(streaming_, stream_format_, format, "CUDA engine", what);
  }

  /// load_buffer / load_buffer_bits: one of two pinned blocks of `rows` rows in `format`, once
  /// the copy that last read it has finished.
  void* stream_buffer(std::int64_t rows, RowFormat format, const char* what) {
    check_streaming(format, what);
    SHARDTOPK_EXPECTS(rows >= 1 && rows <= base_rows_, what, ": ", rows, " rows out of range 1 .. ", base_rows_);
    DeviceGuard guard(device_);
    if (up_cap_rows_ == 0) up_cap_rows_ = rows;
    SHARDTOPK_EXPECTS(rows <= up_cap_rows_, what, ": ", rows, " rows, more than the first call's ", up_cap_rows_);
    const int i = up_next_;
    up_next_ ^= 1;
    if (!up_buf_[i]) {  // allocated on first use: a one-block shard pins one buffer, not two
      up_buf_[i].allocate(format_bytes(format) * static_cast<std::size_t>(up_cap_rows_) * dim_);
      up_ev_[i].create(cudaEventDisableTiming);
      CHECK_CUDA(cudaEventRecord(up_ev_[i].get(), stream_));
    }
    CHECK_CUDA(cudaEventSynchronize(up_ev_[i].get()));  // its previous copy has left the buffer
    return up_buf_[i].as<char>();
  }

  /// load_rows / load_rows_bits: rows [first, first + rows) from `data` in `format`.
  void stream_block(std::int64_t first, std::int64_t rows, const void* data, RowFormat format, const char* what) {
    check_streaming(format, what);
    SHARDTOPK_EXPECTS(first == up_rows_done_ && rows >= 0 && first + rows <= base_rows_, what, ": rows [", first, ", ",
                      first + rows, ") out of order or range: expected row ", up_rows_done_, " of ", base_rows_);
    SHARDTOPK_EXPECTS(rows == 0 || data != nullptr, what, ": no data");
    if (rows == 0) return;
    DeviceGuard guard(device_);
    upload_block(data, format, rows, first);
    // Data inside one of load_buffer()'s pinned buffers: its event says when the copy has left
    // it. Any other memory: wait here, so the caller may reuse or free it on return (pinned
    // memory of its own would otherwise still be read by the asynchronous copy).
    bool ours = false;
    for (int i = 0; i < 2; ++i) {
      if (up_buf_[i].holds(data)) {
        CHECK_CUDA(cudaEventRecord(up_ev_[i].get(), stream_));
        ours = true;
      }
    }
    if (!ours) CHECK_CUDA(cudaStreamSynchronize(stream_));
    up_rows_done_ += rows;
  }

  /// The device named by the options: checked, made current, its properties read.
  void select_device() {
    int count = 0;
    const cudaError_t cerr = cudaGetDeviceCount(&count);
    if (cerr != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error(detail::concat("CUDA engine: no usable GPU (cudaGetDeviceCount: ", cudaGetErrorName(cerr), ", ",
                                 cudaGetErrorString(cerr), ")"));
    }
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");  // for the message only
    SHARDTOPK_EXPECTS(device_ >= 0 && device_ < count, "CUDA engine: device ", device_, " does not exist (", count,
                      " visible; CUDA_VISIBLE_DEVICES=", (visible ? visible : "<unset>"), ")");
    CHECK_CUDA(cudaSetDevice(device_));
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, device_));
    device_name_ = prop.name;
    sms_ = prop.multiProcessorCount;
    smem_optin_ = prop.sharedMemPerBlockOptin;
  }

  [[noreturn]] void throw_does_not_fit(std::size_t free_b, std::size_t total_b) const {
    throw Error(detail::concat(
        "CUDA engine on device ", device_, " (", device_name_, "): the shard of ", rows_, " rows x ", dim_, " dims in ",
        to_string(dtype_), " needs ", plan_.total + plan_.table_bytes, " bytes of device memory (shard, ids and norms ",
        plan_.shard_bytes, ", query/candidate buffers and workspace ", plan_.total - plan_.shard_bytes,
        ", filter attributes and row ids ", plan_.table_bytes, ") but only ", free_b, " of ",
        total_b, " bytes are free; add ranks (mpirun -np) so that each shard is smaller",
        (dtype_ == Dtype::kFloat32 ? ", or store the shard as float16/bfloat16 (engine.dtype)" : ""),
        ", or lower search.batch_max / search.k_max"));
  }

  /// Whether every query's filter (f.count ≥ 1) passes every row of the shard, as the attribute
  /// table's bounds prove (analyse_table): a host check of at most f.count programs.
  bool every_row_passes(const FilterBatch& f, int batch) const {
    std::vector<std::int8_t> all(static_cast<std::size_t>(f.count), -1);  // -1: not analysed yet
    for (int q = 0; q < batch; ++q) {
      const std::int32_t p = f.query_program[q];
      if (p < 0) continue;
      std::int8_t& v = all[static_cast<std::size_t>(p)];
      if (v < 0) v = analyse_table(*f.programs[p], host_table_) == BlockVerdict::kAll ? 1 : 0;
      if (v == 0) return false;
    }
    return true;
  }

  /// Query q of a search through the batch-1 scan, into its row of a.out (masks: its rows; with
  /// filters, the filtered scan of its filter's candidate blocks; with a window, the best k rows
  /// inside it, its counts added to window->counts); `ex`: its row of the direct export, if any
  /// (unfiltered queries only).
  void scan_one(const SearchArgs& a, int q, cudaStream_t s, const RowMasks* masks,
                const WindowArgs* window = nullptr, ExportTarget ex = ExportTarget{}) {
    ScanSelectArgs args = scan_args_;
    args.exp = ex;
    args.query = a.queries + static_cast<std::int64_t>(q) * dim_;
    args.k = a.k;
    args.out = a.out + static_cast<std::int64_t>(q) * a.k;
    if (window) args.window = *window;
    if (masks && masks->index) return filters_->scan_one(args, q, masks->live, s);
    if (masks) {
      args.masks = *masks;
      args.mask_query = q;
    }
    scan_select(scan_, args, s);
  }

  /// The shard's attribute table on the device (its columns and global ids: filters on
  /// attributes and on ids), the filter staging, and the live mask (every row live).
  void init_filters(const ShardInput& s, const EngineOptions& opt) {
    // Live: the shard's rows; reserved slots are dead until written. Searches cover every slot.
    slots_ = Slots(rows_, base_rows_, rows_);
    if (rows_ == 0) return;
    table_.emplace(host_table_, stream_);
    filters_.emplace(ws_, table_->table(), scan_, opt.filter_scan, limits_, sms_, opt.column_orders, stream_);
    CHECK_CUDA(cudaMemcpyAsync(ws_.live, slots_.live_mask().data(), sizeof(std::uint32_t) * slots_.live_mask().size(),
                               cudaMemcpyHostToDevice, stream_));
  }

  /// One graph: the batched search, its overflow flags to the host, the epilogue (correct
  /// unless a pool overflowed: then queued again after the fallback). A filtered batch follows
  /// its chunk schedule (which chunks each query scores, read back from the device first): one
  /// graph when it runs every chunk for every query (the programs are read on the device), else
  /// launched directly, the schedule changing from search to search.
  void search_batched(const SearchArgs& a, GraphCache::Key key, cudaStream_t s, const RowMasks* masks) {
    const ChunkSchedule* schedule =
        masks && masks->index ? &filters_->schedule(*batched_, a.filters, a.batch, a.k, s) : nullptr;
    if (schedule) std::get<5>(key) |= GraphCache::kSeeded;
    auto enqueue = [&] {
      batched_->enqueue(a.queries, a.batch, a.k, a.out, max_sq_, s, masks, schedule);
      CHECK_CUDA(cudaMemcpyAsync(host_overflow_, ws_.overflow, static_cast<std::size_t>(a.batch) * 4,
                                 cudaMemcpyDeviceToHost, s));
      if (a.epilogue) a.epilogue->enqueue(a.out, a.batch, a.k, s);
    };
    if (schedule && !schedule->full) enqueue();
    else graphs_.run(key, s, enqueue);
    CHECK_CUDA(cudaStreamSynchronize(s));
    bool redo = false;
    for (int q = 0; q < a.batch; ++q) {
      if (host_overflow_[q] == 0) continue;
      ++counters_.batched_fallbacks;  // a pool overflowed (adversarial row order): the exact batch-1 path, same bits
      if (masks && masks->index) filters_->row_masks_of(a.filters.query_program[q], s);
      scan_one(a, q, s, masks);
      redo = true;
    }
    if (a.epilogue && redo) a.epilogue->enqueue(a.out, a.batch, a.k, s);
  }

  /// A search with windows or counts: each query through the batch-1 scan (filtered or not) and
  /// the window pass (kernels/window_select), launched directly (each query's window is a kernel
  /// argument, so nothing is captured); a.counts zeroed first. Returns without waiting.
  void search_windowed(const SearchArgs& a, cudaStream_t s, const RowMasks* masks) {
    if (a.counts)
      CHECK_CUDA(cudaMemsetAsync(a.counts, 0, sizeof(QueryCounts) * static_cast<std::size_t>(a.batch), s));
    if (rows_ == 0) {
      fill_pad(a.out, static_cast<std::int64_t>(a.batch) * a.k, s);
    } else {
      WindowArgs w;
      w.on = true;
      w.scanned = rows_ - slots_.dead();
      for (int q = 0; q < a.batch; ++q) {
        w.window = a.windows ? a.windows[q] : QueryWindow{};
        w.counts = a.counts ? a.counts + q : nullptr;
        scan_one(a, q, s, masks, &w);
      }
    }
    if (a.epilogue) a.epilogue->enqueue(a.out, a.batch, a.k, s);
  }

  // ------------------------------------------------------------ upload

  /// Uploads (or generates) the rows in chunks through the scores workspace: float32 staging →
  /// storage dtype, zero-padded to dpad; then ids, ‖x‖² and the largest norm. Synchronous;
  /// checks float16/bfloat16 overflow and, for generated cosine shards, zero norms.
  void upload(const ShardInput& s) {
    if (rows_ > 0) {  // every slot: zeros, the ids of the host table (kPadId past the rows)
      CHECK_CUDA(cudaMemsetAsync(ws_.shard, 0, static_cast<std::size_t>(rows_) * dpad_ * dtype_bytes(dtype_), stream_));
      if (ws_.row_sq) CHECK_CUDA(cudaMemsetAsync(ws_.row_sq, 0, sizeof(float) * static_cast<std::size_t>(rows_), stream_));
      CHECK_CUDA(cudaMemcpyAsync(ws_.ids, host_table_.global_ids().data(), sizeof(std::int64_t) * rows_,
                                 cudaMemcpyHostToDevice, stream_));
    }
    if (base_rows_ == 0) {
      streaming_ = s.streamed;  // an empty streamed shard: finish_load() only
      stream_format_ = s.stream_format;
      CHECK_CUDA(cudaStreamSynchronize(stream_));
      return;
    }
    CHECK_CUDA(cudaMemsetAsync(ws_.status, 0xFF, 2 * sizeof(unsigned long long), stream_));
    if (s.streamed) {  // rows follow through load_rows(); finish_load() ends with upload_checks()
      streaming_ = true;
      stream_format_ = s.stream_format;
      stream_ids_ = s.ids;
      stream_first_row_ = s.first_row;
      norm_parts_.allocate(sizeof(RowNormPart) * kLoadNormBlocks);
      CHECK_CUDA(cudaMemsetAsync(norm_parts_.get(), 0xFF, sizeof(RowNormPart) * kLoadNormBlocks, stream_));
      return;
    }
    if (s.generated && metric_ != Metric::kCosine) {
      generate_store_rows(dtype_, ws_.shard, base_rows_, dim_, dpad_, s.seed, s.first_row, stream_);
    } else if (s.generated) {  // cosine: generated float32 rows are normalised before storage
      const std::int64_t chunk = staging_rows();
      for (std::int64_t r0 = 0; r0 < base_rows_; r0 += chunk) {
        const std::int64_t m = std::min(chunk, base_rows_ - r0);
        generate_rows_f32(ws_.scores, m, dim_, s.seed, s.first_row + r0, stream_);
        normalize_rows_f32(ws_.scores, m, dim_, s.first_row + r0, ws_.status + kStatusZeroNorm, stream_);
        store_staged(m, r0);
      }
    } else {
      upload_block(s.data, RowFormat::kFloat32, base_rows_, 0);
    }
    upload_checks(s);
  }

  /// Rows per chunk staged in the scores workspace during an upload, `elem` bytes a value
  /// (float32: 4; binary16 bits: 2).
  std::int64_t staging_rows(std::size_t elem = sizeof(float)) const {
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(plan_.scores_bytes / (elem * dim_)));
  }

  /// Bytes of one row in a write_rows batch: its slot, its attribute words and id (8 bytes
  /// each), its float32 values.
  std::size_t write_row_bytes() const {
    return 8 * static_cast<std::size_t>(host_table_.columns() + 2) + sizeof(float) * static_cast<std::size_t>(dim_);
  }

  /// Rows per write_rows batch: one batch fits the scores workspace and one pinned staging
  /// buffer (kWriteStageBytes), with 16 bytes of alignment slack. 0 only for dim within a few of
  /// the largest (2^20): then write_lone_rows.
  std::int64_t write_batch_rows() const {
    const std::size_t room = std::min<std::size_t>(plan_.scores_bytes, kWriteStageBytes);
    return room > 16 ? static_cast<std::int64_t>((room - 16) / write_row_bytes()) : 0;
  }

  /// write_rows' batches, `order`: w's rows by slot. A batch of m rows is laid out as
  /// [slots m | attribute words [columns + 1, m] (the last: global ids) | rows m × dim float32,
  /// 16-byte aligned] in one of two pinned staging buffers and goes to the scores workspace in
  /// ONE copy of about m · write_row_bytes() bytes; then the slot-list store, norms and id
  /// scatter, and the attribute table's scatter; after the last batch, the bounds of the blocks
  /// the call's slots span (16 · (columns + 1) bytes per block). No wait between batches: the host fills one
  /// staging buffer while the other's copy runs, waiting (its event) only for the copy that
  /// last read the buffer it is about to fill; the next copy into ws_.scores is ordered on
  /// stream_ after this batch's kernels that read it.
  void write_batches(const SlotRows& w, const std::vector<std::int64_t>& order) {
    const std::int64_t n = w.n, per = std::min(write_batch_rows(), n);
    const int columns = host_table_.columns();
    if (!stage_[0]) {
      for (int b = 0; b < 2; ++b) {
        stage_[b].allocate(kWriteStageBytes);
        stage_ev_[b].create(cudaEventDisableTiming);
        CHECK_CUDA(cudaEventRecord(stage_ev_[b].get(), stream_));
      }
    }
    const std::size_t row_bytes = sizeof(float) * static_cast<std::size_t>(dim_);
    const std::vector<std::int64_t>& gids = host_table_.global_ids();
    char* dev = reinterpret_cast<char*>(ws_.scores);
    for (std::int64_t b0 = 0; b0 < n; b0 += per) {
      const std::int64_t m = std::min(per, n - b0);
      const std::size_t words_off = sizeof(std::int64_t) * static_cast<std::size_t>(m);
      const std::size_t rows_off = (words_off * static_cast<std::size_t>(columns + 2) + 15) / 16 * 16;
      const int sb = stage_next_;
      stage_next_ ^= 1;
      CHECK_CUDA(cudaEventSynchronize(stage_ev_[sb].get()));  // the copy that last read this buffer is done
      char* host = stage_[sb].as<char>();
      auto* slots_h = reinterpret_cast<std::int64_t*>(host);
      auto* words_h = reinterpret_cast<std::uint64_t*>(host + words_off);
      for (std::int64_t r = 0; r < m; ++r) {
        const std::int64_t i = order[b0 + r], s = w.slots[i];
        slots_h[r] = s;
        for (int c = 0; c < columns; ++c) {
          const AttributeColumn& col = host_table_.column(c);
          std::uint64_t v;
          if (col.type == AttributeType::kInt64) std::memcpy(&v, &col.ints[s], 8);
          else std::memcpy(&v, &col.reals[s], 8);
          words_h[c * m + r] = v;
        }
        std::memcpy(&words_h[columns * m + r], &gids[s], 8);
        std::memcpy(host + rows_off + row_bytes * r, w.vectors + i * dim_, row_bytes);
      }
      CHECK_CUDA(cudaMemcpyAsync(dev, host, rows_off + row_bytes * m, cudaMemcpyHostToDevice, stream_));
      CHECK_CUDA(cudaEventRecord(stage_ev_[sb].get(), stream_));
      const auto* slots = reinterpret_cast<const std::int64_t*>(dev);
      const auto* words = reinterpret_cast<const std::uint64_t*>(dev + words_off);
      store_rows_at(reinterpret_cast<const float*>(dev + rows_off), m, dim_, dtype_, ws_.shard, dpad_, slots,
                    ws_.status + kStatusValues, stream_);
      row_norms_at(dtype_, ws_.shard, m, dpad_, slots, ws_.row_sq, ws_.status + kStatusMaxSq, stream_);
      scatter_ids(reinterpret_cast<const std::int64_t*>(words + columns * m), m, slots, ws_.ids, stream_);
      table_->scatter_rows(slots, words, m, stream_);
    }
    // The block bounds once, after the batches: pageable copies, which may wait for the stream,
    // would otherwise stall the host between batches.
    table_->update_bounds(host_table_, RowRange{w.slots[order.front()], w.slots[order.back()] + 1}, stream_);
  }

  /// write_rows when the workspace holds a row but not its slot and id too (write_batch_rows()
  /// 0): each row as a block of one, its id copied from the host table. Stream order protects
  /// ws_.scores as in write_batches; the sources are pageable (read before the copy returns).
  void write_lone_rows(const SlotRows& w, const std::vector<std::int64_t>& order) {
    const std::int64_t elem = static_cast<std::int64_t>(dtype_bytes(dtype_));
    for (const std::int64_t i : order) {
      const std::int64_t s = w.slots[i];
      CHECK_CUDA(cudaMemcpyAsync(ws_.scores, w.vectors + i * dim_, sizeof(float) * dim_, cudaMemcpyHostToDevice,
                                 stream_));
      store_rows(ws_.scores, 1, dim_, dtype_, ws_.shard, dpad_, s, ws_.status + kStatusValues, stream_);
      row_norms(dtype_, static_cast<const char*>(ws_.shard) + s * dpad_ * elem, 1, dpad_,
                ws_.row_sq ? ws_.row_sq + s : nullptr, ws_.status + kStatusMaxSq, stream_);
      CHECK_CUDA(cudaMemcpyAsync(ws_.ids + s, host_table_.global_ids().data() + s, sizeof(std::int64_t),
                                 cudaMemcpyHostToDevice, stream_));
      table_->update_rows(host_table_, RowRange{s, s + 1}, stream_);
    }
  }

  /// The float32 rows [m, dim] staged in the scores workspace → storage rows [first, first + m).
  void store_staged(std::int64_t m, std::int64_t first) {
    store_rows(ws_.scores, m, dim_, dtype_, ws_.shard, dpad_, first, ws_.status + kStatusValues, stream_);
  }

  /// Host rows data [rows, dim] in `format` (float32 values or binary16 bits) → storage rows
  /// [first, first + rows), through the scores workspace in chunks (H2D copy of the values as
  /// they are, then convert + pad, in stream order). A pageable source is staged by
  /// cudaMemcpyAsync before it returns; the caller decides how to wait for a pinned one.
  void upload_block(const void* data, RowFormat format, std::int64_t rows, std::int64_t first) {
    const std::size_t elem = format_bytes(format);
    const std::int64_t chunk = staging_rows(elem);
    for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const std::int64_t m = std::min(chunk, rows - r0);
      CHECK_CUDA(cudaMemcpyAsync(ws_.scores, static_cast<const char*>(data) + elem * r0 * dim_, elem * m * dim_,
                                 cudaMemcpyHostToDevice, stream_));
      if (norm_parts_)  // a streamed load: its norms, from the staged values
        staged_norm_max(ws_.scores, format, m, dim_, first + r0, norm_parts_.as<RowNormPart>(), stream_);
      if (format == RowFormat::kFloat16Bits)
        store_f16_bits_rows(Float16BitsView{reinterpret_cast<const std::uint16_t*>(ws_.scores), m, dim_},
                            ShardStorageView{ws_.shard, dtype_, dpad_}, first + r0, ws_.status + kStatusValues,
                            stream_);
      else
        store_staged(m, first + r0);
    }
  }

  /// The streamed load's LoadedNorms from the parts staged_norm_max kept (after the stream has
  /// passed them); the parts are freed.
  LoadedNorms combined_load_norms() {
    std::vector<RowNormPart> parts(kLoadNormBlocks);
    CHECK_CUDA(cudaMemcpy(parts.data(), norm_parts_.get(), sizeof(RowNormPart) * parts.size(), cudaMemcpyDeviceToHost));
    norm_parts_.reset();
    LoadedNorms best;
    for (const RowNormPart& p : parts)
      if (p.row >= 0 && (best.row < 0 || p.norm > best.max_norm || (p.norm == best.max_norm && p.row < best.row)))
        best = LoadedNorms{p.row, p.norm};
    return best;
  }

  /// The end of every upload: ‖x‖², the largest norm, and the status checks (zero-norm cosine
  /// rows, storage overflow). Synchronous.
  void upload_checks(const ShardInput& s) {
    CHECK_CUDA(cudaMemsetAsync(ws_.status + kStatusMaxSq, 0, sizeof(unsigned long long), stream_));
    row_norms(dtype_, ws_.shard, base_rows_, dpad_, ws_.row_sq, ws_.status + kStatusMaxSq, stream_);
    CHECK_CUDA(cudaMemcpyAsync(host_status_, ws_.status, 3 * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                               stream_));
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    if (host_status_[kStatusZeroNorm] != kStatusOk)
      throw Error(detail::concat("corpus row ", host_status_[kStatusZeroNorm],
                                 " has zero norm and cannot be scored by cosine similarity"));
    const unsigned long long st = host_status_[kStatusValues];
    if (st != kStatusOk) {
      const std::int64_t row = static_cast<std::int64_t>(st) / dim_, col = static_cast<std::int64_t>(st) % dim_;
      const std::int64_t gid = s.ids ? s.ids[row] : s.first_row + row;
      if (s.streamed && s.stream_format == RowFormat::kFloat16Bits) {  // the file's value, stored as it is
        std::vector<float> stored(static_cast<std::size_t>(dim_));
        read_rows(&row, 1, stored.data());
        throw Error(nonfinite_bits_message(gid, stored[static_cast<std::size_t>(col)], col));
      }
      const std::string val = s.generated ? std::string(" (generated)")
                              : s.data    ? " value " + detail::concat(s.data[st])
                                          : std::string();
      throw Error(detail::concat("corpus row ", gid, val, " at column ", col, " overflows ", to_string(dtype_),
                                 "; use engine.dtype float32"));
    }
    std::memcpy(&max_sq_, &host_status_[kStatusMaxSq], sizeof max_sq_);
  }

  int device_;
  std::string device_name_;
  int sms_ = 1;
  std::size_t smem_optin_ = 0;
  Metric metric_;
  Dtype dtype_;
  std::int64_t rows_;       // slots (ShardInput::capacity): every search covers them all
  std::int64_t base_rows_;  // rows loaded at build: slots [0, base_rows_)
  std::int64_t dim_, dpad_ = 0;
  EngineLimits limits_;
  SearchPath search_path_;
  Plan plan_;
  Workspace ws_;
  int cap_ = 0;
  double max_sq_ = 0.0;
  cudaStream_t stream_ = nullptr;  // own_stream_ or the caller's
  ScanSelectPlan scan_;
  ScanSelectArgs scan_args_;  // the workspace part of every batch-1 search
  ScanFewPlan few_;           // batches of 2 .. few_.max_batch without masks (scan_few)
  TransferCounters counters_;
  // Declaration order = reverse destruction order: graphs, cuBLAS and the streams go before the
  // memory their work used is freed.
  DeviceBuffer arena_;
  PinnedBuffer pinned_;  // status words (host_status_), then overflow flags (host_overflow_)
  unsigned long long* host_status_ = nullptr;
  std::uint32_t* host_overflow_ = nullptr;
  Stream own_stream_;
  // streamed load (ShardInput::streamed): two pinned blocks used in turn, their copy events
  bool streaming_ = false;
  DeviceBuffer norm_parts_;                 // a streamed load's RowNormPart [kLoadNormBlocks]
  std::optional<LoadedNorms> loaded_norms_;  // after its finish_load
  RowFormat stream_format_ = RowFormat::kFloat32;  // the blocks' values (ShardInput::stream_format)
  PinnedBuffer up_buf_[2];
  Event up_ev_[2];
  std::int64_t up_cap_rows_ = 0, up_rows_done_ = 0, stream_first_row_ = 0;
  int up_next_ = 0;
  const std::int64_t* stream_ids_ = nullptr;
  // write_rows: two pinned staging buffers used in turn (allocated on the first write), the
  // events of the copies out of them
  PinnedBuffer stage_[2];
  Event stage_ev_[2];
  int stage_next_ = 0;
  std::optional<BatchedSearch> batched_;
  // filters: the attribute table on the device, a search's programs evaluated on it
  std::optional<DeviceFilterTableStorage> table_;
  std::optional<FilteredSearch> filters_;
  AttributeTable host_table_;  // [rows_] ids and columns of every slot (write_rows, snapshots)
  Slots slots_;                // the live mask as on the device (ws_.live), and the dead count
  GraphCache graphs_;
};

}  // namespace

std::unique_ptr<Engine> make_cuda_engine(const ShardInput& shard, Metric metric, Dtype dtype,
                                         const EngineLimits& limits, const EngineOptions& options, void* stream) {
  return std::make_unique<CudaEngine>(shard, metric, dtype, limits, options, static_cast<cudaStream_t>(stream));
}

}  // namespace shardtopk
