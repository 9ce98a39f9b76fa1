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
    const IndexInfo i = index.info();
    info_.rows = i.rows;
    info_.dim = i.dim;
    info_.k_max = i.k_max;
    info_.batch_max = i.batch_max;
    info_.ranks = i.world_size;
    info_.metric = to_string(i.metric);
    info_.dtype = to_string(i.engine.dtype);
    info_.engine = i.engine.name;
    info_.comm = i.comm;
    info_.max_filters = i.max_filters;
    info_.attributes = i.schema;
  }

  BackendInfo info() const override { return info_; }

  SearchBatch admit(const float* queries, int nq, long long k, const FilterProgram* filter,
                    const QueryBounds* bounds, bool stats) const override {
    if (!filter && !bounds && !stats) return index_.admit(queries, nq, k);
    const std::vector<const FilterProgram*> each(static_cast<std::size_t>(std::max(nq, 0)), filter);
    return index_.admit(queries, nq, k, filter ? each.data() : nullptr, bounds, stats);
  }

  std::uint64_t applied_seq() const override { return index_.update_stats().applied_seq; }

  void search(const SearchBatch& batch, std::int64_t* ids, float* scores, std::int32_t* counts,
              QueryStats* stats) override {
    try {
      index_.search(batch, ids, scores, counts, stats);
    } catch (const CommError& e) {
      throw RankLost(e.what());
    } catch (const RemoteError& e) {
      throw SearchFailed(e.what());
    } catch (const Error& e) {
      throw BatchRejected(e.what());  // rank 0 refused the batch; every rank stays in step
    }
  }

  void rank(const float* query, const std::int64_t* ids, int n, const FilterProgram* filter, std::int64_t* ranks,
            float* scores) override {
    try {
      index_.rank(query, ids, n, filter, ranks, scores);
    } catch (const CommError& e) {
      throw RankLost(e.what());
    } catch (const RemoteError& e) {
      throw SearchFailed(e.what());
    } catch (const Error& e) {
      throw BatchRejected(e.what());  // rank 0 refused the request; every rank stays in step
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
