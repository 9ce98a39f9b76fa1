#pragma once
// Runs an engine from host arrays, as the index would: a Space of the engine's kind (host memory,
// or the engine's GPU) holds the query batch and the candidates, queries are prepared by the
// engine (validated, normalised for cosine) and the candidates come back to the host.
#include <cstdint>
#include <memory>
#include <vector>

#include "shardtopk/space.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/ordering.hpp"

namespace shardtopk::test {

class EngineRunner {
 public:
  explicit EngineRunner(Engine& e) : e_(e), info_(e.info()) {
    space_ = info_.space == MemSpace::kDevice ? make_cuda_space(info_.device) : make_host_space();
    const std::size_t bmax = static_cast<std::size_t>(e.limits().batch_max);
    queries_ = static_cast<float*>(space_->alloc(bmax * static_cast<std::size_t>(info_.dim) * sizeof(float)));
    out_ = static_cast<Candidate*>(space_->alloc(bmax * static_cast<std::size_t>(e.limits().k_max) * sizeof(Candidate)));
  }

  /// Local top-k [batch, k] of queries [batch, dim] (host), through SearchArgs (epilogue optional).
  std::vector<Candidate> search(const float* queries, int batch, int k, SearchEpilogue* epilogue = nullptr) {
    const std::size_t qbytes = sizeof(float) * static_cast<std::size_t>(batch) * static_cast<std::size_t>(info_.dim);
    space_->from_host(queries_, queries, qbytes, /*wait=*/true);
    e_.prepare_queries(queries_, batch, space_->stream());
    SearchArgs a;
    a.queries = queries_;
    a.batch = batch;
    a.k = k;
    a.out = out_;
    a.stream = space_->stream();
    a.epilogue = epilogue;
    e_.search(a);
    std::vector<Candidate> out(static_cast<std::size_t>(batch) * static_cast<std::size_t>(k));
    space_->to_host(out.data(), out_, out.size() * sizeof(Candidate), /*wait=*/true);
    return out;
  }

  Space& space() { return *space_; }
  const float* device_queries() const { return queries_; }
  Candidate* device_out() const { return out_; }

 private:
  Engine& e_;
  EngineInfo info_;
  std::unique_ptr<Space> space_;
  float* queries_ = nullptr;
  Candidate* out_ = nullptr;
};

}  // namespace shardtopk::test
