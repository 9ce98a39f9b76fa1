#pragma once
// Replays each search shape of the CUDA engine from a CUDA graph captured on its first use.
// Graphs take the per-search launch cost off the host: a batched search is hundreds of
// kernels, and even batch 1's handful are launched in one call. A graph captured on one stream
// is launched on whatever stream the next search with the same key is ordered on.

#include <cuda_runtime.h>

#include <map>
#include <tuple>

#include "shardtopk/ordering.hpp"

namespace shardtopk::cuda_detail {

class GraphCache {
 public:
  /// What a captured search depends on: queries, out, k, batch, the epilogue it ends with, and
  /// which row masks it reads (kMaskFilters | kMaskLive bits; the masks live at fixed addresses,
  /// but whether each is read is captured in the kernels' arguments).
  using Key = std::tuple<const float*, const Candidate*, int, int, const void*, int>;
  static constexpr int kMaskFilters = 1;  ///< per-query filter masks
  static constexpr int kMaskLive = 2;     ///< the live mask (deleted rows)
  static constexpr int kSeeded = 4;       ///< a filtered batch: per-query seeded thresholds

  /// enabled = false: run() enqueues directly every time (nothing is captured).
  explicit GraphCache(bool enabled) : enabled_(enabled) {}
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  /// Launches the graph of `key` on `stream`, first capturing `enqueue()` on `stream` when the
  /// key is new (enqueue must queue work on `stream`, or on streams that fork from and join
  /// back into it through events, and must not synchronise). At most kMaxGraphs are kept: a
  /// new key beyond that drops them all (rare: many distinct k and batch sizes).
  template <typename Enqueue>
  void run(const Key& key, cudaStream_t stream, const Enqueue& enqueue) {
    if (!enabled_) return enqueue();
    cudaGraphExec_t exec = find(key);
    if (exec == nullptr) {
      begin_capture(stream);
      try {
        enqueue();
      } catch (...) {
        abandon_capture(stream);
        throw;
      }
      exec = end_capture(key, stream);
    }
    launch(exec, stream);
  }

  static constexpr std::size_t kMaxGraphs = 128;

  /// Drops every graph (a value captured into them changed, e.g. the shard's largest norm).
  void clear();

 private:
  cudaGraphExec_t find(const Key& key) const;
  static void begin_capture(cudaStream_t stream);
  static void abandon_capture(cudaStream_t stream);
  cudaGraphExec_t end_capture(const Key& key, cudaStream_t stream);
  static void launch(cudaGraphExec_t exec, cudaStream_t stream);

  bool enabled_;
  std::map<Key, cudaGraphExec_t> graphs_;
};

}  // namespace shardtopk::cuda_detail
