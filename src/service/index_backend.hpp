#pragma once
// SearchBackend over a ShardedIndex (rank 0's side of the collective search).
#include <memory>

#include "service/search_backend.hpp"

namespace shardtopk {
class ShardedIndex;
}

namespace shardtopk::service {

/// The index must outlive the backend; calls must come from rank 0's MPI thread.
std::unique_ptr<SearchBackend> make_index_backend(ShardedIndex& index);

}  // namespace shardtopk::service
