#include "engine/cuda/filtered_search.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/filter_blocks.hpp"
#include "engine/cuda/kernels/gathered_scores.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk::cuda_detail {
namespace {

/// `ids_in` lists at least this long are resolved through the id index; a shorter one meets few
/// blocks, which the rows kernel evaluates about as fast, and needs no index.
constexpr std::int64_t kIdIndexMembers = 4096;

/// Bytes from the program indices to the query filters in the pinned staging (16-byte aligned).
constexpr std::size_t query_filter_offset(int batch) {
  return (sizeof(std::int32_t) * static_cast<std::size_t>(batch) + 15) / 16 * 16;
}

/// Query q's filter as the batched kernels read it (QueryFilter): program p's range when p is
/// one range leaf, else the program; p < 0: none.
QueryFilter query_filter(const FilterProgram* const* programs, std::int32_t p) {
  QueryFilter f;
  if (p < 0) return f;
  const FilterProgram& prog = *programs[p];
  f.kind = QueryFilter::kProgram;
  if (prog.ops().size() != 1) return f;
  const FilterOp& op = prog.ops()[0];
  const auto first = static_cast<std::size_t>(op.first);
  if (op.code == FilterOpCode::kRangeInt) {
    f.kind = QueryFilter::kIntRange;
    f.lo = static_cast<std::uint64_t>(prog.ints()[first]);
    f.hi = static_cast<std::uint64_t>(prog.ints()[first + 1]);
  } else if (op.code == FilterOpCode::kRangeReal) {
    f.kind = QueryFilter::kRealRange;
    std::memcpy(&f.lo, &prog.reals()[first], sizeof(double));
    std::memcpy(&f.hi, &prog.reals()[first + 1], sizeof(double));
  } else {
    return f;
  }
  f.column = op.column;
  return f;
}

constexpr std::size_t kScheduleRowsBytes = static_cast<std::size_t>(kScheduleChunks + 1) * sizeof(std::int64_t);

/// A batch of range filters over one column reads that column's order when their intervals
/// together hold at most 1 / kOrderShare of the (row, query) pairs the shard's own schedule
/// scores: the gathered product scores a pair at a fraction of cuBLAS's rate.
constexpr std::int64_t kOrderShare = 4;

}  // namespace

FilteredSearch::FilteredSearch(const Workspace& ws, const DeviceFilterTable& table, const ScanSelectPlan& scan,
                               FilterScan path, const EngineLimits& limits, int sms, bool column_orders,
                               cudaStream_t stream)
    : ws_(ws), table_(table), scan_(scan), column_orders_(column_orders), batch_max_(limits.batch_max) {
  fscan_ = plan_filtered_scan(scan, path, sms);
  fs_.blocks = ws.blocks;
  fs_.mask_words = ws.mask_words;
  fs_.flags = ws.flags;
  fs_.cand = ws.cand;
  fs_.stats = ws.fstats;
  fs_.masks = ws.masks;
  rows_grid_ = filter_rows_grid(sms);
  programs_pinned_.allocate(kFilterProgramBytes + query_filter_offset(limits.batch_max) +
                            sizeof(QueryFilter) * static_cast<std::size_t>(limits.batch_max));
  programs_copied_.create(cudaEventDisableTiming);
  CHECK_CUDA(cudaEventRecord(programs_copied_.get(), stream));
  schedule_pinned_.allocate(kScheduleRowsBytes + static_cast<std::size_t>(kScheduleActBytes) +
                            sizeof(std::int32_t) * static_cast<std::size_t>(kScheduleQueries));
  positions_.allocate(2 * sizeof(std::int64_t) * static_cast<std::size_t>(limits.batch_max));
  positions_pinned_.allocate(2 * sizeof(std::int64_t) * static_cast<std::size_t>(limits.batch_max));
  schedule_.qmap = ws.qmap;
}

void FilteredSearch::prepare(const FilterBatch& f, int batch, bool row_masks, cudaStream_t s) {
  // The pinned staging may still be read by the previous search's copy.
  CHECK_CUDA(cudaEventSynchronize(programs_copied_.get()));
  const std::size_t bytes = packed_filter_programs_bytes(f.programs, f.count);
  SHARDTOPK_EXPECTS(bytes <= kFilterProgramBytes, "the filters of this batch take ", bytes,
                    " bytes compiled, more than the ", kFilterProgramBytes, " one search may carry");
  std::uint8_t* staging = programs_pinned_.as<std::uint8_t>();
  pack_filter_programs(f.programs, f.count, staging, kFilterProgramBytes);
  std::memcpy(staging + kFilterProgramBytes, f.query_program, sizeof(std::int32_t) * static_cast<std::size_t>(batch));
  auto* qf = reinterpret_cast<QueryFilter*>(staging + kFilterProgramBytes + query_filter_offset(batch_max_));
  for (int q = 0; q < batch; ++q) qf[q] = query_filter(f.programs, f.query_program[q]);
  CHECK_CUDA(cudaMemcpyAsync(ws_.programs, staging, bytes, cudaMemcpyHostToDevice, s));
  CHECK_CUDA(cudaMemcpyAsync(ws_.mask_index, staging + kFilterProgramBytes,
                             sizeof(std::int32_t) * static_cast<std::size_t>(batch), cudaMemcpyHostToDevice, s));
  CHECK_CUDA(cudaMemcpyAsync(ws_.query_filter, qf, sizeof(QueryFilter) * static_cast<std::size_t>(batch),
                             cudaMemcpyHostToDevice, s));
  CHECK_CUDA(cudaEventRecord(programs_copied_.get(), s));
  launch_block_verdicts(table_, ws_.programs, f.count, fs_, s);
  count_ = f.count;
  have_masks_.assign(static_cast<std::size_t>(f.count), row_masks);
  id_list_members_.assign(static_cast<std::size_t>(f.count), 0);
  for (int p = 0; p < f.count; ++p)
    if (is_id_list_program(*f.programs[p])) id_list_members_[static_cast<std::size_t>(p)] = f.programs[p]->ops()[0].count;
  // One program: its candidate blocks alone (an ids_in list through the id index). Several:
  // every block once, with all of them.
  if (row_masks && !(f.count == 1 && resolve_id_list(0, s)))
    launch_filter_rows(table_, ws_.programs, f.count, f.count == 1 ? 0 : -1, fs_, rows_grid_, s);
}

void FilteredSearch::row_masks_of(int p, cudaStream_t s) {
  if (p < 0 || p >= count_ || have_masks_[static_cast<std::size_t>(p)]) return;
  if (!resolve_id_list(p, s)) launch_filter_rows(table_, ws_.programs, count_, p, fs_, rows_grid_, s);
  have_masks_[static_cast<std::size_t>(p)] = true;
}

bool FilteredSearch::resolve_id_list(int p, cudaStream_t s) {
  const std::int64_t members = id_list_members_[static_cast<std::size_t>(p)];
  if (members < kIdIndexMembers) return false;
  if (ids_stale_) {
    if (!ids_.build(table_, s)) return false;
    ids_stale_ = false;
  }
  launch_id_list_rows(table_, ids_.view(), ws_.programs, count_, p, members, fs_, s);
  return true;
}

RowMasks FilteredSearch::masks(const std::uint32_t* live) const {
  RowMasks m;
  m.masks = ws_.masks;
  m.words = ws_.mask_words;
  m.index = ws_.mask_index;
  m.live = live;
  m.flags = ws_.flags;
  m.blocks = ws_.blocks;
  m.programs = ws_.programs;
  m.values = table_.values;
  m.global_ids = table_.global_ids;
  m.table_rows = table_.rows;
  m.query_filter = ws_.query_filter;
  return m;
}

void FilteredSearch::scan_one(ScanSelectArgs base, int q, const std::uint32_t* live, cudaStream_t s) const {
  FilteredScanArgs a;
  base.masks = RowMasks{};
  a.base = base;
  a.base.scores = ws_.scores;
  a.cids = ws_.cids;
  a.row_list = ws_.row_list;
  a.fs = fs_;
  a.query_program = ws_.mask_index;
  a.q = q;
  a.live = live;
  filtered_scan_select(scan_, fscan_, a, s);
}

const ChunkSchedule& FilteredSearch::schedule(const BatchedSearch& batched, const FilterBatch& f, int batch, int k,
                                              cudaStream_t s) {
  const std::vector<RowChunk> base = batched.chunks(batch, k);
  const auto nc = static_cast<std::int64_t>(base.size());
  schedule_.chunks = base;
  schedule_.queries.assign(base.size(), batch);
  schedule_.first.assign(base.size(), 0);
  schedule_.full = true;
  schedule_.order = nullptr;
  schedule_.spans = nullptr;
  if (nc == 0 || nc > kScheduleChunks) return schedule_;
  // Both candidate schedules' inputs come back to the host in one wait: each query's interval
  // of a column's order (a batch of ranges over one column) and each program's chunks.
  const bool ranged = order_positions(batched, f, batch, s);
  const bool active = static_cast<std::int64_t>(f.count) * nc <= kScheduleActBytes;
  if (!ranged && !active) return schedule_;
  auto* rows = schedule_pinned_.as<std::int64_t>();
  auto* act = schedule_pinned_.as<std::uint8_t>() + kScheduleRowsBytes;
  auto* qmap = reinterpret_cast<std::int32_t*>(act + kScheduleActBytes);
  if (active) {
    for (std::int64_t c = 0; c < nc; ++c) rows[c] = base[static_cast<std::size_t>(c)].row0;
    rows[nc] = base.back().row0 + base.back().rows;
    CHECK_CUDA(cudaMemcpyAsync(ws_.chunk_rows, rows, sizeof(std::int64_t) * static_cast<std::size_t>(nc + 1),
                               cudaMemcpyHostToDevice, s));
    launch_chunk_activity(fs_, f.count, ws_.chunk_rows, static_cast<int>(nc), ws_.chunk_act, s);
    CHECK_CUDA(cudaMemcpyAsync(act, ws_.chunk_act, static_cast<std::size_t>(f.count) * static_cast<std::size_t>(nc),
                               cudaMemcpyDeviceToHost, s));
  }
  CHECK_CUDA(cudaStreamSynchronize(s));  // also: the previous search's copy of qmap has left the staging
  // Every program may return a row of every chunk (filters spread over the shard).
  const bool all_active =
      active && std::memchr(act, 0, static_cast<std::size_t>(f.count) * static_cast<std::size_t>(nc)) == nullptr;
  if (ranged) {
    // (row, query) pairs each schedule scores: the order's, the queries' intervals; the shard's,
    // every chunk a query's program may return a row of (all of them without the activity).
    const std::int64_t* pos = positions_pinned_.as<std::int64_t>();
    std::int64_t by_order = 0, by_rows = 0;
    for (int q = 0; q < batch; ++q) by_order += pos[2 * q + 1] - pos[2 * q];
    if (active && !all_active) {
      std::vector<std::int64_t> program_rows(static_cast<std::size_t>(f.count), 0);
      for (int p = 0; p < f.count; ++p)
        for (std::int64_t c = 0; c < nc; ++c)
          if (act[static_cast<std::int64_t>(p) * nc + c] != 0)
            program_rows[static_cast<std::size_t>(p)] += base[static_cast<std::size_t>(c)].rows;
      for (int q = 0; q < batch; ++q) by_rows += program_rows[static_cast<std::size_t>(f.query_program[q])];
    } else {  // every chunk for every query (filters spread over the shard, or no activity)
      by_rows = static_cast<std::int64_t>(batch) * table_.rows;
    }
    if (by_order * kOrderShare <= by_rows) {
      // The base chunks laid over positions: the same lengths, so the same thresholds' growth.
      // Merged chunks keep to the gathered product's groups of queries (a 33rd query would
      // score the whole span once more).
      list_queries(batched, base, batch, qmap, kGatheredQueryGroup,
                   [&](int q, std::int64_t c) {
                     const RowChunk& ch = base[static_cast<std::size_t>(c)];
                     return pos[2 * q] < ch.row0 + ch.rows && pos[2 * q + 1] > ch.row0;
                   },
                   s);
      schedule_.order = order_.view().rows;
      schedule_.spans = positions_.as<std::int64_t>();
      return schedule_;
    }
  }
  // No activity, or every chunk for every query: the base schedule as it stands, without the
  // walk over chunks × queries below (52k steps at B = 256).
  if (!active || all_active) return schedule_;
  list_queries(batched, base, batch, qmap, 0,
               [&](int q, std::int64_t c) {
                 const std::int32_t p = f.query_program[q];
                 return p < 0 || act[static_cast<std::int64_t>(p) * nc + c] != 0;
               },
               s);
  return schedule_;
}

bool FilteredSearch::order_positions(const BatchedSearch& batched, const FilterBatch& f, int batch, cudaStream_t s) {
  if (!column_orders_ || !batched.gathers_rows() || table_.rows == 0) return false;
  // Every query one range (QueryFilter) of the same column and type, as prepare staged them.
  const auto* qf = reinterpret_cast<const QueryFilter*>(programs_pinned_.as<std::uint8_t>() + kFilterProgramBytes +
                                                        query_filter_offset(batch_max_));
  const QueryFilter& q0 = qf[0];
  if (q0.kind != QueryFilter::kIntRange && q0.kind != QueryFilter::kRealRange) return false;
  for (int q = 0; q < batch; ++q)
    if (f.query_program[q] < 0 || qf[q].kind != q0.kind || qf[q].column != q0.column) return false;
  const bool real = q0.kind == QueryFilter::kRealRange;
  const ColumnOrderView have = order_.view();
  if (order_stale_ || have.column != q0.column || have.real != real || have.n != table_.rows) {
    if (!order_.build(table_, q0.column, real, s)) return false;
    order_stale_ = false;
  }
  range_positions(order_.view(), ws_.query_filter, batch, positions_.as<std::int64_t>(), s);
  CHECK_CUDA(cudaMemcpyAsync(positions_pinned_.get(), positions_.get(),
                             2 * sizeof(std::int64_t) * static_cast<std::size_t>(batch), cudaMemcpyDeviceToHost, s));
  return true;
}

template <typename May>
void FilteredSearch::list_queries(const BatchedSearch& batched, const std::vector<RowChunk>& base, int batch,
                                  std::int32_t* qmap, int group, const May& may, cudaStream_t s) {
  const auto nc = static_cast<std::int64_t>(base.size());
  // Per chunk, the queries that may return one of its rows; neighbouring chunks that only some
  // queries may answer are merged while the union of their queries times their rows fits one
  // GEMM output buffer (fewer, longer GEMMs: a batch of per-query clustered filters).
  schedule_.chunks.clear();
  schedule_.queries.clear();
  schedule_.first.clear();
  schedule_.full = true;
  const std::int64_t outputs = batched.outputs_per_buffer();
  std::vector<std::int32_t> mark(static_cast<std::size_t>(batch), -1);  // chunk list a query is in
  std::vector<std::int32_t> list, cur;
  RowChunk span{};
  std::int64_t used = 0;
  auto flush = [&] {
    if (cur.empty()) return;
    const auto n = static_cast<std::int64_t>(cur.size());
    schedule_.chunks.push_back(span);
    if (n < batch && used + n <= kScheduleQueries) {
      std::sort(cur.begin(), cur.end());
      std::copy(cur.begin(), cur.end(), qmap + used);
      schedule_.queries.push_back(static_cast<int>(n));
      schedule_.first.push_back(used);
      used += n;
    } else {  // every query (the masks do the rest)
      schedule_.queries.push_back(batch);
      schedule_.first.push_back(0);
    }
    cur.clear();
  };
  int lists = 0;
  for (std::int64_t c = 0; c < nc; ++c) {
    const RowChunk& ch = base[static_cast<std::size_t>(c)];
    list.clear();
    for (int q = 0; q < batch; ++q)
      if (may(q, c)) list.push_back(q);
    if (list.size() != static_cast<std::size_t>(batch)) schedule_.full = false;
    if (list.empty()) {  // no query may return a row of this chunk: skipped
      flush();
      continue;
    }
    std::int64_t joined = static_cast<std::int64_t>(cur.size());
    for (std::int32_t q : list) joined += mark[static_cast<std::size_t>(q)] == lists ? 0 : 1;
    const auto groups = [group](std::int64_t n) { return group > 0 ? (n + group - 1) / group : 0; };
    const bool fits = !cur.empty() && span.row0 + span.rows == ch.row0 && joined < batch &&
                      joined * (span.rows + static_cast<std::int64_t>(ch.rows)) <= outputs &&
                      groups(joined) <= groups(static_cast<std::int64_t>(cur.size()));
    if (!fits) {
      flush();
      ++lists;
      span = ch;
    } else {
      span.rows += ch.rows;
    }
    for (std::int32_t q : list)
      if (mark[static_cast<std::size_t>(q)] != lists) {
        mark[static_cast<std::size_t>(q)] = lists;
        cur.push_back(q);
      }
  }
  flush();
  if (used > 0)
    CHECK_CUDA(cudaMemcpyAsync(ws_.qmap, qmap, sizeof(std::int32_t) * static_cast<std::size_t>(used),
                               cudaMemcpyHostToDevice, s));
}

}  // namespace shardtopk::cuda_detail
