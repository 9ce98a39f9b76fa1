#include "engine/cuda/graph_cache.hpp"

#include "core/cuda_check.cuh"

namespace shardtopk::cuda_detail {

GraphCache::~GraphCache() { clear(); }

void GraphCache::clear() {
  for (auto& kv : graphs_) (void)cudaGraphExecDestroy(kv.second);
  graphs_.clear();
}

cudaGraphExec_t GraphCache::find(const Key& key) const {
  const auto it = graphs_.find(key);
  return it == graphs_.end() ? nullptr : it->second;
}

void GraphCache::begin_capture(cudaStream_t stream) {
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
}

void GraphCache::abandon_capture(cudaStream_t stream) {
  cudaGraph_t g = nullptr;
  (void)cudaStreamEndCapture(stream, &g);
  if (g) (void)cudaGraphDestroy(g);
}

cudaGraphExec_t GraphCache::end_capture(const Key& key, cudaStream_t stream) {
  cudaGraph_t g = nullptr;
  CHECK_CUDA(cudaStreamEndCapture(stream, &g));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ierr = cudaGraphInstantiate(&exec, g, 0);
  (void)cudaGraphDestroy(g);
  CHECK_CUDA(ierr);
  if (graphs_.size() >= kMaxGraphs) clear();
  graphs_.emplace(key, exec);
  return exec;
}

void GraphCache::launch(cudaGraphExec_t exec, cudaStream_t stream) { CHECK_CUDA(cudaGraphLaunch(exec, stream)); }

}  // namespace shardtopk::cuda_detail
