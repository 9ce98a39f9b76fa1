#pragma once
// The CUDA engine as the index sets it up, for the engine suites (test_cuda_engine*.cpp): a
// corpus with what the oracle must see, the engine on the test's GPU beside a CUDA space holding
// its query and candidate buffers, searches, and the split epilogue of a one-rank index.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine_test_support.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/space.hpp"
#include "shardtopk/types.hpp"
#include "test_support.hpp"

namespace shardtopk::test {

/// A corpus as the index hands it to an engine (cosine rows already normalised) plus what the
/// oracle must see to judge the engine's arithmetic: the stored values (rounded to the storage
/// dtype) and, for cosine, inner product of normalised vectors (the oracle's own cosine would
/// re-normalise rounded rows and differ by the rounding, which is not the engine's error).
struct Corpus {
  std::int64_t n = 0, dim = 0;
  std::vector<float> rows;      // handed to the engine (float32)
  std::vector<float> stored;    // what the engine scores: rows rounded to the dtype
  std::vector<std::int64_t> ids;
  ShardInput input() const { return ShardInput{rows.data(), n, dim, ids.data()}; }
};

inline Corpus make_corpus(std::vector<float> raw, std::int64_t n, std::int64_t dim, Metric m, Dtype dt,
                   std::vector<std::int64_t> ids) {
  Corpus c;
  c.n = n;
  c.dim = dim;
  c.rows = std::move(raw);
  if (m == Metric::kCosine && n > 0) normalize_rows(c.rows.data(), n, dim, 0, "test row");
  c.stored = rounded(dt, c.rows);
  c.ids = std::move(ids);
  return c;
}

/// Queries as the engine sees them after prepare_queries (cosine: normalised on the host with
/// the same arithmetic).
inline std::vector<float> prepared(std::vector<float> q, std::int64_t nq, std::int64_t dim, Metric m) {
  if (m == Metric::kCosine) normalize_rows(q.data(), nq, dim, 0, "query");
  return q;
}

inline EngineLimits limits(int batch_max, int k_max) {
  EngineLimits l;
  l.batch_max = batch_max;
  l.k_max = k_max;
  return l;
}

/// The engine on the test's GPU, ordered on the stream of a CUDA space that holds a query
/// buffer [batch_max, dim] and a candidate buffer [batch_max, k_max] (as the index sets it up).
struct Rig {
  std::unique_ptr<Space> space;
  std::unique_ptr<Engine> engine;
  float* queries = nullptr;
  Candidate* out = nullptr;
  Engine* operator->() const { return engine.get(); }
};

inline Rig make_rig(const ShardInput& in, Metric m, Dtype dt, const EngineLimits& lim, EngineOptions opt = {}) {
  Rig r;
  r.space = make_cuda_space(test_device());
  opt.device = test_device();
  r.engine = make_cuda_engine(in, m, dt, lim, opt, r.space->stream());
  r.queries = static_cast<float*>(r.space->alloc(sizeof(float) * lim.batch_max * in.dim));
  r.out = static_cast<Candidate*>(r.space->alloc(sizeof(Candidate) * lim.batch_max * lim.k_max));
  return r;
}

/// One search of the first b queries in r.queries into r.out, with optional epilogue and stream.
inline void search(Rig& r, int b, int k, SearchEpilogue* epilogue = nullptr, void* stream = nullptr) {
  SearchArgs a;
  a.queries = r.queries;
  a.batch = b;
  a.k = k;
  a.out = r.out;
  a.stream = stream;
  a.epilogue = epilogue;
  r->search(a);
}

/// Copies host queries [b, dim] into r.queries and prepares them (validation; cosine: normalised).
inline void stage(Rig& r, const float* host, int b) {
  r.space->from_host(r.queries, host, sizeof(float) * b * r->info().dim, false);
  r->prepare_queries(r.queries, b, nullptr);
}

/// An epilogue as the one-rank index uses it: the space splits the search's answer into ids
/// and reported scores in mapped pinned memory, inside the search's CUDA graph; with `direct`,
/// the same memory is its direct target (the engine's final sort writes it where it can).
class SplitEpilogue final : public SearchEpilogue {
 public:
  SplitEpilogue(Space& space, Metric m, int batch_max, int k_max, bool direct = false)
      : space_(space), l2_(m == Metric::kL2) {
    const std::size_t n = static_cast<std::size_t>(batch_max) * k_max;
    ids_ = static_cast<std::int64_t*>(space.alloc_host(n * sizeof(std::int64_t)));
    scores_ = static_cast<float*>(space.alloc_host(n * sizeof(float)));
    dev_ids_ = static_cast<std::int64_t*>(space.mapped(ids_));
    dev_scores_ = static_cast<float*>(space.mapped(scores_));
    direct_ = Direct{dev_ids_, dev_scores_, l2_};
    has_direct_ = direct;
  }
  void enqueue(const Candidate* list, int batch, int k, void* stream) override {
    ++enqueued_;
    space_.split(list, static_cast<std::int64_t>(batch) * k, l2_, dev_ids_, dev_scores_, stream);
  }
  const Direct* direct() const override { return has_direct_ ? &direct_ : nullptr; }
  /// Fills the host answer with a pattern (id −2, score NaN) that no search writes.
  void poison(int batch, int k) {
    const std::size_t n = static_cast<std::size_t>(batch) * k;
    std::fill(ids_, ids_ + n, std::int64_t{-2});
    std::fill(scores_, scores_ + n, std::numeric_limits<float>::quiet_NaN());
  }
  /// enqueue() calls so far (captured once per graph: a replay does not call it again).
  int enqueued() const { return enqueued_; }
  /// The answer [batch, k] of the last split (once the stream has passed it).
  Answer read(int batch, int k) const {
    const std::size_t n = static_cast<std::size_t>(batch) * k;
    Answer a;
    a.ids.assign(ids_, ids_ + n);
    a.scores.assign(scores_, scores_ + n);
    return a;
  }

 private:
  Space& space_;
  bool l2_;
  std::int64_t *ids_ = nullptr, *dev_ids_ = nullptr;
  float *scores_ = nullptr, *dev_scores_ = nullptr;
  Direct direct_;
  bool has_direct_ = false;
  int enqueued_ = 0;
};

/// Runs nq host queries through the engine in batches of `batch`: copy in, prepare, search,
/// copy the [b, k] candidates out. Returns the raw candidates [nq, k].
inline std::vector<Candidate> run_candidates(Rig& r, const std::vector<float>& queries, std::int64_t nq, int k, int batch) {
  const std::int64_t dim = r->info().dim;
  std::vector<Candidate> out(static_cast<size_t>(nq * k));
  for (std::int64_t q0 = 0; q0 < nq; q0 += batch) {
    const int b = static_cast<int>(std::min<std::int64_t>(batch, nq - q0));
    stage(r, queries.data() + q0 * dim, b);
    search(r, b, k);
    r.space->to_host(out.data() + q0 * k, r.out, sizeof(Candidate) * b * k, true);
  }
  return out;
}

/// The storage types × metrics the engine suites sweep.
struct DtypeMetric {
  Dtype dtype;
  Metric metric;
  std::string name() const { return std::string(dname(dtype)) + "_" + mname(metric); }
};

inline std::ostream& operator<<(std::ostream& os, const DtypeMetric& c) { return os << c.name(); }

inline std::vector<DtypeMetric> dtype_metrics() {
  std::vector<DtypeMetric> out;
  for (Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
    for (Metric m : {Metric::kInnerProduct, Metric::kCosine, Metric::kL2}) out.push_back({dt, m});
  return out;
}

}  // namespace shardtopk::test
