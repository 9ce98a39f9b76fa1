#pragma once
/// @file ingest.hpp
/// From a corpus (an HDF5 file, or rows in memory) to a rank's running ShardedIndex: the shard
/// plan, the read of this rank's rows, their checks (finite values, norms, ids), the choice of
/// engine and communicator backends, and the engine's upload.

#include <cstdint>
#include <memory>
#include <string>

#include "shardtopk/communicator.hpp"
#include "shardtopk/config.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/shard_plan.hpp"

namespace shardtopk {

/// Build this rank's index from a config (collective over MPI_COMM_WORLD; MPI must be
/// initialised, see MpiSession): sets up logging, plans the shards, reads this rank's rows
/// (hyperslab, in blocks of engine.read_chunk_rows), validates them, chooses the engine backend
/// and builds the engine and the communicators. Every limit that can be checked before the read
/// (backend, memory) is checked before it. An error on any rank throws RemoteError on every rank
/// (naming the rank and its message). With storage.dir set the index is updatable: rank 0 opens
/// and recovers the directory first, every rank loads its snapshot (when there is one) instead
/// of corpus.path, each rank reserves rank_capacity_rows() slots, and the log's records after
/// the base are replayed (ShardedIndex::enable_updates). @param log_progress rank 0 logs read
/// progress.
std::unique_ptr<ShardedIndex> load_index(const Config& cfg, bool log_progress = true);

/// Build this rank's index from rows already in memory (or a generated shard: ShardInput's
/// `generated`): chooses the engine backend, builds the engine (index_engine_limits) and the
/// data communicator. Collective over host_comm's ranks; an error on any rank throws RemoteError
/// on every rank. `stats` (read times) is completed with upload time and resident bytes. With
/// storage.dir set the index is updatable over those rows (shard.capacity, or 0:
/// rank_capacity_rows()) and the log is replayed; a directory holding a snapshot is refused
/// (the base must then be the snapshot: load_index).
std::unique_ptr<ShardedIndex> build_index(const Config& cfg, Metric metric, std::int64_t total_rows, RowRange rows,
                                          const ShardInput& shard, std::unique_ptr<Communicator> host_comm,
                                          IngestStats stats = {});

/// The engine backend for cfg.engine.backend (auto: CUDA when a GPU is visible). @throws Error
/// when CUDA is asked for but unavailable, or more ranks share a node than it has GPUs.
EngineBackend choose_backend(const Config& cfg, const Communicator& host_comm);

/// Choose the metric: cfg.search.metric when set, else the corpus file's `distance` attribute
/// (angular → cosine, euclidean → l2, dot/ip → inner_product), else inner_product.
Metric resolve_metric(const Config& cfg);

/// Number of worker threads for the CPU engine: cfg value, or hardware cores ÷ ranks on the node.
int resolve_threads(const Config& cfg, int local_size);

/// Slots a rank reserves for a shard of `shard_rows` rows: the rows themselves when the index is
/// read-only (storage.dir empty), else storage.capacity_rows; when that is 0, rank `rank`'s share
/// of the storage directory's recorded capacity (`recorded_rows` slots over all ranks, from
/// StorageManifest::capacity_rows) split over `world` ranks as shard_rows() splits rows (the
/// shares add up to it), so that a restart keeps the capacity the directory was started with;
/// else (nothing recorded, or a share below shard_rows) shard_rows + max(1024, shard_rows / 4).
/// @throws Error when storage.capacity_rows is below shard_rows.
std::int64_t rank_capacity_rows(const Config& cfg, std::int64_t shard_rows, int world = 1,
                                std::int64_t recorded_rows = 0, int rank = 0);

/// rank_capacity_rows() summed over the `world` ranks of the shard plan of `total_rows` rows:
/// the capacity a directory records.
std::int64_t total_capacity_rows(const Config& cfg, std::int64_t total_rows, int world, std::int64_t recorded_rows = 0);

/// Whether load_index streams a shard into the engine (blocks through pinned buffers, no host
/// copy of the shard): the CUDA engine with inner product or l2. Cosine rows are normalised on
/// the host first, so they are read into one host array.
bool streams_shard(bool cuda_engine, Metric metric);

/// The values a streamed shard's blocks carry from the reader to the engine
/// (ShardInput::stream_format): IEEE binary16 bits when the dataset is stored as float16
/// (`stored_dtype` as DatasetInfo::dtype names it; half the bytes, no conversion on the host, the
/// same stored rows in any engine.dtype), float32 values otherwise and whenever the shard is not
/// streamed (streams_shard() false: cosine rows are normalised in float32 on the host).
RowFormat stream_format(bool cuda_engine, Metric metric, const std::string& stored_dtype);

/// Checks, before any row is read, that a rank's engine and index buffers fit this machine: for
/// kCpu, cpu_engine_host_bytes() + index_buffer_bytes() against host_memory_bytes() shared by the
/// `ranks_on_host` ranks on the machine; for kCuda,
/// cuda_engine_device_bytes() + index_buffer_bytes() against the free memory of GPU `device`
/// (skipped when that cannot be queried; the engine checks again when it allocates). load_index
/// runs it on every rank, `shardtopk plan` for every rank of a plan, so the two cannot disagree.
/// @throws Error naming the bytes needed and the memory there is.
void check_engine_fits(EngineBackend backend, std::int64_t rows, std::int64_t dim, Dtype dtype,
                       const SearchConfig& search, int world_size, int threads, int device, int ranks_on_host = 1);

/// A rank's engine bytes plus the index's buffers beside it: what `plan` shows as engine_bytes.
std::uint64_t rank_resident_bytes(bool cuda, std::int64_t rows, std::int64_t dim, Dtype dtype,
                                  const SearchConfig& search, int world_size, int threads);

/// Host bytes held at the peak of loading `rows` rows of `dim` columns (not counting the CPU
/// engine's own buffers): streamed, the ids (8 B/row) and one or two pinned float32 blocks of
/// min(read_chunk_rows, rows) rows (two when the shard spans more than one block); otherwise
/// the float32 rows and their ids, rows · (4 · dim + 8). Estimate used by `shardtopk plan`.
std::uint64_t load_peak_host_bytes(std::int64_t rows, std::int64_t dim, bool streamed, long long read_chunk_rows);

}  // namespace shardtopk
