#pragma once
// The filters of the CUDA engine's searches: a FilterBatch's programs evaluated on the device
// once per search (kernels/filter_blocks: block verdicts, candidate block lists, row masks), the
// batch-1 search of a filtered query (kernels/filtered_scan: only its candidate blocks, dense or
// gathered), and the chunk schedule of a filtered batched search (a chunk no query may return a
// row of is skipped; one that only some may GEMMs only those).

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/cuda_raii.cuh"
#include "engine/cuda/batched_search.hpp"
#include "engine/cuda/kernels/column_order.hpp"
#include "engine/cuda/kernels/filter_table.cuh"
#include "engine/cuda/kernels/filtered_scan.hpp"
#include "engine/cuda/kernels/id_rows.hpp"
#include "engine/cuda/kernels/scan_select.hpp"
#include "engine/cuda/plan.hpp"
#include "shardtopk/engine.hpp"

namespace shardtopk::cuda_detail {

class FilteredSearch {
 public:
  /// For the shard whose workspace is `ws` (device), attribute table `table` (device) and batch-1
  /// scan plan `scan` (rows ≥ 1), on the current device of `sms` multiprocessors. Allocates the
  /// pinned staging of programs and schedules.
  /// `column_orders`: a batch whose queries each filter one range of the same column may read
  /// that column's order of the rows (schedule).
  FilteredSearch(const Workspace& ws, const DeviceFilterTable& table, const ScanSelectPlan& scan, FilterScan path,
                 const EngineLimits& limits, int sms, bool column_orders, cudaStream_t stream);

  /// Copies the batch's programs and each query's program index to the device and evaluates the
  /// programs' block verdicts there, and with `row_masks` the masks of every program (the batch-1
  /// scans read them; the batched path evaluates rows when it asks for them), on `s` (not
  /// captured: the programs change from search to search). f.count ≥ 1. Waits only for the
  /// staging's previous copy. @throws Error when the programs take more than kFilterProgramBytes.
  void prepare(const FilterBatch& f, int batch, bool row_masks, cudaStream_t s);

  /// The masks of program p, after a prepare without row masks (before a batch-1 scan of one of
  /// its queries). On `s`.
  void row_masks_of(int p, cudaStream_t s);

  /// The shard's global ids or attributes changed (rows written): the id index and the column
  /// order are rebuilt before their next use.
  void rows_written() {
    ids_stale_ = true;
    order_stale_ = true;
  }

  /// Device bytes of the column order (0 until a batch of range filters first reads one).
  std::size_t column_order_bytes() const { return order_.bytes(); }

  /// Device bytes of the id index (0 until an `ids_in` list first needs it).
  std::size_t id_index_bytes() const { return ids_.bytes(); }

  /// The prepared batch's filters for the batched path (`live`: the live mask, or nullptr): block
  /// flags, and each program evaluated on the rows the path asks about.
  RowMasks masks(const std::uint32_t* live) const;

  /// Query q of the prepared batch through the filtered batch-1 scan: `base` holds the shard,
  /// the query, k, out and the select workspace (scores become compact). Capturable.
  void scan_one(ScanSelectArgs base, int q, const std::uint32_t* live, cudaStream_t s) const;

  /// The chunk schedule of a batched search of the prepared batch through `batched` (its
  /// chunks(batch, k)): the chunks' activity comes back to the host, so this waits for `s`.
  /// When every query filters one range of the same column, `batched` can gather rows, and the
  /// queries' ranges hold at most a quarter of the (row, query) pairs the shard's own chunks
  /// would score, the chunks are intervals of that column's order instead (built first when
  /// stale), each scored for the queries whose interval meets it.
  const ChunkSchedule& schedule(const BatchedSearch& batched, const FilterBatch& f, int batch, int k, cudaStream_t s);

 private:
  /// Program p's masks from the id index when it is an `ids_in` list of at least
  /// kIdIndexMembers ids (the index built first when stale); false: not such a list, or no
  /// device memory for the index (the rows kernel evaluates it).
  bool resolve_id_list(int p, cudaStream_t s);
  /// Queues each query's interval of its column's order (built first when stale) into
  /// positions_pinned_ on `s`, or returns false (nothing queued) when the batch is not one of
  /// ranges over one column or the order's device memory is not free.
  bool order_positions(const BatchedSearch& batched, const FilterBatch& f, int batch, cudaStream_t s);
  /// schedule_'s chunks and query lists from the base chunks and `may(q, c)`: whether query q
  /// may return a row of base chunk c (see schedule). `qmap`: the pinned staging of the lists.
  /// `group` > 0: neighbouring chunks merge only while their queries fill no more groups of
  /// `group` than the first part's did.
  template <typename May>
  void list_queries(const BatchedSearch& batched, const std::vector<RowChunk>& base, int batch, std::int32_t* qmap,
                    int group, const May& may, cudaStream_t s);

  Workspace ws_;
  DeviceFilterTable table_;
  ScanSelectPlan scan_;
  FilteredScanPlan fscan_;
  FilterState fs_;
  int rows_grid_ = 1;
  int count_ = 0;                    // programs of the prepared batch
  std::vector<bool> have_masks_;     // [count_] masks evaluated
  std::vector<std::int64_t> id_list_members_;  // [count_] an ids_in list's length, 0: another program
  IdRowIndex ids_;
  bool ids_stale_ = true;
  bool column_orders_ = true;
  ColumnOrder order_;
  bool order_stale_ = true;
  DeviceBuffer positions_;        // [batch_max, 2] int64: each query's interval of the order
  PinnedBuffer positions_pinned_; // its copy on the host
  int batch_max_ = 0;
  PinnedBuffer programs_pinned_;  // [kFilterProgramBytes] packed programs, [batch_max] program indices, [batch_max] QueryFilter
  Event programs_copied_;
  PinnedBuffer schedule_pinned_;  // chunk rows [kScheduleChunks + 1], activity [kScheduleActBytes], qmap
  ChunkSchedule schedule_;
};

}  // namespace shardtopk::cuda_detail
