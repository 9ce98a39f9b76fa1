// Engine defaults for what only some engines do.
#include "shardtopk/engine.hpp"

#include "shardtopk/error.hpp"

namespace shardtopk {
namespace {
[[noreturn]] void not_streamed(const Engine& e, const char* call) {
  throw Error(std::string(call) + ": the " + e.name() +
              " engine does not stream its upload (ShardInput::streamed is for the CUDA engine)");
}
}  // namespace

void check_engine_fits(EngineBackend backend, std::int64_t rows, std::int64_t dim, Dtype dtype,
                       const EngineLimits& limits, int threads, int device) {
  if (backend != EngineBackend::kCuda) {
    check_cpu_engine_fits(rows, dim, dtype, limits, threads);
    return;
  }
  std::uint64_t free_b = 0, total_b = 0;
  if (!cuda_device_memory(device, &free_b, &total_b)) return;
  const std::uint64_t need = cuda_engine_device_bytes(rows, dim, dtype, limits);
  SHARDTOPK_EXPECTS(need <= free_b, "CUDA engine on device ", device, ": the shard of ", rows, " rows x ", dim,
                    " dims in ", to_string(dtype), " with search.batch_max=", limits.batch_max - limits.extra_rows,
                    " and search.k_max=", limits.k_max, " needs ", need, " bytes of device memory (`shardtopk plan` "
                    "shows it as engine_bytes) but only ", free_b, " of ", total_b, " bytes are free; add ranks "
                    "(mpirun -np) so that each shard is smaller",
                    (dtype == Dtype::kFloat32 ? ", or store the shard as float16/bfloat16 (engine.dtype)" : ""),
                    ", or lower search.batch_max / search.k_max");
}

float* Engine::upload_buffer(std::int64_t) { not_streamed(*this, "upload_buffer"); }
void Engine::upload_rows(std::int64_t, std::int64_t, const float*) { not_streamed(*this, "upload_rows"); }
void Engine::finish_upload() { not_streamed(*this, "finish_upload"); }

}  // namespace shardtopk
