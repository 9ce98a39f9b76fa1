#include "shardtopk/merge.hpp"

#include <vector>

#include "shardtopk/error.hpp"

namespace shardtopk {

void merge_topk_host(const Candidate* lists, int parts, int batch, int k, Candidate* out) {
  merge_topk_host(lists, parts, static_cast<std::int64_t>(batch) * k, batch, k, out);
}

void merge_topk_host(const Candidate* lists, int parts, std::int64_t list_stride, int batch, int k, Candidate* out) {
  SHARDTOPK_ASSERT(parts >= 1 && batch >= 0 && k >= 1 && list_stride >= static_cast<std::int64_t>(batch) * k);
  // k-way merge by repeated selection of the best head: parts is small (ranks), so a linear
  // scan over heads beats a heap and keeps the code obviously right.
  // No allocation for the rank counts of real jobs.
  int head_small[64];
  std::vector<int> head_big;
  int* head = head_small;
  if (parts > 64) {
    head_big.resize(static_cast<size_t>(parts));
    head = head_big.data();
  }
  for (int b = 0; b < batch; ++b) {
    std::fill(head, head + parts, 0);
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int p = 0; p < parts; ++p) {
        if (head[p] >= k) continue;
        const Candidate& c = lists[p * list_stride + static_cast<std::int64_t>(b) * k + head[p]];
        if (best < 0 || better(c, lists[best * list_stride + static_cast<std::int64_t>(b) * k + head[best]])) best = p;
      }
      out[static_cast<size_t>(b) * k + j] =
          best < 0 ? pad_candidate() : lists[best * list_stride + static_cast<std::int64_t>(b) * k + head[best]];
      if (best >= 0) ++head[best];
    }
  }
}

}  // namespace shardtopk
