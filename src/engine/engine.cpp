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

float* Engine::upload_buffer(std::int64_t) { not_streamed(*this, "upload_buffer"); }
void Engine::upload_rows(std::int64_t, std::int64_t, const float*) { not_streamed(*this, "upload_rows"); }
void Engine::finish_upload() { not_streamed(*this, "finish_upload"); }

}  // namespace shardtopk
