#pragma once
// The memory space of one rank's data path: host memory, or one GPU and a stream. The index
// allocates its query, candidate and answer buffers here at start-up, moves bytes between the
// host and the space, and merges and exports candidate lists in it. Internal header.
//
// Every call that takes no stream is ordered on stream(); "returns at once" means the work is
// queued there (host space: it is done). Errors throw shardtopk::Error naming the call.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "shardtopk/engine.hpp"
#include "shardtopk/ordering.hpp"

namespace shardtopk {

class Space {
 public:
  virtual ~Space() = default;

  virtual MemSpace kind() const = 0;
  /// cudaStream_t of the data path (the engine's and NCCL's), nullptr on the host.
  virtual void* stream() const = 0;
  /// The GPU (-1 on the host).
  virtual int device() const = 0;

  /// Start-up allocations, freed when the Space is destroyed. alloc: `bytes` in this space
  /// (device memory on a GPU). alloc_host: host memory the space's copies and kernels can use
  /// directly (page-locked and mapped into the device's address space on a GPU).
  /// @throws Error naming the bytes when the memory cannot be had.
  virtual void* alloc(std::size_t bytes) = 0;
  virtual void* alloc_host(std::size_t bytes) = 0;
  /// The address under which kernels of this space see alloc_host() memory (host: the same).
  virtual void* mapped(void* host_ptr) const = 0;

  /// Copies between the host and this space, counted in counters(). wait = false: returns at
  /// once (the host memory must then stay untouched until the stream has passed the copy).
  virtual void to_host(void* host_dst, const void* src, std::size_t bytes, bool wait) = 0;
  virtual void from_host(void* dst, const void* host_src, std::size_t bytes, bool wait) = 0;
  /// Copy within the space, not counted, ordered after the work queued on `after` (a caller's
  /// cudaStream_t; nullptr is the legacy default stream) and before what follows on stream().
  virtual void copy(void* dst, const void* src, std::size_t bytes, void* after) = 0;
  /// Makes stream() wait for the work queued so far on `other` (cudaStream_t; nullptr: the legacy
  /// default stream), and the reverse (join): neither blocks the host. No-ops on the host.
  virtual void wait_for(void* other) = 0;
  virtual void join_into(void* other) = 0;
  /// Blocks until everything queued on stream() has completed.
  virtual void synchronize() = 0;

  /// out [n] ← pad_candidate(). Returns at once.
  virtual void fill_pad(Candidate* out, std::int64_t n) = 0;
  /// Merges `parts` candidate lists into out [batch, k] (best first, the ordering rule). List p
  /// of query q starts at lists + p * list_stride + q * k and holds k candidates, best first.
  /// out must not overlap the lists. Returns at once.
  virtual void merge(const Candidate* lists, int parts, std::int64_t list_stride, int batch, int k,
                     Candidate* out) = 0;
  /// Splits list [n] into ids [n] and reported scores [n] (l2: the distance −score), written to
  /// this space or to mapped alloc_host() memory (pass the mapped() address), on `stream`
  /// (nullptr: stream()). With `status`, the same launch also copies status.count 16-byte slots,
  /// slot i from status.src + i · status.stride, to status.dst [count] (one per rank: the
  /// all-gathered rank statuses). Returns at once. Capturable (the CUDA engine runs it inside its
  /// search graph as an epilogue).
  struct StatusCopy {
    const Candidate* src = nullptr;
    std::int64_t stride = 0;  ///< in candidates
    int count = 0;
    Candidate* dst = nullptr;
  };
  /// With `invalid` (the device search path's queries rejected on the device): query q's row of
  /// k results, when invalid.flags[q] != 0, is written as ids kPadId and scores NaN instead.
  struct InvalidRows {
    const std::uint8_t* flags = nullptr;  ///< [n / k] in this space
    int k = 0;
  };
  virtual void split(const Candidate* list, std::int64_t n, bool l2, std::int64_t* ids, float* scores, void* stream,
                     const StatusCopy* status = nullptr, const InvalidRows* invalid = nullptr) = 0;

  virtual TransferCounters& counters() = 0;
};

/// Host memory; copies are memcpy.
std::unique_ptr<Space> make_host_space();

/// GPU `device`, with a new non-blocking stream that lives as long as the Space.
/// @throws Error when built without CUDA or the device does not exist.
std::unique_ptr<Space> make_cuda_space(int device);

}  // namespace shardtopk
