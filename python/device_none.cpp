// The module's CUDA runtime calls (device.hpp) in a build without CUDA: no device array can be
// made, so none of these is reached by a correct caller; each says why it cannot run.
#include <utility>

#include "device.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::python {
namespace {
[[noreturn]] void no_cuda() {
  throw Error("this shardtopk module was built without CUDA (reconfigure with -DSHARDTOPK_CUDA=ON): "
              "device arrays are not available; pass host arrays (numpy)");
}
}  // namespace

bool cuda_built() { return false; }

DeviceBlock::DeviceBlock(int device, std::size_t bytes, StreamHandle stream, std::shared_ptr<void> stream_owner)
    : bytes_(bytes), device_(device), stream_(stream), stream_owner_(std::move(stream_owner)) {
  no_cuda();
}
DeviceBlock::~DeviceBlock() = default;
void order_streams(int, StreamHandle, StreamHandle) { no_cuda(); }
void copy_to_host(int, void*, const void*, std::size_t, StreamHandle) { no_cuda(); }

}  // namespace shardtopk::python
