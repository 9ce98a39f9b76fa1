#pragma once
// The batch-1 search (host launcher): one pass over the shard that scores every row exactly
// (score.cuh's arithmetic) and histograms the scores, then a radix select and the final sort
// of the candidates, two kernels, one query.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/kernels/workspace_types.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk {
struct QueryCounts;  // shardtopk/engine.hpp
}

namespace shardtopk::cuda_detail {

struct ScanSelectArgs;

/// A bounded search's window (window_select.hpp): when `on`, the launchers run the window pass
/// between the scan and the select, so that the answer is the best k rows inside `window`.
struct WindowArgs {
  bool on = false;
  QueryWindow window;              ///< this query's window (by value: a windowed search is not captured)
  QueryCounts* counts = nullptr;   ///< [1] (device) this query's counts, added to; or nullptr
  std::int64_t scanned = 0;        ///< the shard's live rows (QueryCounts::scanned)
};

/// The scan's fixed choices for one shard, made once by plan_scan_select(): the scan shape
/// (rows per warp), the schedule, the grids (from the occupancy), the L2 policy.
struct ScanSelectPlan {
  Dtype dtype = Dtype::kFloat32;
  bool l2 = false;            ///< metric l2 (scores are negated squared distances)
  std::int64_t rows = 0, dim = 0, dpad = 0;
  int nvec = 0;               ///< 16-byte chunks per row
  int cap = 0;                ///< candidates the final sort holds
  int scan_blocks = 0;        ///< scan grid
  std::int64_t rows_per_block = 0;  ///< 0: persistent grid; else blocks of this many rows
  int select_blocks = 0;      ///< select grid: one wave of blocks (any grid is correct), fewer for small shards
  int select_wave = 0;        ///< one wave of select blocks
  bool l2_hints = true;       ///< evict-first loads, the last rows kept in L2, alternating direction
  std::int64_t keep_from = 0; ///< first logical row loaded as evict-normal (with l2_hints)
  void (*launch)(const ScanSelectPlan&, const ScanSelectArgs&, cudaStream_t) = nullptr;
  /// The same scan and select with row masks (ScanSelectArgs::masks): rows a query may not
  /// return are never read and never selected.
  void (*launch_masked)(const ScanSelectPlan&, const ScanSelectArgs&, cudaStream_t) = nullptr;
};

/// Plans the scan of a shard of `rows` ≥ 1 rows [rows, dpad] in storage `dtype` for searches
/// of k ≤ cap / 2 (cap: a power of two, the final sort's capacity; its shared memory,
/// cap × 12 bytes, must fit the device: the caller checks). Rows per warp: 2 rows × up to 4
/// chunks per lane above 64 chunks, 4 × 2 for 33–64, 8 × 1 for 17–32, 8 (two side by side, 16
/// lanes each) × 1 up to 16 chunks; ScanRows::kTwo takes 2 × 4 at every width (same bits).
/// Schedule: a persistent grid, or blocks of 1,024 rows from 8 waves of such blocks on
/// (ScanSchedule::kAuto), or as forced. `sms`: multiprocessors of the current device. Sets the
/// kernels' shared-memory attributes and queries the occupancy on the current device.
ScanSelectPlan plan_scan_select(Dtype dtype, bool l2, std::int64_t rows, std::int64_t dim, std::int64_t dpad,
                                int cap, ScanRows scan_rows, ScanSchedule schedule, bool l2_hints, int sms);

/// One batch-1 search: device pointers; sizes are the plan's.
struct ScanSelectArgs {
  const void* shard = nullptr;        ///< [rows, dpad] storage type, zero-padded
  const std::int64_t* ids = nullptr;  ///< [rows] global ids (ties go to the smaller)
  const float* query = nullptr;       ///< [dim] float32, validated (finite)
  int k = 0;                          ///< 1 .. cap / 2
  Candidate* out = nullptr;           ///< [k] best first by the ordering rule; padding when rows < k
  // Workspace.
  float* scores = nullptr;            ///< [rows] exact ranking scores
  /// The per-search state, zeroed by the launcher: `clear_bytes` bytes from `hists` on, which
  /// must hold hists [kHistWords], count [1] and state [1].
  std::uint32_t* hists = nullptr;
  std::uint32_t* count = nullptr;
  Batch1State* state = nullptr;
  std::size_t clear_bytes = 0;
  PoolEntry* cand = nullptr;          ///< [cap] candidates of the final sort
  /// With plan.l2_hints: the scan-direction word (device, zero before the first search), whose
  /// bit 0 each search flips (consecutive searches sweep the shard in alternate directions).
  std::uint32_t* dir = nullptr;
  /// Optional row masks (filters, deleted rows) and this query's position in them: with any
  /// mask, the masked kernels run; the query's answer is the best k of the rows it may return,
  /// padded when fewer than k may.
  RowMasks masks;
  int mask_query = 0;
  /// Optional window (ranges, pages, ranks, counts): the best k rows inside it.
  WindowArgs window;
  /// Optional direct export of the answer (ids and reported scores beside out).
  ExportTarget exp;
  bool masked() const { return masks.live != nullptr || masks.index != nullptr; }
};

/// Queues the search of args.query on `stream`: a memset of the per-search state, the scan,
/// (with args.window.on, the window pass of window_select.hpp,) the select. Returns at once (capturable). Every row's score has the same bits whatever the
/// plan's shape, schedule or direction.
inline void scan_select(const ScanSelectPlan& plan, const ScanSelectArgs& args, cudaStream_t stream) {
  (args.masked() ? plan.launch_masked : plan.launch)(plan, args, stream);
}

/// The select of a filtered scan (filtered_scan.hpp) alone: args.scores and args.ids hold the
/// scan's compact entries [*entries] (≤ max_entries; −inf: a row the query may not return, never
/// selected), args.hists and args.state its histogram and resolved threshold. Writes args.out [k]
/// (ids from args.ids, padding when fewer than k entries are finite). On `stream`, returns at once.
void select_compact(const ScanSelectPlan& plan, const ScanSelectArgs& args, std::int64_t max_entries,
                    const std::uint32_t* entries, cudaStream_t stream);

/// The selects of a few-query scan (scan_few.hpp), one launch: query y of `batch` (≤ the plan's
/// few-query limit) from scores [batch, plan.rows] (device) and states[y] (its level-1 histogram
/// and resolved threshold) into out [batch, k] (device; ids from `ids`), its candidates in
/// cand [batch, plan.cap]; with an export target, each answer also to ex's ids/scores + y · k. On
/// `stream`, returns at once (capturable).
void select_few(const ScanSelectPlan& plan, const float* scores, FewQueryState* states, int batch, int k,
                PoolEntry* cand, const std::int64_t* ids, Candidate* out, const ExportTarget& ex, cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
