// Built when shardtopk is configured without CUDA: the NCCL communicator reports that it is absent.
#include "shardtopk/communicator.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {

bool built_with_nccl() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, void*, int, double, bool) {
  throw Error("comm.backend 'nccl': this shardtopk was built without CUDA/NCCL (reconfigure with -DSHARDTOPK_CUDA=ON)");
}

}  // namespace shardtopk
