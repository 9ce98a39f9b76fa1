// GPU evaluation of compiled filter programs into row masks and block flags.
//
// One thread block of 256 threads per summary block of 1024 rows (4 rows per thread); the
// programs of a launch are taken in turn by the same thread block, so a block's attribute values
// come from DRAM once and from L1 for the programs after the first. Per program: the
// instructions go to shared memory, one thread runs the interval analysis over the block's
// summaries (the verdict of every instruction), and
//   - a block the summaries decide is written as all zeros or all ones without reading a row;
//   - otherwise every thread evaluates its rows with a bit stack in a register, reading a column
//     only for leaves the summaries leave undecided, and each warp writes its ballot as a word.
// Sized for 10M-row shards with a few attributes and programs of tens of instructions; the
// analysis is serial per block and program, which is cheap next to 1024 rows.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/filter_mask.cuh"
#include "shardtopk/filter_semantics.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {
namespace {

using namespace filter_detail;

constexpr int kThreads = 256;
constexpr int kRowsPerThread = static_cast<int>(kFilterBlockRows) / kThreads;
constexpr int kBlockWords = static_cast<int>(kFilterBlockRows) / 32;
static_assert(kFilterBlockRows % kThreads == 0 && kThreads % 32 == 0, "whole warps per block row group");
static_assert(kFilterMaxStack <= 64, "the row evaluator's stack is one 64-bit register");

// A program inside the packed buffer (pack_filter_programs): its header, then ops, ints, reals.
struct ProgramView {
  const FilterOp* ops;
  const std::int64_t* ints;
  const double* reals;
  int n_ops;
};

__device__ ProgramView program_at(const std::uint8_t* packed, int p) {
  const std::uint64_t off = reinterpret_cast<const std::uint64_t*>(packed)[1 + p];
  const std::uint8_t* image = packed + off;
  const auto* h = reinterpret_cast<const FilterImageHeader*>(image);
  ProgramView v;
  v.n_ops = h->n_ops;
  v.ops = reinterpret_cast<const FilterOp*>(image + sizeof(FilterImageHeader));
  v.ints = reinterpret_cast<const std::int64_t*>(v.ops + h->n_ops);
  v.reals = reinterpret_cast<const double*>(v.ints + h->n_ints);
  return v;
}

// Row of the bounds arrays for a program column (the global ids are the last row).
__device__ __forceinline__ std::int64_t bounds_row(const DeviceFilterTable& t, int column) {
  return column == kFilterIdColumn ? t.columns : column;
}

__device__ std::uint8_t leaf_verdict(const DeviceFilterTable& t, const ProgramView& p, const FilterOp& op,
                                     std::int64_t b) {
  const std::int64_t at = bounds_row(t, op.column) * t.blocks + b;
  const std::uint64_t lo_bits = t.block_min[at], hi_bits = t.block_max[at];
  switch (op.code) {
    case FilterOpCode::kRangeInt:
      return range_verdict(static_cast<std::int64_t>(lo_bits), static_cast<std::int64_t>(hi_bits), p.ints[op.first],
                           p.ints[op.first + 1]);
    case FilterOpCode::kRangeReal:
      return range_verdict(__longlong_as_double(static_cast<long long>(lo_bits)),
                           __longlong_as_double(static_cast<long long>(hi_bits)), p.reals[op.first],
                           p.reals[op.first + 1]);
    case FilterOpCode::kInInt:
      return int_set_verdict(p.ints + op.first, op.count, static_cast<std::int64_t>(lo_bits),
                             static_cast<std::int64_t>(hi_bits));
    case FilterOpCode::kInReal:
      return real_set_verdict(p.reals + op.first, op.count, __longlong_as_double(static_cast<long long>(lo_bits)),
                              __longlong_as_double(static_cast<long long>(hi_bits)));
    default: return kVerdictSome;
  }
}

// Verdict of every instruction over block b into states[]; returns the program's.
__device__ std::uint8_t analyse(const DeviceFilterTable& t, const ProgramView& p, const FilterOp* ops,
                                std::int64_t b, std::uint8_t* states) {
  return block_verdicts(ops, p.n_ops, [&](const FilterOp& op) { return leaf_verdict(t, p, op, b); }, states);
}

// Whether row r passes; leaves the summaries decided (states) are not read.
__device__ bool eval_row(const DeviceFilterTable& t, const ProgramView& p, const FilterOp* ops,
                         const std::uint8_t* states, std::int64_t r) {
  std::uint64_t st = 0;  // bit 0 is the top of the stack
  for (int i = 0; i < p.n_ops; ++i) {
    const FilterOp op = ops[i];
    if (op.code == FilterOpCode::kNot) {
      st ^= 1u;
      continue;
    }
    if (op.code == FilterOpCode::kAnd || op.code == FilterOpCode::kOr) {
      const std::uint64_t b = st & 1u;
      st >>= 1;
      st = op.code == FilterOpCode::kAnd ? (st & (~std::uint64_t{1} | b)) : (st | b);
      continue;
    }
    bool v;
    const std::uint8_t s = states[i];
    if (s != kVerdictSome) {
      v = s == kVerdictAll;
    } else if (op.code == FilterOpCode::kRangeInt || op.code == FilterOpCode::kInInt) {
      const std::int64_t x = op.column == kFilterIdColumn
                                 ? t.global_ids[r]
                                 : static_cast<std::int64_t>(t.values[static_cast<std::int64_t>(op.column) * t.rows + r]);
      v = op.code == FilterOpCode::kRangeInt ? in_range(x, p.ints[op.first], p.ints[op.first + 1])
                                             : in_set(p.ints + op.first, op.count, x);
    } else {
      const double x =
          __longlong_as_double(static_cast<long long>(t.values[static_cast<std::int64_t>(op.column) * t.rows + r]));
      v = op.code == FilterOpCode::kRangeReal ? in_range(x, p.reals[op.first], p.reals[op.first + 1])
                                              : in_set(p.reals + op.first, op.count, x);
    }
    st = (st << 1) | static_cast<std::uint64_t>(v);
  }
  return (st & 1u) != 0;
}

__global__ void __launch_bounds__(kThreads)
    filter_mask_kernel(DeviceFilterTable t, const std::uint8_t* packed, int n_programs, std::int64_t lo,
                       std::int64_t hi, std::uint32_t* masks, std::int64_t mask_stride, std::uint8_t* flags,
                       std::int64_t flag_stride) {
  // Raw bytes: FilterOp's default member initialisers would make it a dynamically initialised
  // __shared__ object.
  __shared__ alignas(16) unsigned char s_ops_bytes[kFilterMaxOps * sizeof(FilterOp)];
  __shared__ std::uint8_t s_states[kFilterMaxOps];
  FilterOp* s_ops = reinterpret_cast<FilterOp*>(s_ops_bytes);
  __shared__ std::uint8_t s_top;
  const std::int64_t b = lo / kFilterBlockRows + blockIdx.x;
  const std::int64_t r0 = b * kFilterBlockRows;
  const int n = static_cast<int>(hi - r0 < kFilterBlockRows ? hi - r0 : kFilterBlockRows);
  const std::int64_t word0 = (r0 - lo) / 32;
  for (int pi = 0; pi < n_programs; ++pi) {
    const ProgramView p = program_at(packed, pi);
    for (int i = threadIdx.x; i < p.n_ops; i += kThreads) s_ops[i] = p.ops[i];
    __syncthreads();
    if (threadIdx.x == 0) s_top = analyse(t, p, s_ops, b, s_states);
    __syncthreads();
    const std::uint8_t top = s_top;
    std::uint32_t* out = masks + static_cast<std::int64_t>(pi) * mask_stride + word0;
    if (top != kVerdictSome) {
      if (threadIdx.x < kBlockWords) {
        const int w = threadIdx.x, left = n - 32 * w;
        if (left > 0) out[w] = top == kVerdictAll ? (left >= 32 ? ~0u : (1u << left) - 1u) : 0u;
      }
      if (flags != nullptr && threadIdx.x == 0) flags[static_cast<std::int64_t>(pi) * flag_stride + blockIdx.x] = top;
    } else {
      bool any = false, all = true;
#pragma unroll
      for (int k = 0; k < kRowsPerThread; ++k) {
        const int i = k * kThreads + threadIdx.x;
        bool pass = false;
        if (i < n) {
          pass = eval_row(t, p, s_ops, s_states, r0 + i);
          any = any || pass;
          all = all && pass;
        }
        const std::uint32_t word = __ballot_sync(0xffffffffu, pass);
        if ((threadIdx.x & 31) == 0 && i < n) out[i / 32] = word;
      }
      if (flags != nullptr) {
        const int a = __syncthreads_or(any), l = __syncthreads_and(all);
        if (threadIdx.x == 0)
          flags[static_cast<std::int64_t>(pi) * flag_stride + blockIdx.x] =
              a == 0 ? kVerdictNone : l != 0 ? kVerdictAll : kVerdictSome;
      }
    }
    __syncthreads();  // s_ops and s_states are rewritten for the next program
  }
}

}  // namespace

// ------------------------------------------------------------------------------ the table

std::size_t DeviceFilterTableStorage::bytes_for(std::int64_t rows, int columns) {
  const auto r = static_cast<std::size_t>(rows), c = static_cast<std::size_t>(columns);
  const std::size_t blocks = static_cast<std::size_t>((rows + kFilterBlockRows - 1) / kFilterBlockRows);
  return 8 * (c * r + r + 2 * (c + 1) * blocks);
}

DeviceFilterTableStorage::DeviceFilterTableStorage(const AttributeTable& table, cudaStream_t stream) {
  const std::int64_t rows = table.rows(), blocks = table.blocks();
  const int columns = table.columns();
  bytes_ = bytes_for(rows, columns);
  if (bytes_ > 0) CHECK_CUDA(cudaMalloc(&base_, bytes_));
  try {
    auto* words = static_cast<std::uint64_t*>(base_);
    auto* values = words;
    auto* ids = values + static_cast<std::size_t>(columns) * static_cast<std::size_t>(rows);
    auto* bmin = ids + rows;
    auto* bmax = bmin + static_cast<std::size_t>(columns + 1) * static_cast<std::size_t>(blocks);
    auto put = [&](std::uint64_t* dst, const void* src, std::int64_t count) {
      if (count > 0) CHECK_CUDA(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(count) * 8, cudaMemcpyHostToDevice, stream));
    };
    for (int c = 0; c < columns; ++c) {
      const AttributeColumn& col = table.column(c);
      const BlockBounds& bb = table.bounds(c);
      const bool is_int = col.type == AttributeType::kInt64;
      put(values + static_cast<std::int64_t>(c) * rows, is_int ? static_cast<const void*>(col.ints.data()) : col.reals.data(),
          rows);
      put(bmin + static_cast<std::int64_t>(c) * blocks,
          is_int ? static_cast<const void*>(bb.ints_min.data()) : bb.reals_min.data(), blocks);
      put(bmax + static_cast<std::int64_t>(c) * blocks,
          is_int ? static_cast<const void*>(bb.ints_max.data()) : bb.reals_max.data(), blocks);
    }
    put(reinterpret_cast<std::uint64_t*>(ids), table.global_ids().data(), rows);
    put(bmin + static_cast<std::int64_t>(columns) * blocks, table.bounds(kFilterIdColumn).ints_min.data(), blocks);
    put(bmax + static_cast<std::int64_t>(columns) * blocks, table.bounds(kFilterIdColumn).ints_max.data(), blocks);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    view_.rows = rows;
    view_.blocks = blocks;
    view_.columns = columns;
    view_.values = values;
    view_.global_ids = reinterpret_cast<const std::int64_t*>(ids);
    view_.block_min = bmin;
    view_.block_max = bmax;
  } catch (...) {
    (void)cudaStreamSynchronize(stream);
    cudaFree(base_);
    throw;
  }
}

void DeviceFilterTableStorage::update_rows(const AttributeTable& table, RowRange range, cudaStream_t stream) {
  const std::int64_t rows = view_.rows, blocks = view_.blocks;
  const int columns = view_.columns;
  SHARDTOPK_EXPECTS(table.rows() == rows && table.columns() == columns, "attribute table update: the host table has ",
                    table.rows(), " rows and ", table.columns(), " columns, the device table ", rows, " and ", columns);
  SHARDTOPK_EXPECTS(range.lo >= 0 && range.lo <= range.hi && range.hi <= rows, "attribute table update: rows [",
                    range.lo, ", ", range.hi, ") outside [0, ", rows, ")");
  if (range.size() == 0) return;
  auto* words = static_cast<std::uint64_t*>(base_);
  auto* ids = words + static_cast<std::size_t>(columns) * static_cast<std::size_t>(rows);
  auto* bmin = ids + rows;
  auto* bmax = bmin + static_cast<std::size_t>(columns + 1) * static_cast<std::size_t>(blocks);
  const std::int64_t b0 = range.lo / kFilterBlockRows, b1 = (range.hi - 1) / kFilterBlockRows + 1;
  auto put = [&](std::uint64_t* dst, const void* src, std::int64_t first, std::int64_t count) {
    CHECK_CUDA(cudaMemcpyAsync(dst + first, static_cast<const std::uint64_t*>(src) + first,
                               static_cast<std::size_t>(count) * 8, cudaMemcpyHostToDevice, stream));
  };
  for (int c = 0; c < columns; ++c) {
    const AttributeColumn& col = table.column(c);
    const BlockBounds& bb = table.bounds(c);
    const bool is_int = col.type == AttributeType::kInt64;
    put(words + static_cast<std::int64_t>(c) * rows, is_int ? static_cast<const void*>(col.ints.data()) : col.reals.data(),
        range.lo, range.size());
    put(bmin + static_cast<std::int64_t>(c) * blocks,
        is_int ? static_cast<const void*>(bb.ints_min.data()) : bb.reals_min.data(), b0, b1 - b0);
    put(bmax + static_cast<std::int64_t>(c) * blocks,
        is_int ? static_cast<const void*>(bb.ints_max.data()) : bb.reals_max.data(), b0, b1 - b0);
  }
  put(ids, table.global_ids().data(), range.lo, range.size());
  put(bmin + static_cast<std::int64_t>(columns) * blocks, table.bounds(kFilterIdColumn).ints_min.data(), b0, b1 - b0);
  put(bmax + static_cast<std::int64_t>(columns) * blocks, table.bounds(kFilterIdColumn).ints_max.data(), b0, b1 - b0);
}

DeviceFilterTableStorage::~DeviceFilterTableStorage() {
  if (base_) cudaFree(base_);
}

// ------------------------------------------------------------------------------ the launcher

void launch_filter_mask(const DeviceFilterTable& table, const std::uint8_t* packed_programs, int n_programs,
                        RowRange rows, std::uint32_t* masks, std::int64_t mask_stride_words,
                        std::uint8_t* block_flags, std::int64_t flag_stride, cudaStream_t stream) {
  SHARDTOPK_EXPECTS(n_programs >= 0, "launch_filter_mask: negative program count ", n_programs);
  SHARDTOPK_EXPECTS(rows.lo >= 0 && rows.lo <= rows.hi && rows.hi <= table.rows, "launch_filter_mask: rows [", rows.lo,
                    ", ", rows.hi, ") are outside the table's ", table.rows, " rows");
  SHARDTOPK_EXPECTS(rows.lo % kFilterBlockRows == 0, "launch_filter_mask: rows.lo = ", rows.lo,
                    " is not a multiple of the block size ", kFilterBlockRows);
  if (n_programs == 0 || rows.size() == 0) return;
  const std::int64_t blocks = (rows.size() + kFilterBlockRows - 1) / kFilterBlockRows;
  SHARDTOPK_EXPECTS(packed_programs != nullptr && masks != nullptr, "launch_filter_mask: null programs or masks");
  SHARDTOPK_EXPECTS(mask_stride_words >= filter_mask_words(rows.size()), "launch_filter_mask: mask stride ",
                    mask_stride_words, " words is less than the ", filter_mask_words(rows.size()), " words of ",
                    rows.size(), " rows");
  SHARDTOPK_EXPECTS(block_flags == nullptr || flag_stride >= blocks, "launch_filter_mask: flag stride ", flag_stride,
                    " is less than the ", blocks, " blocks of the range");
  SHARDTOPK_EXPECTS(blocks <= 0x7fffffff, "launch_filter_mask: ", blocks, " blocks exceed one grid");
  filter_mask_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      table, packed_programs, n_programs, rows.lo, rows.hi, masks, mask_stride_words, block_flags, flag_stride);
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk
