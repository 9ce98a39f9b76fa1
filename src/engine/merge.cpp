#include "shardtopk/merge.hpp"

#include <vector>

#include "shardtopk/error.hpp"

namespace shardtopk {

void merge_topk_host(const Candidate* lists, int parts, int batch, int k, Candidate* out) {
  SHARDTOPK_ASSERT(parts >= 1 && batch >= 0 && k >= 1);
  // k-way merge by repeated selection of the best head: parts is small (ranks), so a linear
  // scan over heads beats a heap and keeps the code obviously right.
  std::vector<int> head(static_cast<size_t>(parts));
  for (int b = 0; b < batch; ++b) {
    std::fill(head.begin(), head.end(), 0);
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int p = 0; p < parts; ++p) {
        if (head[p] >= k) continue;
        const Candidate& c = lists[(static_cast<size_t>(p) * batch + b) * k + head[p]];
        if (best < 0 || better(c, lists[(static_cast<size_t>(best) * batch + b) * k + head[best]])) best = p;
      }
      out[static_cast<size_t>(b) * k + j] = best < 0 ? pad_candidate()
                                                     : lists[(static_cast<size_t>(best) * batch + b) * k + head[best]];
      if (best >= 0) ++head[best];
    }
  }
}

}  // namespace shardtopk
