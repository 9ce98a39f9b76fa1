#pragma once
/// @file engine.hpp
/// A resident shard that scores query batches and selects a local top-k.
///
/// An engine knows nothing of MPI, NCCL, merging or how answers reach a caller: it holds one
/// rank's rows (host memory for the CPU engine, one GPU for the CUDA engine), and turns a batch
/// of queries in its memory space into that shard's best k candidates per query, in the same
/// space, ordered on a stream. Every buffer it needs is allocated at construction from
/// `EngineLimits` (DESIGN.md invariant 5): a search allocates nothing.
///
/// The data path around it (query staging, broadcast, all-gather, merge, export) belongs to the
/// index and the communicators (index.hpp, communicator.hpp).

#include <cstdint>
#include <memory>
#include <string>

#include "shardtopk/config.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk {

class AttributeTable;
class FilterProgram;

/// A rank's rows, float32 on the host, ready for upload (or streamed later: `streamed`). For
/// cosine the rows are already L2-normalised (see `normalize_rows`). `ids` are the global ids
/// of the rows.
struct ShardInput {
  const float* data = nullptr;  ///< [rows, dim], row-major; unused (may be nullptr) when `generated` or `streamed`
  std::int64_t rows = 0;
  std::int64_t dim = 0;
  const std::int64_t* ids = nullptr;  ///< [rows]; nullptr: global ids first_row + i
  /// Generated shard (bench_scaling, tests): row i holds generated_value(seed, first_row + i, j)
  /// (shardtopk/generator.hpp), L2-normalised for cosine with normalize_rows()' arithmetic. The
  /// CUDA engine makes it on its device (no host copy); the CPU engine materialises it.
  bool generated = false;
  std::uint64_t seed = 0;
  std::int64_t first_row = 0;
  /// Streamed shard (`data` unused): the engine takes the ids now and the rows later, through
  /// load_buffer() / load_rows() / finish_load(), so that the caller can read the next block of
  /// a file while the previous one is copied to the device. The CPU engine streams too (it
  /// converts each block into its storage).
  bool streamed = false;
  /// The values of a streamed shard's blocks: kFloat32 (load_buffer / load_rows) or kFloat16Bits
  /// (load_buffer_bits / load_rows_bits: IEEE binary16 bit patterns, half the bytes). Unused
  /// unless `streamed`.
  RowFormat stream_format = RowFormat::kFloat32;
  /// The shard's attribute columns and global ids for filtered searches (filter.hpp), one row per
  /// shard row; nullptr: no attribute columns (filters on global ids only). Read while the
  /// engine is built; the engine keeps its own copy (device memory on a GPU).
  const AttributeTable* attributes = nullptr;
  /// Slots the engine reserves for updates (Engine::write_rows), ≥ rows; 0: rows. The shard's
  /// rows fill slots [0, rows); slots [rows, capacity) start empty (dead: never returned).
  /// Every buffer is sized for the capacity, so writes allocate nothing.
  std::int64_t capacity = 0;
};

/// Sizes fixed at start-up.
struct EngineLimits {
  int batch_max = 64;    ///< queries per search()
  int k_max = 1024;      ///< largest k
  int max_filters = 64;  ///< distinct filters per search() (each one's row mask is kept at once)
  int attribute_columns = 0;  ///< attribute columns of the shard (ShardInput::attributes), for the memory plan
};

/// Tuning and test switches of the engines, from the config's `engine.*` keys (config.hpp;
/// docs/OPERATIONS.md lists them with what each one trades). Validated by the config loader;
/// engines read them once, at construction.
struct EngineOptions {
  int threads = 0;   ///< CPU engine: worker threads (0: hardware concurrency)
  int device = 0;    ///< CUDA engine: the GPU
  bool cuda_graphs = true;    ///< CUDA engine: replay each search shape from a captured CUDA graph
  bool scan_l2_hints = true;  ///< CUDA batch-1 scan: evict-first loads, the last 32 MiB kept, sweeps alternating direction
  ScanRows scan_rows = ScanRows::kAuto;               ///< CUDA batch-1 scan: rows per warp
  ScanSchedule scan_schedule = ScanSchedule::kAuto;   ///< CUDA batch-1 scan: block schedule
  SearchPath search_path = SearchPath::kAuto;         ///< CUDA: which path serves a batch (tests)
  FilterScan filter_scan = FilterScan::kAuto;         ///< CUDA filtered batch-1 scan: dense or gathered
  /// CUDA filtered batches whose queries each filter one range of the same column: score that
  /// column's sorted order of the rows (each chunk only for the queries whose range meets it)
  /// when that scores at most a quarter of the (row, query) pairs the shard's own order would.
  bool column_orders = true;
  CpuIsa cpu_isa = CpuIsa::kAuto;                     ///< CPU engine: scoring instructions
};

/// The engine options of a config (its `engine.*` keys), for the engine on `device` (-1: the CPU
/// engine) with `threads` workers.
EngineOptions engine_options(const Config& cfg, int device, int threads);

/// What an engine is, for logs, plans and checks.
struct EngineInfo {
  std::string name;  ///< "cpu" or "cuda"
  MemSpace space = MemSpace::kHost;
  Metric metric = Metric::kInnerProduct;
  Dtype dtype = Dtype::kFloat32;
  std::int64_t rows = 0;  ///< rows of the shard as built (ShardInput::rows)
  std::int64_t capacity = 0;  ///< slots held (rows + reserved, ShardInput::capacity)
  std::int64_t dim = 0;   ///< dimension of a row (unpadded)
  int device = -1;        ///< the CUDA engine's GPU; -1 for the CPU engine
  std::string device_name;
  std::uint64_t resident_bytes = 0;  ///< bytes the engine holds in its space (shard + workspace)
};

/// Host↔device traffic counters (bytes), for tests of the data path.
struct TransferCounters {
  std::uint64_t host_to_device = 0;
  std::uint64_t device_to_host = 0;
  /// Queries of batched searches that the CUDA engine re-ran alone through the batch-1 scan
  /// because its candidate pool on the batched path overflowed (same answer, slower); 0 elsewhere.
  std::uint64_t batched_fallbacks = 0;
};

/// Work queued right behind a search, inside the engine's own launch: the CUDA engine captures
/// it into the same CUDA graph as the search (one launch, one wait), the CPU engine calls it
/// after the search. The index uses it to export a one-rank answer.
class SearchEpilogue {
 public:
  virtual ~SearchEpilogue() = default;
  /// Queues work that reads list [batch, k] (the search's output, engine space) on `stream`
  /// (cudaStream_t, or nullptr on the host). Must not synchronise (it may be under capture).
  virtual void enqueue(const Candidate* list, int batch, int k, void* stream) = 0;

  /// Where the answer goes, for an engine that can write it from its own last kernel instead of
  /// queueing enqueue() behind it (one step fewer): ids [batch, k] and reported scores
  /// [batch, k] (l2: the squared distance, the negated ranking score), at addresses the engine's
  /// device writes; the same values as enqueue()'s split of the list. Padding: id kPadId, score
  /// −inf (l2: +inf). The list [batch, k] is written too.
  struct Direct {
    std::int64_t* ids = nullptr;
    float* scores = nullptr;
    bool l2 = false;
  };
  /// The direct target, or nullptr (the default): the engine calls enqueue(). An engine may call
  /// enqueue() either way (the CPU engine does; the CUDA engine does for filtered, windowed and
  /// batched searches). Must stay the same for the epilogue's lifetime.
  virtual const Direct* direct() const { return nullptr; }
};

/// The filters of one search (host memory, read during Engine::search): the batch's distinct
/// programs and which one each query uses. The caller builds it once (the index: on rank 0, equal
/// programs merged, programs that pass every row left out); engines take it as given and evaluate
/// each program once, over every row, into one row mask.
struct FilterBatch {
  /// [count] distinct programs, each compiled against the engine's attribute schema
  /// (check_filter_fits holds; the engines do not check it again).
  const FilterProgram* const* programs = nullptr;
  int count = 0;  ///< 0 .. limits().max_filters; 0: no query is filtered
  /// [batch] query q's program, an index into `programs`, or -1: every row. Unused when count is 0.
  const std::int32_t* query_program = nullptr;
};

/// What a search saw of one query, per shard (summed over the shards by the index): 32 bytes,
/// two candidate slots, so that the counts travel in the candidates' all-gather.
struct QueryCounts {
  std::int64_t within = 0;   ///< live rows passing the filter and ahead of the window's floor (when it counts)
  std::int64_t passing = 0;  ///< live rows passing the query's filter (every live row without one)
  std::int64_t scanned = 0;  ///< live rows the query was evaluated against (the shard's live rows)
  std::int64_t reserved = 0;
};
static_assert(sizeof(QueryCounts) == 2 * sizeof(Candidate), "counts travel in two candidate slots");

/// One search: queries in, local top-k out, both in the engine's memory space.
struct SearchArgs {
  const float* queries = nullptr;  ///< [batch, dim] float32, row-major (engine space)
  int batch = 0;                   ///< 0 .. limits().batch_max
  int k = 0;                       ///< 1 .. limits().k_max
  Candidate* out = nullptr;        ///< [batch, k] (engine space), best first; padding when rows < k
  /// The stream the search is ordered on (cudaStream_t): it starts after the work already queued
  /// there and whatever follows on that stream sees its results. nullptr: the engine's stream().
  void* stream = nullptr;
  SearchEpilogue* epilogue = nullptr;  ///< optional, run on `stream` after the search
  /// Optional filters (count 0: none). The answer of a filtered query is the ordering rule's
  /// top k of exactly the rows that pass; when fewer than k pass, the rest of its row is padding.
  FilterBatch filters;
  /// Optional [batch] windows (host memory, read during the call; nullptr: every row): query q's
  /// answer is the top k of the rows that pass its filter and lie inside windows[q] (ordering.hpp).
  const QueryWindow* windows = nullptr;
  /// Optional [batch] counts (engine space; nullptr: none), written for every query of the batch.
  QueryCounts* counts = nullptr;
};

/// Rows to write into slots of an engine (Engine::write_rows). Host memory, read during the call.
struct SlotRows {
  std::int64_t n = 0;                        ///< rows, ≥ 0
  const std::int64_t* slots = nullptr;       ///< [n] distinct slots in [0, capacity), each dead
  const std::int64_t* ids = nullptr;         ///< [n] global ids
  const float* vectors = nullptr;            ///< [n, dim] float32, row-major (cosine: already L2-normalised)
  /// [attribute columns] in the engine's attribute schema order, each [n] int64_t or double as
  /// the column's type; nullptr when the shard has no attribute columns.
  const void* const* attributes = nullptr;
};

class Engine {
 public:
  virtual ~Engine() = default;

  virtual EngineInfo info() const = 0;
  virtual const EngineLimits& limits() const = 0;
  /// The engine's own stream (cudaStream_t as void*; nullptr for the CPU engine).
  virtual void* stream() const = 0;

  /// Streamed loading (ShardInput::streamed). load_buffer: host memory for `rows` rows
  /// [rows, dim] float32 (page-locked for the CUDA engine), one of two buffers used in turn; it
  /// waits until the previous copy out of that buffer has finished. `rows` may not exceed the
  /// first call's. load_rows: queues rows [first, first + rows) (local row numbers) from `data`
  /// (inside a buffer from load_buffer: returns at once; any other host memory: copied before it
  /// returns). finish_load: waits for the copies, checks that every row arrived once, computes
  /// the norms. @throws Error when the engine was not built streamed, a block is out of order,
  /// range or too large, rows are missing at the end, or a value overflows the storage type.
  /// The float32 calls serve a shard streamed as RowFormat::kFloat32 (ShardInput::stream_format)
  /// and throw for one streamed as bits.
  virtual float* load_buffer(std::int64_t rows) = 0;
  virtual void load_rows(std::int64_t first, std::int64_t rows, const float* data) = 0;
  virtual void finish_load() = 0;

  /// Streamed loading of IEEE binary16 bit patterns (ShardInput::stream_format kFloat16Bits),
  /// as load_buffer() / load_rows() with 2-byte values: load_buffer_bits: host memory for `rows`
  /// rows [rows, dim] of uint16 bit patterns (page-locked for the CUDA engine), one of two used
  /// in turn; load_rows_bits: queues rows [first, first + rows) from `bits` [rows, dim]. Each
  /// value is converted exactly to float32 and stored as load_rows() stores that float32 value
  /// (in any storage type), so the stored rows are bit for bit those of a float32 stream of the
  /// same values, ±0 and subnormals included. finish_load() ends either stream.
  /// @throws Error as the float32 calls; when the shard streams float32; for a pattern that is
  ///   not a finite value (exponent bits all ones: ±inf, NaN), naming the row's global id, the
  ///   column and the value (by load_rows_bits or by finish_load; a refused finish_load ends the
  ///   load, as for float32 rows: the engine takes no more rows and is to be discarded).
  virtual std::uint16_t* load_buffer_bits(std::int64_t rows) = 0;
  virtual void load_rows_bits(std::int64_t first, std::int64_t rows, const std::uint16_t* bits) = 0;

  /// The largest row norm of a streamed load: row (local, 0-based; −1: no rows) and its float64
  /// norm, each row's norm computed as the host's row_norm computes it (float64 products and
  /// sums, element d into partial sum d mod 4, then sqrt((s0 + s1) + (s2 + s3))), bit for bit;
  /// equal norms: the smaller row.
  struct LoadedNorms {
    std::int64_t row = -1;
    double max_norm = 0.0;
  };
  /// Whether this engine measures LoadedNorms while it stores streamed rows (the CUDA engine
  /// does, on the device), so that the caller need not read the rows' values itself. Default:
  /// false.
  virtual bool measures_loaded_norms() const { return false; }
  /// After finish_load() of a streamed load, where measures_loaded_norms().
  /// @throws Error otherwise (the default), or before finish_load().
  virtual LoadedNorms loaded_norms() const;

  /// Validates queries [batch, dim] (engine space) and, for cosine, normalises them in place with
  /// the arithmetic of `normalize_rows`, on `stream` (nullptr: the engine's).
  /// `invalid` nullptr: returns when done; @throws Error naming the first query with a
  /// non-finite value (and its column) or, for cosine, a zero norm.
  /// `invalid` [batch] (engine space): nothing is thrown and nothing waited for (the stream-ordered
  /// path): invalid[q] ← 1 for a rejected query, whose values are replaced by zeros so that its
  /// scores stay finite (the caller marks its results), 0 for the others.
  virtual void prepare_queries(float* queries, int batch, void* stream, std::uint8_t* invalid = nullptr) = 0;

  /// Scores queries against the shard and writes each one's local top-k, best first by the
  /// ordering rule, padded with pad_candidate() when the shard has fewer than k rows. Scores are
  /// ranking scores (l2: the negated squared distance). Deterministic: a (query, row) score does
  /// not depend on the batch, its size, the thread count or the shard boundaries. Ordered on
  /// args.stream; the CUDA engine returns without waiting for batch 1 and after its candidate
  /// pools' overflow check for batches of 2 or more (the host waits for that stream then).
  /// @throws Error when batch or k is out of range, a buffer is missing, or the filter batch has
  ///   more than limits().max_filters programs or a query index outside [-1, count).
  virtual void search(const SearchArgs& args) = 0;

  virtual TransferCounters transfer_counters() const = 0;
  virtual void reset_transfer_counters() = 0;

  // ---- updates: slots, written between searches (never during one), on the engine's stream.
  // Slot s of a shard built from ShardInput rows r < rows holds row r and is live; slots past
  // `rows` (ShardInput::capacity) start dead. A dead slot is never returned by a search, whatever
  // its contents. Exactness and determinism hold over the live slots: a live slot's score is
  // computed as it would be for a row loaded at build time.

  /// Writes rows into dead slots (vectors converted to the storage type as an upload would;
  /// ids and attributes into the attribute table and its block bounds); the slots stay dead
  /// until set_live(). Allocates nothing on the device. Ordered on the engine's stream after the
  /// searches queued there so far (a search ordered on another stream must have finished, or
  /// that stream be joined to the engine's, first); returns once the host memory has been read.
  /// @throws Error, leaving the slots dead, for a slot out of range or live, a value that
  ///   overflows the storage type (naming the id and column), or NaN in a float64 attribute.
  virtual void write_rows(const SlotRows& rows) = 0;

  /// Marks slots [n] live (returned by searches from the next one on) or dead (never returned).
  /// @throws Error for a slot out of range.
  virtual void set_live(const std::int64_t* slots, std::int64_t n, bool live) = 0;

  /// Reads back the stored rows of slots [n] as float32 into out [n, dim] (host): the values
  /// the engine scores (rounded to its storage type; cosine rows normalised). Waits for the
  /// engine's stream. @throws Error for a slot out of range.
  virtual void read_rows(const std::int64_t* slots, std::int64_t n, float* out) = 0;

  /// The global ids and attribute columns of every slot, on the host ([capacity] each; a dead
  /// slot holds whatever it held last, or kPadId and zeros when it was never written).
  virtual const AttributeTable& attribute_table() const = 0;
};

/// The CPU engine: AVX2/FMA scoring when the processor has it (a portable path with the same
/// arithmetic order otherwise), `options.threads` worker threads.
/// @throws Error when the shard's buffers would exceed the machine's memory (naming the largest).
std::unique_ptr<Engine> make_cpu_engine(const ShardInput& shard, Metric metric, Dtype dtype,
                                        const EngineLimits& limits, const EngineOptions& options = {});

/// Bytes the CPU engine will allocate in host memory for a shard (shard storage, ids, query and
/// per-thread selection buffers; equals info().resident_bytes). `threads` as in EngineOptions.
/// Saturates at UINT64_MAX.
std::uint64_t cpu_engine_host_bytes(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& limits,
                                    int threads);

/// This machine's physical memory in bytes: what the CPU engine's buffers are checked against.
std::uint64_t host_memory_bytes();

/// make_cpu_engine's own refusal, without building anything: @throws Error naming the largest
/// buffer, its bytes and the total when cpu_engine_host_bytes() plus `other_bytes` (the index's
/// buffers beside the engine) exceeds this rank's share of host_memory_bytes(): the whole
/// divided by `ranks_on_host`, the ranks on this machine.
void check_cpu_engine_fits(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& limits, int threads,
                           std::uint64_t other_bytes = 0, int ranks_on_host = 1);

/// The CUDA engine on GPU `options.device`. `stream`: the cudaStream_t it uses as its own (the
/// index passes the one its data path and NCCL share); nullptr: it creates one.
/// @throws Error when shardtopk was built without CUDA, when the device does not exist, or when
/// the shard does not fit (bytes needed and free).
std::unique_ptr<Engine> make_cuda_engine(const ShardInput& shard, Metric metric, Dtype dtype,
                                         const EngineLimits& limits, const EngineOptions& options = {},
                                         void* stream = nullptr);

/// Bytes the CUDA engine will allocate on its device for a shard (shard storage + workspace).
std::uint64_t cuda_engine_device_bytes(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& limits);

/// True when built with CUDA and at least one GPU is visible.
bool cuda_available();
/// Number of visible GPUs (0 when built without CUDA or none visible).
int cuda_device_count();
/// True when shardtopk was compiled with CUDA support.
bool built_with_cuda();
/// Free and total memory of GPU `device` in bytes. Returns false when built without CUDA or the
/// device does not exist.
bool cuda_device_memory(int device, std::uint64_t* free_bytes, std::uint64_t* total_bytes);

/// L2-normalise rows [rows, dim] in place: norm = sqrt(Σ x² in float64, in index order), then
/// x ← float(x · (1 / norm)) in float64. Used for corpus rows at ingest and for host queries;
/// the CUDA engine's device query normalisation does the same arithmetic.
/// @throws Error naming `label` and row (first_row + i) when a norm is zero.
void normalize_rows(float* data, std::int64_t rows, std::int64_t dim, std::int64_t first_row,
                    const char* label);

}  // namespace shardtopk
