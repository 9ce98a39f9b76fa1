// `shardtopk knn-graph`: the exact k nearest neighbours of every corpus row over the whole
// sharded corpus (docs/KNN_GRAPH.md). Every rank loads its shard; rank 0 reads the corpus rows
// block by block as queries and searches them in batches, exactly as `search` searches a query
// file (followers serve the collective searches), and appends each block to the output file,
// durably, so that a rerun with the same arguments continues after the last complete block.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"
#include "index/admission.hpp"
#include "io/graph_file.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/ingest.hpp"
#include "storage/storage_impl.hpp"

namespace shardtopk::cli {
namespace {

using Clock = std::chrono::steady_clock;

// k per query the searches ask for: one more with --exclude-self (the row itself may be among them).
int search_k(const KnnGraphArgs& a) { return a.k + (a.exclude_self ? 1 : 0); }

// Argument checks that need only file headers, the same on every rank (so every rank fails
// alike and rank 0 speaks). Sizes the index for the job: search.k_max and search.batch_max
// become search_k() and --batch (at most the corpus's rows). Returns the corpus shape.
DatasetInfo check_knn_args(const KnnGraphArgs& a, Config& cfg) {
  SHARDTOPK_EXPECTS(cfg.storage.dir.empty(), "knn-graph reads the corpus file, but storage.dir is set ('",
                    cfg.storage.dir, "'): its snapshot and log would not be searched; unset it with --set storage.dir=");
  check_corpus_path(cfg);
  const DatasetInfo ci = inspect_dataset(cfg.corpus.path, cfg.corpus.dataset);
  SHARDTOPK_EXPECTS(ci.dims.size() == 2 && ci.is_float, "'", cfg.corpus.path, "': corpus dataset '", ci.name,
                    "' must be a 2-D float dataset [N, dim]");
  const std::int64_t n = ci.dims[0];
  const std::int64_t k_hi = a.exclude_self ? n - 1 : n;
  SHARDTOPK_EXPECTS(k_hi >= 1, "'", cfg.corpus.path, "' has ", n, " row(s)",
                    a.exclude_self ? " and --exclude-self leaves no other row" : "",
                    ": a k-NN graph needs at least one neighbour per row");
  SHARDTOPK_EXPECTS(a.k >= 1 && a.k <= k_hi, "--k ", a.k, " out of range: allowed 1 .. ", k_hi, " (the corpus '",
                    cfg.corpus.path, "' has ", n, " rows", a.exclude_self ? "; --exclude-self leaves N - 1 others" : "",
                    ")");
  SHARDTOPK_EXPECTS(a.batch >= 1 && a.batch <= 1048576, "--batch ", a.batch, " out of range: allowed 1 .. 1048576");
  SHARDTOPK_EXPECTS(a.block_rows >= 1, "--block-rows ", a.block_rows, " out of range: must be at least 1");
  SHARDTOPK_EXPECTS(a.stop_after_blocks >= -1, "--stop-after-blocks ", a.stop_after_blocks, " must be -1 or >= 0");
  std::vector<std::pair<std::string, std::string>> inputs = corpus_inputs(cfg);
  inputs.push_back({"config", a.config});
  check_output_path(a.out, inputs);
  if (!a.timings_json.empty()) {
    inputs.push_back({"output", a.out});
    check_output_path(a.timings_json, inputs, OutputKind::kText);
  }
  cfg.search.k_max = search_k(a);
  cfg.search.batch_max = static_cast<int>(std::min<std::int64_t>(a.batch, n));  // no batch holds more rows
  validate(cfg);
  return ci;
}

// The job's identity before the engine is known (GraphFile compares the engine once it is).
GraphIdentity identity_of(const KnnGraphArgs& a, const Config& cfg, const DatasetInfo& ci) {
  GraphIdentity g;
  g.rows = ci.dims[0];
  g.dim = ci.dims[1];
  g.k = a.k;
  g.exclude_self = a.exclude_self;
  g.metric = resolve_metric(cfg);
  g.dtype = cfg.engine.dtype;
  g.corpus_path = cfg.corpus.path;
  g.corpus_dataset = cfg.corpus.dataset;
  g.ids_dataset = cfg.corpus.ids_dataset;
  struct stat st {};
  SHARDTOPK_EXPECTS(::stat(cfg.corpus.path.c_str(), &st) == 0, "corpus.path '", cfg.corpus.path, "' vanished");
  g.corpus_bytes = st.st_size;
  g.corpus_sample_crc32c = storage::corpus_sample_crc32c(cfg.corpus.path, static_cast<std::uint64_t>(st.st_size));
  return g;
}

std::string clock_text(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  const long long t = static_cast<long long>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

// Row r's list of k + 1 [k + 1] without the row's own id (or without the last entry when the
// row is not among them), into out [k]: the k best rows other than r, under the ordering rule.
void drop_self(std::int64_t self, int k, const std::int64_t* ids, const float* scores, std::int64_t* out_ids,
               float* out_scores) {
  int j = 0;
  for (int i = 0; i <= k && j < k; ++i) {
    if (ids[i] == self) continue;
    out_ids[j] = ids[i];
    out_scores[j] = scores[i];
    ++j;
  }
}

// What rank 0 writes to: the output file (created, or continued after its checks) and, with
// --exclude-self and an ids dataset, the global id of every row [N].
struct Output {
  std::unique_ptr<GraphFile> file;
  std::vector<std::int64_t> row_ids;
};

Output open_output(const Config& cfg, const KnnGraphArgs& a, const IndexInfo& info, GraphIdentity id) {
  SHARDTOPK_EXPECTS(info.rows == id.rows && info.dim == id.dim, "corpus '", cfg.corpus.path,
                    "' changed while loading: [", id.rows, " x ", id.dim, "] in its header, [", info.rows, " x ",
                    info.dim, "] loaded");
  id.engine = info.engine.name;
  Output out;
  out.file = std::make_unique<GraphFile>(a.out, id, a.overwrite);
  if (a.exclude_self && !cfg.corpus.ids_dataset.empty())
    out.row_ids = read_int64_vector(cfg.corpus.path, cfg.corpus.ids_dataset);
  return out;
}

// At most one progress line every 5 s: rows searched of N, rows/s over this run, ETA.
class Progress {
 public:
  Progress(std::int64_t start, std::int64_t n) : start_(start), n_(n), t0_(Clock::now()), last_(t0_) {}
  void at(std::int64_t done, bool last = false) {
    const auto now = Clock::now();
    if (!last && std::chrono::duration<double>(now - last_).count() < 5.0) return;
    last_ = now;
    const double rate = rows_per_s(done);
    spdlog::info("knn-graph: {}/{} rows ({:.1f} %), {:.0f} rows/s, ETA {}", done, n_, 100.0 * done / n_, rate,
                 clock_text(rate > 0 ? static_cast<double>(n_ - done) / rate : -1));
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  double rows_per_s(std::int64_t done) const {
    const double s = seconds();
    return s > 0 ? static_cast<double>(done - start_) / s : 0;
  }

 private:
  std::int64_t start_, n_;
  Clock::time_point t0_, last_;
};

// Rank 0: searches rows [start, N) block by block and appends each block to the output; the
// next block is read, and the block before written, while this one is searched.
struct BlockTimes {
  double seconds = 0;     // the whole loop
  double read_wait = 0;   // of which waiting for the next block of query rows
  double write_s = 0;     // writing blocks to the output (on a helper thread, beside the searches)
  double write_wait = 0;  // of the loop, waiting for a block's write to end
};
BlockTimes search_blocks(ShardedIndex& index, ShutdownGuard& guard, const Config& cfg, const KnnGraphArgs& a,
                     const IndexInfo& info, Output& out) {
  const std::int64_t n = info.rows, dim = info.dim, start = out.file->rows_done();
  const int kq = search_k(a);
  const std::int64_t block = std::min<std::int64_t>(a.block_rows, n);
  ReadOptions ropt;
  ropt.chunk_rows = block;
  // Beside the searches: with a GPU engine one thread searches, one admits the next batch and the
  // rest of the rank's cores read (a block of float16 rows decoded on two threads took longer
  // than its searches on one H200); the CPU engine keeps its cores and reads on two.
  const int cores = std::min(resolve_threads(cfg, info.local_ranks), usable_cores());
  ropt.threads = info.engine.name == "cpu" ? 2 : std::max(1, cores - 2);
  ropt.label = "corpus row";
  ropt.direct_reads = cfg.io.direct_reads;
  ropt.f16c = cfg.io.f16c;
  auto read_block = [&](std::int64_t lo) {
    return read_rows(cfg.corpus.path, cfg.corpus.dataset, RowRange{lo, std::min(n, lo + block)}, ropt);
  };
  // A block's answers: searches of k + 1 (--exclude-self) land in qids/qscores and are compacted
  // into ids/scores. Two sets: one block's answers are written while the next block is searched.
  struct Answers {
    std::vector<std::int64_t> qids, ids;
    std::vector<float> qscores, scores;
  };
  Answers answers[2];
  for (Answers& s : answers) {
    s.qids.resize(static_cast<size_t>(block * kq));
    s.qscores.resize(s.qids.size());
    s.ids.resize(a.exclude_self ? static_cast<size_t>(block * a.k) : 0);
    s.scores.resize(s.ids.size());
  }
  // Block [lo, lo + rows)'s answers to the file (durably: GraphFile::append), on a helper thread;
  // only that thread touches the output until the loop has waited for it.
  auto write_block = [&](Answers& s, std::int64_t lo, std::int64_t rows) {
    const auto t0 = Clock::now();
    if (a.exclude_self) {
      for (std::int64_t i = 0; i < rows; ++i) {
        const std::int64_t self = out.row_ids.empty() ? lo + i : out.row_ids[static_cast<size_t>(lo + i)];
        drop_self(self, a.k, s.qids.data() + i * kq, s.qscores.data() + i * kq, s.ids.data() + i * a.k,
                  s.scores.data() + i * a.k);
      }
      out.file->append(rows, s.ids.data(), s.scores.data());
    } else {
      out.file->append(rows, s.qids.data(), s.qscores.data());
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  auto rows_text = [](std::int64_t row0, int b) {
    return "rows [" + std::to_string(row0) + ", " + std::to_string(row0 + b) + "): ";
  };
  // The host's checks of a batch (admission), on a helper thread while the batch before it is
  // searched (admission reads only the index's limits): about 0.5 ms of a 4 ms search at 1,024
  // rows of 768 floats on one H200.
  auto admit_batch = [&](const float* q, std::int64_t row0, int b) {
    try {
      return index.admit(q, b, kq);
    } catch (const Error& e) {
      throw RemoteError(rows_text(row0, b) + e.what(), true);
    }
  };
  auto search_batch = [&](const SearchBatch& batch, std::int64_t row0, std::int64_t* out_ids, float* out_scores) {
    try {
      index.search(batch, out_ids, out_scores);
    } catch (const RemoteError&) {
      throw;
    } catch (const CommError&) {
      guard.comm_failed = true;
      throw;  // handled by run_knn_graph while the index is alive
    } catch (const Error& e) {
      throw RemoteError(rows_text(row0, batch.size()) + e.what(), true);
    }
  };

  Progress progress(start, n);
  BlockTimes times;
  std::int64_t blocks = 0;
  std::future<double> writing;  // the write of the block before (declared after `answers`: ends first)
  auto wait_for_write = [&] {
    if (!writing.valid()) return;
    const auto w0 = Clock::now();
    times.write_s += writing.get();  // a failed write throws here
    times.write_wait += std::chrono::duration<double>(Clock::now() - w0).count();
  };
  std::future<HostMatrix> next = std::async(std::launch::async, read_block, start);
  for (std::int64_t lo = start; lo < n; lo += block) {
    const auto w0 = Clock::now();
    const HostMatrix q = next.get();
    times.read_wait += std::chrono::duration<double>(Clock::now() - w0).count();
    const std::int64_t rows = q.rows;
    if (lo + rows < n) next = std::async(std::launch::async, read_block, lo + rows);
    // This block's set was last used two blocks ago, whose write ended before the last one began.
    Answers& s = answers[blocks % 2];
    auto batch_at = [&](std::int64_t b0) { return static_cast<int>(std::min<std::int64_t>(a.batch, rows - b0)); };
    std::future<SearchBatch> admitted = std::async(std::launch::async, admit_batch, q.data.data(), lo, batch_at(0));
    for (std::int64_t b0 = 0; b0 < rows; b0 += a.batch) {
      const int b = batch_at(b0);
      const SearchBatch batch = admitted.get();
      if (b0 + b < rows)
        admitted = std::async(std::launch::async, admit_batch, q.data.data() + (b0 + b) * dim, lo + b0 + b,
                              batch_at(b0 + b));
      search_batch(batch, lo + b0, s.qids.data() + b0 * kq, s.qscores.data() + b0 * kq);
      progress.at(lo + b0 + b);
    }
    wait_for_write();  // one write at a time, in block order
    writing = std::async(std::launch::async, write_block, std::ref(s), lo, rows);
    ++blocks;
    progress.at(lo + rows, lo + rows == n);
    if (a.stop_after_blocks >= 0 && blocks == a.stop_after_blocks && lo + rows < n) {
      // Tests: an interruption at a block boundary, as a kill would leave it (nothing closed).
      wait_for_write();
      std::fprintf(stderr, "shardtopk: knn-graph: stopping after %lld block(s) (--stop-after-blocks)\n",
                   static_cast<long long>(blocks));
      std::fflush(nullptr);
      ::kill(::getpid(), SIGKILL);
    }
  }
  wait_for_write();
  times.seconds = progress.seconds();
  return times;
}

// --timings-json (nothing when it is not given): what report prints, as JSON; a run that found
// the output complete writes it too, with rows_searched 0.
void write_timings(const Config& cfg, const KnnGraphArgs& a, const IndexInfo& info, std::int64_t start,
                   const BlockTimes& times) {
  if (a.timings_json.empty()) return;
  const std::int64_t n = info.rows;
  const double seconds = times.seconds;
  const double rate = seconds > 0 ? static_cast<double>(n - start) / seconds : 0;
  const nlohmann::json j = {
      {"corpus", cfg.corpus.path}, {"rows", n}, {"dim", info.dim}, {"metric", to_string(info.metric)},
      {"dtype", to_string(info.engine.dtype)}, {"k", a.k}, {"exclude_self", a.exclude_self},
      {"batch", a.batch}, {"block_rows", std::min<std::int64_t>(a.block_rows, n)}, {"start_row", start},
      {"rows_searched", n - start}, {"search_s", seconds}, {"rows_per_s", rate},
      {"read_wait_s", times.read_wait}, {"write_s", times.write_s}, {"write_wait_s", times.write_wait},
      {"ingest_s", info.ingest.total_s}, {"engine", info.engine.name}, {"comm", info.comm},
      {"world_size", info.world_size}, {"out", a.out},
  };
  std::ofstream f(a.timings_json);
  SHARDTOPK_EXPECTS(f.good(), "cannot write '", a.timings_json, "'");
  f << j.dump(2) << "\n";
}

// The summary line (stdout) and --timings-json.
void report(const Config& cfg, const KnnGraphArgs& a, const IndexInfo& info, std::int64_t start,
            const BlockTimes& times) {
  const double seconds = times.seconds;
  const std::int64_t n = info.rows;
  const double rate = seconds > 0 ? static_cast<double>(n - start) / seconds : 0;
  const std::string resumed = start > 0 ? " (continued from row " + std::to_string(start) + ")" : "";
  std::printf("knn-graph: %lld rows x %lld, k=%d%s, %s | %lld rows%s in %.2f s, %.0f rows/s (%.2f s waiting for "
              "rows, %.2f s for writes) | ingest %.2f s | %s/%s, %d rank(s) | wrote %s\n",
              static_cast<long long>(n), static_cast<long long>(info.dim), a.k,
              a.exclude_self ? " (self excluded)" : "", to_string(info.metric).c_str(),
              static_cast<long long>(n - start), resumed.c_str(), seconds, rate, times.read_wait, times.write_wait,
              info.ingest.total_s,
              info.engine.name.c_str(), info.comm.c_str(), info.world_size, a.out.c_str());
  write_timings(cfg, a, info, start, times);
}

// Every row is a query of the graph: a corpus whose largest row could not be one (its float32
// scores could overflow) fails at the start, before the output is opened, not when that row's
// batch comes up (admission refuses it there, after hours on a large corpus).
void check_rows_are_queries(const IndexInfo& info) {
  const NormSummary corpus{info.ingest.max_row_norm, info.ingest.max_row_norm_row};
  const double limit = max_query_norm(info.metric, corpus);
  SHARDTOPK_EXPECTS(!(corpus.max_norm > limit), "row id ", corpus.row, " has norm ", corpus.max_norm,
                    ": every row is a query of the k-NN graph, and under ", to_string(info.metric),
                    " the largest admissible query norm for this corpus is ", limit,
                    " (above it float32 scores could overflow: docs/EXACTNESS.md 'Score range'); scale the corpus "
                    "down; nothing was written");
}

// Every rank on a loaded index: rank 0 opens the output and searches the rows not yet in it,
// the followers serve its searches. A problem opening the output stops every rank.
int graph_all(ShardedIndex& index, const Config& cfg, const KnnGraphArgs& a, int rank, const GraphIdentity& id) {
  const IndexInfo info = index.info();
  Output out;
  rank0_then_agree(rank, cfg.comm.timeout_s, [&] {
    check_rows_are_queries(info);
    out = open_output(cfg, a, info, id);
  });
  if (rank != 0) {
    index.follow();
    return 0;
  }
  ShutdownGuard guard{index};
  const std::int64_t start = out.file->rows_done();
  if (start == info.rows) {
    std::printf("knn-graph: '%s' is complete (%lld rows, k=%d); nothing to do\n", a.out.c_str(),
                static_cast<long long>(info.rows), a.k);
    write_timings(cfg, a, info, start, BlockTimes{});
    return 0;
  }
  if (start > 0)
    spdlog::info("continuing '{}' from row {} of {} (rows [0, {}) are complete)", a.out, start, info.rows, start);
  spdlog::info("knn-graph: {} rows x {}, k={}{}, {} metric, batches of {}, blocks of {} rows, {}/{} on {} rank(s)",
               info.rows, info.dim, a.k, a.exclude_self ? " (self excluded)" : "", to_string(info.metric), a.batch,
               std::min<std::int64_t>(a.block_rows, info.rows), info.engine.name, info.comm, info.world_size);
  if (usable_cores() == 1 && std::thread::hardware_concurrency() > 1)
    spdlog::warn("knn-graph: rank 0 may run on one core of {} (its CPU affinity: mpirun binds each rank to a core "
                 "by default); reading rows, checking batches and searching then share it, which made a 1M-row graph "
                 "1.5 x slower on one H200: under mpirun start with `mpirun --bind-to none`",
                 std::thread::hardware_concurrency());
  const BlockTimes times = search_blocks(index, guard, cfg, a, info, out);
  out.file->close();
  report(cfg, a, info, start, times);
  return 0;
}

}  // namespace

int run_knn_graph(const KnnGraphArgs& a, int* argc, char*** argv) {
  end_with_launcher();
  MpiSession mpi(argc, argv);
  const int rank = mpi.rank();
  init_logging(rank, mpi.world_size());
  try {
    Config cfg;
    DatasetInfo ci;
    try {
      cfg = load_with_overrides(a.config, a.overrides, rank);
      ci = check_knn_args(a, cfg);
    } catch (const Error& e) {
      // The config is the same file on every rank, so every rank fails alike; rank 0 speaks.
      if (rank == 0) print_error(e.what());
      return 1;
    }
    // Rank 0 checks an existing output before the (possibly long) ingest.
    GraphIdentity id;
    rank0_then_agree(rank, cfg.comm.timeout_s, [&] {
      id = identity_of(a, cfg, ci);
      const std::int64_t done = GraphFile::check(a.out, id, a.overwrite);
      if (done > 0) spdlog::info("'{}' holds rows [0, {}) of this job; they are kept", a.out, done);
    });
    std::unique_ptr<ShardedIndex> holder = load_index(cfg);
    try {
      return graph_all(*holder, cfg, a, rank, id);
    } catch (const CommError& e) {
      // As in `search`: end the job while the index is alive.
      print_error(e.what());
      abort_job(2);
    }
  } catch (const std::exception&) {
    return end_job(std::current_exception(), rank);
  }
}

}  // namespace shardtopk::cli
