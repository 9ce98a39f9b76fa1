#pragma once
// Helpers shared by the subcommands.
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "shardtopk/config.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk {
class ShardedIndex;
}

namespace shardtopk::cli {

/// The config file with `--set key=value` overrides applied, validated; rank 0 logs its
/// warnings (deprecated spellings). @throws Error naming the file, key or value.
Config load_with_overrides(const std::string& path, const std::vector<std::string>& overrides, int rank = 0);

/// The attributes of cfg.corpus.attributes (names and types) from the corpus file's headers alone
/// (nothing is read), checked as loading checks them. @throws Error naming the dataset.
AttributeSchema corpus_attribute_schema(const Config& cfg, std::int64_t corpus_rows);

/// The text of a --filter-json value: the JSON itself, or @FILE for a file's contents.
/// @throws Error naming the file when it cannot be read.
std::string filter_text(const std::string& value);

/// Refuses a corpus.path that is not there, naming the key, the config file and the cause.
/// @throws Error.
void check_corpus_path(const Config& cfg);

/// check_corpus_path where a start-up loads the corpus: without storage.dir, or when the
/// directory's manifest names no snapshot (a manifest that cannot be read is left for the
/// start-up to report). @throws Error.
void check_corpus_path_for_startup(const Config& cfg);

/// The inputs a job reads its corpus from, for check_output_path: {"corpus", corpus.path} and
/// every other file its datasets' bytes come from (an external link's target, a virtual
/// dataset's sources, external raw storage: dataset_files), as {"corpus's linked data", file}.
/// A corpus that cannot be opened adds nothing more (loading it says why).
std::vector<std::pair<std::string, std::string>> corpus_inputs(const Config& cfg);

/// What an output is written as: HDF5 needs a regular file; text may also go to a device or a
/// pipe (/dev/null, /dev/stdout).
enum class OutputKind { kHdf5, kText };

/// Refuses an output path that is one of `inputs` ({what, path}, compared as files and as
/// absolute paths, so outputs not written yet too: "refusing to write 'R.h5': it is the corpus
/// file ..."), that lies inside `storage_dir` (non-empty: the service's files) or in any folder
/// holding a storage directory's MANIFEST.json, that exists and is not what `kind` can be
/// written to (a directory; a FIFO or device for HDF5), or whose folder does not exist or is not
/// writable. Empty input paths are skipped. @throws Error.
void check_output_path(const std::string& out, const std::vector<std::pair<std::string, std::string>>& inputs,
                       OutputKind kind = OutputKind::kHdf5, const std::string& storage_dir = "");

/// For a rank started by an MPI launcher (mpirun or its daemon, hydra, a PMIx launcher, told
/// apart by the variables they set): this process is killed (SIGKILL) when the launcher, its
/// parent, dies. Orphaned ranks of a killed job would otherwise serve on and hold the storage
/// directory's lock and the port for seconds until MPI noticed, refusing an immediate restart.
/// Nothing changes for a process started otherwise.
void end_with_launcher();

/// Rank 0 of a job command (search, knn-graph): ends the followers' loops (ShardedIndex::shutdown)
/// when it goes out of scope, also on an error, unless `comm_failed` was set: after a CommError
/// the collective cannot complete and the job ends instead. A failing shutdown ends the job.
struct ShutdownGuard {
  ShardedIndex& index;
  bool comm_failed = false;
  ~ShutdownGuard();
};

/// Runs `work` on rank 0 only (reading inputs, opening outputs), then every rank learns through
/// one collective check (make_mpi_communicator(timeout_s)) whether it threw: a bad input on rank
/// 0 stops every rank with rank 0's message. @throws that check's error on every rank when
/// `work` threw.
void rank0_then_agree(int rank, double timeout_s, const std::function<void()>& work);

/// Prints "shardtopk: error: MESSAGE" on stderr.
void print_error(const char* message);

/// How a job command (search, serve) ends on an error that escaped it, on every rank: a failed
/// or timed-out collective ends the job (exit 2) without unwinding the NCCL/CUDA state a dead
/// peer may hold; an error every rank knows (RemoteError) is printed by rank 0 (exit 1); any other
/// error is known to this rank alone, so it ends every rank (exit 1) rather than leave them waiting.
int end_job(std::exception_ptr err, int rank);

}  // namespace shardtopk::cli
