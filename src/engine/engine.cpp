// Engine defaults for what only some engines do.
#include "shardtopk/engine.hpp"

#include "shardtopk/error.hpp"

namespace shardtopk {

float* Engine::upload_buffer(std::int64_t) {
  throw Error("the " + name() + " engine does not stream its upload (ShardInput::streamed is for the CUDA engine)");
}
void Engine::upload_rows(std::int64_t, std::int64_t, const float*) {
  throw Error("the " + name() + " engine does not stream its upload (ShardInput::streamed is for the CUDA engine)");
}
void Engine::finish_upload() {
  throw Error("the " + name() + " engine does not stream its upload (ShardInput::streamed is for the CUDA engine)");
}

}  // namespace shardtopk
