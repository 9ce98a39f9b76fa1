#include "comm/staged_comm.hpp"

#include "shardtopk/space.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {
namespace {

class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(Communicator& host, Space& space, std::size_t max_bytes)
      : host_(host), space_(space), max_bytes_(max_bytes) {
    const std::size_t world = static_cast<std::size_t>(host.world_size());
    send_ = static_cast<char*>(space.alloc_host(max_bytes));
    recv_ = static_cast<char*>(space.alloc_host(max_bytes * world));
  }

  std::string name() const override { return "mpi"; }
  int rank() const override { return host_.rank(); }
  int world_size() const override { return host_.world_size(); }
  int local_rank() const override { return host_.local_rank(); }
  int local_size() const override { return host_.local_size(); }
  MemSpace space() const override { return space_.kind(); }
  double timeout_s() const override { return host_.timeout_s(); }

  void broadcast(void* buf, std::size_t bytes, int root) override { broadcast_async(buf, bytes, root, nullptr); }

  void broadcast_async(void* buf, std::size_t bytes, int root, const void* root_copy) override {
    fits(bytes, "broadcast");
    // The root sends what it already has on the host (read-only here) or copies it back first.
    const void* send = root_copy;
    if (rank() == root && !send) {
      space_.to_host(send_, buf, bytes, /*wait=*/true);
      send = send_;
    }
    void* staging = rank() == root ? const_cast<void*>(send) : static_cast<void*>(send_);
    host_.broadcast(staging, bytes, root);
    if (rank() != root) space_.from_host(buf, send_, bytes, /*wait=*/false);
  }

  void allgather(const void* send, void* recv, std::size_t bytes) override {
    fits(bytes, "all-gather");
    space_.to_host(send_, send, bytes, /*wait=*/true);
    host_.allgather(send_, recv_, bytes);
    space_.from_host(recv, recv_, bytes * static_cast<std::size_t>(world_size()), /*wait=*/false);
  }
  void allgather_async(const void* send, void* recv, std::size_t bytes) override { allgather(send, recv, bytes); }

  /// The copies back to the device are queued: wait for them.
  void wait(const char*) override { space_.synchronize(); }

  void check(bool ok, const std::string& message) override { host_.check(ok, message); }
  void barrier() override { host_.barrier(); }

 private:
  void fits(std::size_t bytes, const char* what) const {
    SHARDTOPK_EXPECTS(bytes <= max_bytes_, "staged MPI ", what, " of ", bytes, " bytes exceeds its staging buffer of ",
                      max_bytes_, " bytes");
  }

  Communicator& host_;
  Space& space_;
  std::size_t max_bytes_;
  char* send_ = nullptr;  // [max_bytes] page-locked (the space's alloc_host)
  char* recv_ = nullptr;  // [world, max_bytes]
};

}  // namespace

std::unique_ptr<Communicator> make_staged_communicator(Communicator& host, Space& space, std::size_t max_bytes) {
  return std::make_unique<StagedCommunicator>(host, space, max_bytes);
}

}  // namespace shardtopk
