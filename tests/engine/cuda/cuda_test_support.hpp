#pragma once
// Helpers of the CUDA kernel tests (host code with CUDA runtime calls): device arrays, and a
// shard stored on the device as the engine stores it.

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/cuda_check.cuh"
#include "core/cuda_raii.cuh"
#include "engine/cuda/kernels/scan_select.hpp"
#include "engine/cuda/kernels/shard_store.hpp"
#include "engine/cuda/kernels/workspace_types.hpp"
#include "engine/cuda/plan.hpp"
#include "engine_test_support.hpp"

namespace shardtopk::test {

/// Makes the test's GPU current; every kernel test calls it after SHARDTOPK_SKIP_WITHOUT_GPU().
inline void use_test_device() { CHECK_CUDA(cudaSetDevice(test_device())); }

/// A device array of n elements of T (a trivially copyable type).
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(std::size_t n) : n_(n) { buf_.allocate(std::max<std::size_t>(n, 1) * sizeof(T)); }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  /// Fills every byte with `byte` (e.g. 0xFF: untouched slots stand out).
  DeviceArray(std::size_t n, int byte) : DeviceArray(n) {
    CHECK_CUDA(cudaMemset(buf_.get(), byte, std::max<std::size_t>(n, 1) * sizeof(T)));
  }
  void upload(const std::vector<T>& host) {
    CHECK_CUDA(cudaMemcpy(buf_.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  /// Waits for the device, then copies the array back.
  std::vector<T> download() const {
    std::vector<T> host(n_);
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(host.data(), buf_.get(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  T* get() const { return buf_.as<T>(); }
  std::size_t size() const { return n_; }

 private:
  cuda_detail::DeviceBuffer buf_;
  std::size_t n_ = 0;
};

/// float32 rows [n, dim] stored on the device as the engine stores them: [n, dpad] of `dtype`,
/// zero-padded, plus ids [n] and ‖x‖² [n] (store_rows, row_norms).
struct DeviceShard {
  std::int64_t n = 0, dim = 0, dpad = 0;
  Dtype dtype = Dtype::kFloat32;
  cuda_detail::DeviceBuffer rows;
  DeviceArray<std::int64_t> ids;
  DeviceArray<float> row_sq;
  double max_sq = 0.0;

  DeviceShard(const std::vector<float>& host, std::int64_t n_rows, std::int64_t d, Dtype dt,
              const std::vector<std::int64_t>& host_ids)
      : n(n_rows), dim(d), dpad(cuda_detail::padded_dim(d, dt)), dtype(dt), ids(host_ids), row_sq(n_rows) {
    const std::size_t bytes = std::max<std::size_t>(1, static_cast<std::size_t>(n * dpad) * dtype_bytes(dt));
    rows.allocate(bytes);
    CHECK_CUDA(cudaMemset(rows.get(), 0, bytes));
    if (n == 0) return;
    DeviceArray<float> staged(host);
    DeviceArray<unsigned long long> status(std::vector<unsigned long long>{~0ull, 0ull});
    cuda_detail::store_rows(staged.get(), n, dim, dt, rows.get(), dpad, 0, status.get(), nullptr);
    cuda_detail::row_norms(dt, rows.get(), n, dpad, row_sq.get(), status.get() + 1, nullptr);
    const std::vector<unsigned long long> st = status.download();
    if (st[0] != ~0ull) throw std::runtime_error("DeviceShard: a value overflows the storage type");
    std::memcpy(&max_sq, &st[1], sizeof max_sq);
  }
  int nvec() const { return static_cast<int>(dpad * static_cast<std::int64_t>(dtype_bytes(dtype)) / 16); }
};

inline int multiprocessors() {
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, test_device()));
  return sms;
}

/// The scan's workspace for one shard and a plan, and searches one query at a time.
class ScanRun {
 public:
  ScanRun(const DeviceShard& shard, bool l2, int cap, ScanRows rows = ScanRows::kAuto,
          ScanSchedule schedule = ScanSchedule::kAuto, bool l2_hints = true)
      : shard_(shard),
        plan_(cuda_detail::plan_scan_select(shard.dtype, l2, shard.n, shard.dim, shard.dpad, cap, rows, schedule,
                                            l2_hints, multiprocessors())),
        scores_(static_cast<std::size_t>(shard.n)),
        cand_(static_cast<std::size_t>(cap)),
        dir_(std::vector<std::uint32_t>{0u}) {
    // hists [kHistWords], count, state: one block, as the engine's arena lays them out
    state_bytes_ = cuda_detail::kHistWords * 4 + 256 + sizeof(cuda_detail::Batch1State);
    state_.allocate(state_bytes_);
  }

  /// Candidates [nq, k] of queries [nq, dim] (float32, host), searched one by one.
  std::vector<Candidate> search(const std::vector<float>& queries, std::int64_t nq, int k) {
    DeviceArray<float> q(queries);
    DeviceArray<Candidate> out(static_cast<std::size_t>(nq) * k, 0xFF);
    cuda_detail::ScanSelectArgs a;
    a.shard = shard_.rows.get();
    a.ids = shard_.ids.get();
    a.k = k;
    a.scores = scores_.get();
    a.hists = state_.as<std::uint32_t>();
    a.count = a.hists + cuda_detail::kHistWords;
    a.state = reinterpret_cast<cuda_detail::Batch1State*>(reinterpret_cast<char*>(a.hists) + cuda_detail::kHistWords * 4 + 256);
    a.clear_bytes = state_bytes_;
    a.cand = cand_.get();
    a.dir = dir_.get();
    for (std::int64_t i = 0; i < nq; ++i) {
      a.query = q.get() + i * shard_.dim;
      a.out = out.get() + i * k;
      cuda_detail::scan_select(plan_, a, nullptr);
    }
    return out.download();
  }
  const cuda_detail::ScanSelectPlan& plan() const { return plan_; }
  /// Runs the selection on a grid of `blocks` instead of the plan's (any grid is correct).
  void set_select_blocks(int blocks) { plan_.select_blocks = blocks; }

 private:
  const DeviceShard& shard_;
  cuda_detail::ScanSelectPlan plan_;
  DeviceArray<float> scores_;
  DeviceArray<cuda_detail::PoolEntry> cand_;
  DeviceArray<std::uint32_t> dir_;
  cuda_detail::DeviceBuffer state_;
  std::size_t state_bytes_ = 0;
};

/// cap for k_max as the engine sizes it (a power of two ≥ 2 k_max, at least 4096).
inline int cap_for(int k_max) {
  EngineLimits lim;
  lim.k_max = k_max;
  return cuda_detail::cand_cap(lim);
}

}  // namespace shardtopk::test
