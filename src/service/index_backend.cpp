// The only place the service touches ShardedIndex's search API.
#include "service/index_backend.hpp"

#include <algorithm>

#include "shardtopk/communicator.hpp"
#include "shardtopk/index.hpp"

namespace shardtopk::service {
namespace {

class IndexBackend final : public SearchBackend {
 public:
  explicit IndexBackend(ShardedIndex& index) : index_(index) {
    info_.rows = index.total_rows();
    info_.dim = index.dim();
    info_.k_max = index.config().search.k_max;
    info_.batch_max = index.config().search.batch_max;
    info_.ranks = index.world_size();
    info_.metric = to_string(index.metric());
    info_.dtype = to_string(index.engine_info().dtype);
    info_.engine = index.engine_info().name;
    info_.comm = index.data_comm().name();
    info_.rejects_zero_norm = index.metric() == Metric::kCosine;
    info_.max_filters = std::min(index.config().search.max_filters, index.config().search.batch_max);
    info_.attributes = index.attribute_schema();
  }

  BackendInfo info() const override { return info_; }

  void check_k(long long k) const override { shardtopk::check_k(k, info_.k_max, index_.k_limit_rows()); }

  void search(const float* queries, int batch, int k, std::int64_t* ids, float* scores,
              const FilterProgram* const* filters, std::int32_t* counts) override {
    try {
      index_.search(queries, batch, k, ids, scores, filters, counts);
    } catch (const CommError& e) {
      throw RankLost(e.what());
    } catch (const RemoteError& e) {
      throw SearchFailed(e.what());
    } catch (const Error& e) {
      throw BatchRejected(e.what());  // rank 0 refused the batch; every rank stays in step
    }
  }

  std::vector<RankCounters> rank_counters() override {
    std::vector<RankStats> s;
    try {
      s = index_.rank_stats();
    } catch (const CommError& e) {
      throw RankLost(e.what());
    }
    std::vector<RankCounters> out(s.size());
    for (size_t r = 0; r < s.size(); ++r) out[r] = {s[r].searches, s[r].search_seconds};
    return out;
  }

 private:
  ShardedIndex& index_;
  BackendInfo info_;
};

}  // namespace

std::unique_ptr<SearchBackend> make_index_backend(ShardedIndex& index) {
  return std::make_unique<IndexBackend>(index);
}

}  // namespace shardtopk::service
