// Built when shardtopk is configured without CUDA (-DSHARDTOPK_CUDA=OFF or no nvcc): the CUDA
// engine and its Space report that they are absent; everything else works on the CPU.
#include "shardtopk/space.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {

bool built_with_cuda() { return false; }
bool cuda_available() { return false; }
int cuda_device_count() { return 0; }

std::unique_ptr<Engine> make_cuda_engine(const ShardInput&, Metric, Dtype, const EngineLimits&, const EngineOptions&,
                                         void*) {
  throw Error("engine.backend 'cuda': this shardtopk was built without CUDA (reconfigure with -DSHARDTOPK_CUDA=ON)");
}

std::unique_ptr<Space> make_cuda_space(int) {
  throw Error("engine.backend 'cuda': this shardtopk was built without CUDA (reconfigure with -DSHARDTOPK_CUDA=ON)");
}

bool cuda_device_memory(int, std::uint64_t*, std::uint64_t*) { return false; }

std::uint64_t cuda_engine_device_bytes(std::int64_t, std::int64_t, Dtype, const EngineLimits&) { return 0; }

}  // namespace shardtopk
