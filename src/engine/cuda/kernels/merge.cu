// The device k-way merge of candidate lists: every candidate finds its output rank by binary
// searches in the other lists (merge path without a sequential step).

#include "engine/cuda/kernels/merge.hpp"

#include <algorithm>
#include <limits>

#include "core/cuda_check.cuh"
#include "shardtopk/error.hpp"

namespace shardtopk::cuda_detail {
namespace {

constexpr int kMergeThreads = 256;
constexpr int kMergeElemsPerBlock = 2048;

/// Number of elements of list [len] (sorted best first) that are better than c.
__device__ __forceinline__ int count_better(const Candidate* list, int len, const Candidate& c) {
  int lo = 0, hi = len;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (better(list[mid], c)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/// Number of elements of list [len] (sorted best first) that are better than or equal to c.
__device__ __forceinline__ int count_not_worse(const Candidate* list, int len, const Candidate& c) {
  int lo = 0, hi = len;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (!better(c, list[mid])) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

struct MergeArgs {
  const Candidate* in;       // list l of query q at in + q * in_qstride + l * in_lstride
  std::int64_t in_qstride, in_lstride;
  int n_lists, len_in, fan_in;
  Candidate* out;            // group g of query q at out + q * out_qstride + g * out_lstride
  std::int64_t out_qstride, out_lstride;
  int len_out;
  std::int64_t n_groups, slices;  // grid = batch × n_groups × slices
};

/// Merges each group of fan_in consecutive sorted lists [len_in] into one sorted list
/// [len_out] (the best len_out; padding when the group holds fewer candidates). Element i of
/// list li lands at rank i + Σ_{lj<li} #(lj ≥ it) + Σ_{lj>li} #(lj > it): a permutation even
/// with equal elements, and independent of everything but the candidates themselves.
/// Block: kMergeThreads threads for kMergeElemsPerBlock elements of one group of one query.
__global__ void __launch_bounds__(kMergeThreads) merge_lists_kernel(MergeArgs a) {
  const std::int64_t slice = blockIdx.x % a.slices;
  const std::int64_t rest = blockIdx.x / a.slices;
  const std::int64_t g = rest % a.n_groups;
  const std::int64_t q = rest / a.n_groups;
  const int first_list = static_cast<int>(g * a.fan_in);
  const int gc = min(a.fan_in, a.n_lists - first_list);
  const Candidate* base = a.in + q * a.in_qstride + first_list * a.in_lstride;
  Candidate* dst = a.out + q * a.out_qstride + g * a.out_lstride;
  const std::int64_t total = static_cast<std::int64_t>(gc) * a.len_in;
  const std::int64_t e0 = slice * kMergeElemsPerBlock;
  const std::int64_t e1 = min(total, e0 + kMergeElemsPerBlock);
  for (std::int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
    const int li = static_cast<int>(e / a.len_in);
    const int i = static_cast<int>(e % a.len_in);
    if (i >= a.len_out) continue;  // its rank is at least i
    const Candidate c = base[li * a.in_lstride + i];
    std::int64_t rank = i;
    for (int lj = 0; lj < gc && rank < a.len_out; ++lj) {
      if (lj == li) continue;
      const Candidate* other = base + lj * a.in_lstride;
      rank += lj < li ? count_not_worse(other, a.len_in, c) : count_better(other, a.len_in, c);
    }
    if (rank < a.len_out) dst[rank] = c;
  }
  if (slice == 0)
    for (std::int64_t r = total + threadIdx.x; r < a.len_out; r += blockDim.x) dst[r] = pad_candidate();
}

}  // namespace

void merge_lists(const Candidate* lists, int parts, std::int64_t list_stride, int batch, int k, Candidate* out,
                 cudaStream_t stream) {
  if (batch == 0) return;
  MergeArgs a;
  a.in = lists;
  a.in_qstride = k;
  a.in_lstride = list_stride;
  a.n_lists = parts;
  a.len_in = k;
  a.fan_in = parts;
  a.out = out;
  a.out_qstride = k;
  a.out_lstride = 0;
  a.len_out = k;
  a.n_groups = 1;
  const std::int64_t per_group = static_cast<std::int64_t>(parts) * k;
  a.slices = std::max<std::int64_t>(1, (per_group + kMergeElemsPerBlock - 1) / kMergeElemsPerBlock);
  const std::int64_t blocks = static_cast<std::int64_t>(batch) * a.slices;
  SHARDTOPK_ASSERT(blocks <= std::numeric_limits<int>::max());
  merge_lists_kernel<<<static_cast<unsigned>(blocks), kMergeThreads, 0, stream>>>(a);
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
