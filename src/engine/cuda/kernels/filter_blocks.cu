// Block verdicts, candidate block lists and row masks of a search's filter programs.
//
// verdicts: each thread runs the interval analysis over the min/max bounds of four consecutive
//   summary blocks of one program (a few 8-byte loads per leaf, the four independent); a
//   block-wide scan compacts each tile of 1,024 blocks into the program's candidate list with one
//   atomic per tile. 10M rows = 9,766 blocks: 10 thread blocks of 256 threads per program.
// rows: the candidate blocks the bounds leave open. One program (batch 1, a tenant's batch): one
//   thread block of 256 threads per block (1,024 rows, 4 per thread), the leaves' verdicts
//   computed once, in parallel (thread i: leaf i). Several programs (per-query filters): one
//   warp per (block, program), eight programs at once per thread block, so that a block's
//   attribute values come from DRAM once for all of them and no barrier separates them. An
//   `in` leaf keeps only its members inside the block's bounds (ids_in over a million ids: a
//   row searches the few that can match); each thread evaluates its rows with a bit stack in a
//   register, and each warp writes its ballot as a mask word.

#include "engine/cuda/kernels/filter_blocks.hpp"

#include <cub/block/block_scan.cuh>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/filter_program.cuh"
#include "engine/cuda/kernels/launch.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::cuda_detail {
namespace {

using namespace filter_detail;

constexpr int kVerdictThreads = 1024;  // blocks per tile of the candidate list
constexpr int kVerdictItems = 4;       // blocks per thread of the verdicts kernel
constexpr int kVerdictBlockThreads = kVerdictThreads / kVerdictItems;
constexpr int kRowThreads = 256;
constexpr int kRowsPerThread = static_cast<int>(kFilterBlockRows) / kRowThreads;
constexpr int kWarpOps = 32;  // programs this short are evaluated by one warp (several programs)
static_assert(kFilterBlockRows == (1 << kFilterBlockShift), "summary blocks of 1024 rows");
static_assert(kFilterBlockRows % kRowThreads == 0 && kRowThreads % 32 == 0, "whole warps per block row group");

__device__ __forceinline__ int block_rows(const DeviceFilterTable& t, std::int64_t b) {
  const std::int64_t left = t.rows - b * kFilterBlockRows;
  return static_cast<int>(left < kFilterBlockRows ? left : kFilterBlockRows);
}

/// Grid (ceil(blocks / 1024), programs). Each thread analyses kVerdictItems consecutive blocks,
/// whose bounds loads are independent: one thread per block (1,024-thread blocks, 10 waves for
/// 256 programs over 10M rows) spent 50 µs waiting on the same chain of program loads per block.
__global__ void __launch_bounds__(kVerdictBlockThreads)
    verdicts_kernel(DeviceFilterTable t, const std::uint8_t* __restrict__ packed, FilterState fs) {
  using Scan = cub::BlockScan<int, kVerdictBlockThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ std::uint32_t base;
  const int p = blockIdx.y;
  const std::int64_t b0 = static_cast<std::int64_t>(blockIdx.x) * kVerdictThreads +
                          static_cast<std::int64_t>(threadIdx.x) * kVerdictItems;
  const ProgramView pv = program_at(packed, p);
  std::uint8_t v[kVerdictItems];
  int cand[kVerdictItems], all_rows[kVerdictItems];
#pragma unroll
  for (int j = 0; j < kVerdictItems; ++j) {
    const std::int64_t b = b0 + j;
    v[j] = b < t.blocks ? block_verdict(t, pv, b) : kVerdictNone;
    if (b < t.blocks) fs.flags[static_cast<std::int64_t>(p) * fs.blocks + b] = v[j];
    cand[j] = v[j] != kVerdictNone ? 1 : 0;
    all_rows[j] = v[j] == kVerdictAll ? block_rows(t, b) : 0;
  }
  int pos[kVerdictItems], total = 0;
  Scan(tmp).ExclusiveSum(cand, pos, total);
  __syncthreads();
  int rows_before[kVerdictItems], rows_sum = 0;
  Scan(tmp).ExclusiveSum(all_rows, rows_before, rows_sum);
  if (threadIdx.x == 0) {
    base = total > 0 ? atomicAdd(&fs.stats[p].cand_blocks, static_cast<std::uint32_t>(total)) : 0u;
    if (rows_sum > 0) atomicAdd(&fs.stats[p].pass_rows, static_cast<std::uint32_t>(rows_sum));
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kVerdictItems; ++j)
    if (cand[j])
      fs.cand[static_cast<std::int64_t>(p) * fs.blocks + base + static_cast<std::uint32_t>(pos[j])] =
          static_cast<std::int32_t>(b0 + j);
}

/// Program p over block b by the whole thread block (4 rows per thread): the leaf states in
/// parallel, then the rows. Every thread calls it (it has barriers).
__device__ void block_rows_cta(const DeviceFilterTable& t, const std::uint8_t* packed, const FilterState& fs, int p,
                               std::int64_t b, FilterOp* s_ops, LeafState* s_leaf) {
  const std::int64_t r0 = b * kFilterBlockRows;
  const int n = block_rows(t, b);
  const ProgramView pv = program_at(packed, p);
  std::uint8_t* flag = fs.flags + static_cast<std::int64_t>(p) * fs.blocks + b;
  // one warp per instruction: a long `in` list is searched by 32 lanes together
  for (int i = static_cast<int>(threadIdx.x >> 5); i < pv.n_ops; i += kRowThreads / 32) {
    const FilterOp op = pv.ops[i];
    const LeafState st = is_leaf(op.code) ? leaf_state_warp(t, pv, op, b) : LeafState{kVerdictSome, 0, 0};
    if ((threadIdx.x & 31) == 0) {
      s_ops[i] = op;
      s_leaf[i] = st;
    }
  }
  __syncthreads();
  std::uint32_t* out = fs.masks + static_cast<std::int64_t>(p) * fs.mask_words + r0 / 32;
  int passed = 0;
#pragma unroll
  for (int k = 0; k < kRowsPerThread; ++k) {
    const int i = k * kRowThreads + threadIdx.x;
    const bool pass = i < n && eval_row(t, pv, s_ops, s_leaf, r0 + i);
    const std::uint32_t word = __ballot_sync(0xffffffffu, pass);
    if ((threadIdx.x & 31) == 0 && i < n) out[i / 32] = word;
    passed += __syncthreads_count(pass);
  }
  if (threadIdx.x == 0) {
    if (passed == 0) *flag = kVerdictNone;
    else if (passed == n) *flag = kVerdictAll;
    if (passed > 0) atomicAdd(&fs.stats[p].pass_rows, static_cast<std::uint32_t>(passed));
  }
  __syncthreads();  // s_ops and s_leaf are rewritten by the next call
}

/// Program p over block b by one warp (32 rows per lane, in 32 words): the instructions read
/// from global memory (L1), the leaf states in `leaf` [kWarpOps]. The warp's lanes call it.
__device__ void block_rows_warp(const DeviceFilterTable& t, const std::uint8_t* packed, const FilterState& fs, int p,
                                std::int64_t b, LeafState* leaf) {
  const int lane = threadIdx.x & 31;
  const std::int64_t r0 = b * kFilterBlockRows;
  const int n = block_rows(t, b);
  const ProgramView pv = program_at(packed, p);
  for (int i = 0; i < pv.n_ops; ++i) {
    const FilterOp op = pv.ops[i];
    const LeafState st = is_leaf(op.code) ? leaf_state_warp(t, pv, op, b) : LeafState{kVerdictSome, 0, 0};
    if (lane == 0) leaf[i] = st;
  }
  __syncwarp();
  std::uint32_t* out = fs.masks + static_cast<std::int64_t>(p) * fs.mask_words + r0 / 32;
  int passed = 0;
  for (int w = 0; w * 32 < n; ++w) {
    const int i = w * 32 + lane;
    const std::uint32_t word = __ballot_sync(0xffffffffu, i < n && eval_row(t, pv, pv.ops, leaf, r0 + i));
    if (lane == 0) out[w] = word;
    passed += __popc(word);
  }
  if (lane == 0) {
    std::uint8_t* flag = fs.flags + static_cast<std::int64_t>(p) * fs.blocks + b;
    if (passed == 0) *flag = kVerdictNone;
    else if (passed == n) *flag = kVerdictAll;
    if (passed > 0) atomicAdd(&fs.stats[p].pass_rows, static_cast<std::uint32_t>(passed));
  }
  __syncwarp();  // `leaf` is rewritten by the next call
}

/// See launch_filter_rows. One program: the thread block evaluates each of its candidate blocks.
/// Several: each warp takes programs of up to kWarpOps instructions in turn (8 programs at once,
/// no barrier between them: a batch of per-query filters is thousands of (block, program) pairs),
/// then the thread block takes the longer ones. Static shared memory: one program's instructions
/// and leaf states, and each warp's leaf states.
__global__ void __launch_bounds__(kRowThreads)
    rows_kernel(DeviceFilterTable t, const std::uint8_t* __restrict__ packed, int n_programs, int single,
                FilterState fs) {
  // Raw bytes: FilterOp's default member initialisers would make it a dynamically initialised
  // __shared__ object.
  __shared__ alignas(16) unsigned char s_ops_bytes[kFilterMaxOps * sizeof(FilterOp)];
  __shared__ LeafState s_leaf[kFilterMaxOps];
  __shared__ LeafState s_warp_leaf[kRowThreads / 32][kWarpOps];
  FilterOp* s_ops = reinterpret_cast<FilterOp*>(s_ops_bytes);
  const int warp = threadIdx.x >> 5;
  const std::int64_t items = single >= 0 ? static_cast<std::int64_t>(fs.stats[single].cand_blocks) : t.blocks;
  for (std::int64_t it = blockIdx.x; it < items; it += gridDim.x) {
    if (single >= 0) {
      const std::int64_t b = fs.cand[static_cast<std::int64_t>(single) * fs.blocks + it];
      if (fs.flags[static_cast<std::int64_t>(single) * fs.blocks + b] == kVerdictSome)  // uniform
        block_rows_cta(t, packed, fs, single, b, s_ops, s_leaf);
      continue;
    }
    const std::int64_t b = it;
    for (int p = warp; p < n_programs; p += kRowThreads / 32) {
      if (fs.flags[static_cast<std::int64_t>(p) * fs.blocks + b] != kVerdictSome) continue;  // warp-uniform
      if (program_at(packed, p).n_ops <= kWarpOps) block_rows_warp(t, packed, fs, p, b, s_warp_leaf[warp]);
    }
    __syncthreads();
    for (int p = 0; p < n_programs; ++p)
      if (program_at(packed, p).n_ops > kWarpOps && fs.flags[static_cast<std::int64_t>(p) * fs.blocks + b] == kVerdictSome)
        block_rows_cta(t, packed, fs, p, b, s_ops, s_leaf);
  }
}

/// Grid (ceil(chunks / 256), programs): act[p, c] = 1 when a block of chunk c is flagged.
__global__ void chunk_activity_kernel(FilterState fs, const std::int64_t* __restrict__ chunk_rows, int chunks,
                                      std::uint8_t* __restrict__ act) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int p = blockIdx.y;
  if (c >= chunks) return;
  const std::int64_t b0 = chunk_rows[c] >> kFilterBlockShift, b1 = (chunk_rows[c + 1] - 1) >> kFilterBlockShift;
  const std::uint8_t* flags = fs.flags + static_cast<std::int64_t>(p) * fs.blocks;
  std::uint8_t any = 0;
  for (std::int64_t b = b0; b <= b1 && !any; ++b) any = flags[b] != kVerdictNone;
  act[static_cast<std::int64_t>(p) * chunks + c] = any;
}

}  // namespace

void launch_block_verdicts(const DeviceFilterTable& t, const std::uint8_t* packed, int n_programs,
                           const FilterState& fs, cudaStream_t stream) {
  SHARDTOPK_EXPECTS(n_programs >= 0 && n_programs <= 65535, "launch_block_verdicts: program count ", n_programs,
                    " outside 0 .. 65535");
  if (n_programs == 0) return;
  CHECK_CUDA(cudaMemsetAsync(fs.stats, 0, sizeof(FilterStats) * static_cast<std::size_t>(n_programs), stream));
  if (t.blocks == 0) return;
  SHARDTOPK_EXPECTS(packed != nullptr && fs.flags && fs.cand && fs.stats, "launch_block_verdicts: null buffers");
  const dim3 grid(static_cast<unsigned>((t.blocks + kVerdictThreads - 1) / kVerdictThreads),
                  static_cast<unsigned>(n_programs));
  verdicts_kernel<<<grid, kVerdictBlockThreads, 0, stream>>>(t, packed, fs);
  CHECK_CUDA_LAUNCH();
}

void launch_filter_rows(const DeviceFilterTable& t, const std::uint8_t* packed, int n_programs, int single,
                        const FilterState& fs, int grid, cudaStream_t stream) {
  SHARDTOPK_EXPECTS(single >= -1 && single < n_programs, "launch_filter_rows: program ", single, " outside -1 .. ",
                    n_programs - 1);
  SHARDTOPK_EXPECTS(grid >= 1, "launch_filter_rows: grid of ", grid, " blocks");
  if (n_programs == 0 || t.blocks == 0) return;
  SHARDTOPK_EXPECTS(fs.masks != nullptr && fs.mask_words >= (t.rows + 31) / 32, "launch_filter_rows: mask of ",
                    fs.mask_words, " words for ", t.rows, " rows");
  rows_kernel<<<static_cast<unsigned>(grid), kRowThreads, 0, stream>>>(t, packed, n_programs, single, fs);
  CHECK_CUDA_LAUNCH();
}

void launch_chunk_activity(const FilterState& fs, int n_programs, const std::int64_t* chunk_rows, int chunks,
                           std::uint8_t* act, cudaStream_t stream) {
  if (n_programs <= 0 || chunks <= 0) return;
  const dim3 grid(static_cast<unsigned>((chunks + 255) / 256), static_cast<unsigned>(n_programs));
  chunk_activity_kernel<<<grid, 256, 0, stream>>>(fs, chunk_rows, chunks, act);
  CHECK_CUDA_LAUNCH();
}

int filter_rows_grid(int sms) {
  return persistent_grid(reinterpret_cast<const void*>(rows_kernel), kRowThreads, 0, sms);
}

}  // namespace shardtopk::cuda_detail
