// An ids_in allow-list resolved to rows through the shard's sorted global ids.
//
// index: CUB's device radix sort of (global id, row) pairs (Merrill and Grimshaw, "High
//   performance and scalable radix sorting", Parallel Processing Letters 21(2), 2011).
// lists: after the block verdicts (filter_blocks.hpp), three short kernels: the masks of the
//   program's candidate blocks flagged 1 are cleared (one warp per block), each listed id is
//   looked up by binary search in the sorted ids and its rows' bits set (one thread per id), and
//   each such block's flag and passing count are settled from its 32 mask words (one warp per
//   block). The work follows the list and the candidate blocks, not the rows: no row's id is read.

#include "engine/cuda/kernels/id_rows.hpp"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/filter_program.cuh"
#include "shardtopk/error.hpp"
#include "shardtopk/filter_semantics.hpp"

namespace shardtopk::cuda_detail {
namespace {

using namespace filter_detail;

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

__global__ void iota_kernel(std::int32_t* __restrict__ rows, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    rows[i] = static_cast<std::int32_t>(i);
}

/// Candidate block `it` of program p: its block index, or −1 past the list or when its flag is
/// not 1 (the bounds decided it: its mask is never read).
__device__ __forceinline__ std::int64_t open_block(const FilterState& fs, int p, std::int64_t it) {
  if (it >= static_cast<std::int64_t>(fs.stats[p].cand_blocks)) return -1;
  const std::int64_t b = fs.cand[static_cast<std::int64_t>(p) * fs.blocks + it];
  return fs.flags[static_cast<std::int64_t>(p) * fs.blocks + b] == kVerdictSome ? b : -1;
}

/// One warp per candidate block: its 32 mask words of program p cleared.
__global__ void __launch_bounds__(kThreads) clear_kernel(FilterState fs, int p) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  for (std::int64_t it = blockIdx.x * static_cast<std::int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5); it < fs.blocks;
       it += warps) {
    if (it >= static_cast<std::int64_t>(fs.stats[p].cand_blocks)) return;  // warp-uniform
    const std::int64_t b = open_block(fs, p, it);
    const std::int64_t w = b * 32 + lane;
    if (b >= 0 && w < fs.mask_words) fs.masks[static_cast<std::int64_t>(p) * fs.mask_words + w] = 0u;
  }
}

/// One thread per listed id: every row holding it (the equal run of the sorted ids) gets its bit
/// in program p's mask, where its block's flag is 1.
__global__ void __launch_bounds__(kThreads)
    mark_kernel(IdRowView index, const std::uint8_t* __restrict__ packed, int p, FilterState fs) {
  const ProgramView pv = program_at(packed, p);
  const FilterOp op = pv.ops[0];
  const std::int64_t* list = pv.ints + op.first;
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < op.count;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t id = list[j];
    std::int64_t lo = 0, hi = index.n;  // first position whose id is ≥ id
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (index.ids[mid] < id) lo = mid + 1;
      else hi = mid;
    }
    for (; lo < index.n && index.ids[lo] == id; ++lo) {
      const std::int64_t r = index.rows[lo];
      if (fs.flags[static_cast<std::int64_t>(p) * fs.blocks + (r >> kFilterBlockShift)] != kVerdictSome) continue;
      atomicOr(&fs.masks[static_cast<std::int64_t>(p) * fs.mask_words + (r >> 5)], 1u << (r & 31));
    }
  }
}

/// One warp per candidate block flagged 1: its flag from its passing rows (0: none, 2: every row
/// of the block), and their count added to stats[p].pass_rows.
__global__ void __launch_bounds__(kThreads) settle_kernel(std::int64_t rows, FilterState fs, int p) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  for (std::int64_t it = blockIdx.x * static_cast<std::int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5); it < fs.blocks;
       it += warps) {
    if (it >= static_cast<std::int64_t>(fs.stats[p].cand_blocks)) return;  // warp-uniform
    const std::int64_t b = open_block(fs, p, it);
    if (b < 0) continue;  // warp-uniform
    const std::int64_t w = b * 32 + lane;
    const int bits = w < fs.mask_words ? __popc(fs.masks[static_cast<std::int64_t>(p) * fs.mask_words + w]) : 0;
    int passed = bits;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) passed += __shfl_xor_sync(0xffffffffu, passed, o);
    if (lane == 0) {
      const std::int64_t left = rows - b * kFilterBlockRows;
      const int n = static_cast<int>(left < kFilterBlockRows ? left : kFilterBlockRows);
      std::uint8_t* flag = fs.flags + static_cast<std::int64_t>(p) * fs.blocks + b;
      if (passed == 0) *flag = kVerdictNone;
      else if (passed == n) *flag = kVerdictAll;
      if (passed > 0) atomicAdd(&fs.stats[p].pass_rows, static_cast<std::uint32_t>(passed));
    }
  }
}

int warp_grid(std::int64_t blocks) {
  const std::int64_t g = (blocks + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<int>(g < 1 ? 1 : g > 4096 ? 4096 : g);
}

}  // namespace

bool is_id_list_program(const FilterProgram& program) {
  const auto& ops = program.ops();
  return ops.size() == 1 && ops[0].code == FilterOpCode::kInInt && ops[0].column == kFilterIdColumn;
}

bool IdRowIndex::build(const DeviceFilterTable& table, cudaStream_t stream) {
  const std::int64_t n = table.rows;
  SHARDTOPK_EXPECTS(n >= 0 && n <= INT32_MAX, "IdRowIndex: ", n, " rows outside 0 .. 2^31 - 1");
  if (n == 0) {
    view_ = IdRowView{};
    return true;
  }
  std::size_t scratch = 0;
  CHECK_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, scratch, static_cast<const std::int64_t*>(nullptr),
                                             static_cast<std::int64_t*>(nullptr),
                                             static_cast<const std::int32_t*>(nullptr),
                                             static_cast<std::int32_t*>(nullptr), static_cast<int>(n)));
  const std::size_t ids_bytes = sizeof(std::int64_t) * static_cast<std::size_t>(n);
  const std::size_t rows_bytes = (sizeof(std::int32_t) * static_cast<std::size_t>(n) + 255) / 256 * 256;
  const std::size_t need = ids_bytes + 2 * rows_bytes + scratch;
  if (capacity_ < n || bytes_ < need) {
    if (mem_.try_allocate(need) != cudaSuccess) {
      bytes_ = 0;
      capacity_ = 0;
      view_ = IdRowView{};
      return false;
    }
    bytes_ = need;
    capacity_ = n;
  }
  char* base = mem_.as<char>();
  auto* ids = reinterpret_cast<std::int64_t*>(base);
  auto* rows = reinterpret_cast<std::int32_t*>(base + ids_bytes);
  auto* order = reinterpret_cast<std::int32_t*>(base + ids_bytes + rows_bytes);
  void* tmp = base + ids_bytes + 2 * rows_bytes;
  iota_kernel<<<static_cast<unsigned>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, 4096)), kThreads, 0,
                stream>>>(order, n);
  CHECK_CUDA_LAUNCH();
  CHECK_CUDA(cub::DeviceRadixSort::SortPairs(tmp, scratch, table.global_ids, ids, order, rows, static_cast<int>(n), 0,
                                             64, stream));
  view_ = IdRowView{ids, rows, n};
  return true;
}

void launch_id_list_rows(const DeviceFilterTable& table, const IdRowView& index, const std::uint8_t* packed, int n_programs,
                         int p, std::int64_t members, const FilterState& fs, cudaStream_t stream) {
  SHARDTOPK_EXPECTS(p >= 0 && p < n_programs, "launch_id_list_rows: program ", p, " outside 0 .. ", n_programs - 1);
  SHARDTOPK_EXPECTS(index.n == table.rows, "launch_id_list_rows: the index holds ", index.n, " rows, the table ",
                    table.rows);
  if (table.blocks == 0) return;
  SHARDTOPK_EXPECTS(packed != nullptr && fs.flags && fs.cand && fs.stats && fs.masks && index.ids && index.rows,
                    "launch_id_list_rows: null buffers");
  const int wg = warp_grid(table.blocks);
  clear_kernel<<<wg, kThreads, 0, stream>>>(fs, p);
  CHECK_CUDA_LAUNCH();
  // One thread per member (the kernel reads the list's length from the program), at most
  // 4,096 blocks: a grid-stride loop past a million members.
  const std::int64_t mg = (std::max<std::int64_t>(members, 1) + kThreads - 1) / kThreads;
  mark_kernel<<<static_cast<unsigned>(std::min<std::int64_t>(mg, 4096)), kThreads, 0, stream>>>(index, packed, p, fs);
  CHECK_CUDA_LAUNCH();
  settle_kernel<<<wg, kThreads, 0, stream>>>(table.rows, fs, p);
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
