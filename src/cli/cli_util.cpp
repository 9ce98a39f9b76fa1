#include "cli/cli_util.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "core/log.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/storage.hpp"
#include "storage/storage_impl.hpp"

namespace shardtopk::cli {

void end_with_launcher() {
  bool launched = false;
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) launched = launched || std::getenv(var);
  const pid_t launcher = ::getppid();
  if (!launched || launcher <= 1) return;
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return;  // not Linux-like: the launcher's own detection stays
  if (::getppid() != launcher) ::raise(SIGKILL);        // it died before the request took effect
}

Config load_with_overrides(const std::string& path, const std::vector<std::string>& overrides, int rank) {
  Config cfg = load_config(path);
  for (const auto& kv : overrides) apply_override(cfg, kv);
  validate(cfg);
  if (rank == 0)
    for (const std::string& w : cfg.warnings) spdlog::warn("{}", w);
  return cfg;
}

AttributeSchema corpus_attribute_schema(const Config& cfg, std::int64_t corpus_rows) {
  AttributeSchema schema;
  for (const AttributeColumn& c : read_attribute_columns(cfg.corpus.path, cfg.corpus.attributes, corpus_rows, RowRange{}))
    schema.push_back({c.name, c.type});
  return schema;
}

std::string filter_text(const std::string& value) {
  if (value.empty() || value[0] != '@') return value;
  const std::string path = value.substr(1);
  struct stat st {};
  SHARDTOPK_EXPECTS(::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode), "--filter-json @", path,
                    ": it is a directory; name the file that holds the filter");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw Error(detail::concat("--filter-json @", path, ": cannot read the file: ", std::strerror(err)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

namespace {
// Files beside a missing `path` whose names begin with its name less the extension (the demo's
// "fashion-mnist-784-euclidean-q1000.h5" for a config's "fashion-mnist-784-euclidean.h5"), at
// most three, as "; beside it: 'A', 'B'" (empty when there are none).
std::string files_like(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  const std::string stem = p.stem().string();
  if (stem.empty()) return "";
  std::vector<std::string> found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(stem, 0) == 0 && it->is_regular_file(ec)) found.push_back((p.parent_path() / name).string());
  }
  std::sort(found.begin(), found.end());
  std::string out;
  for (std::size_t i = 0; i < found.size() && i < 3; ++i) out += (i ? ", '" : "; beside it: '") + found[i] + "'";
  return out;
}
}  // namespace

void check_corpus_path(const Config& cfg) {
  // A corpus file that is not there is a config mistake: say which key names it.
  struct stat st {};
  if (::stat(cfg.corpus.path.c_str(), &st) != 0) {
    const int err = errno;
    throw Error(detail::concat("corpus.path '", cfg.corpus.path, "': ", std::strerror(err),
                               err == ENOENT ? files_like(cfg.corpus.path) : "",
                               "; name the corpus HDF5 file in ", cfg.source, " or with --set corpus.path=FILE",
                               cfg.corpus.path.rfind("data/", 0) == 0
                                   ? " (launch/import_datasets.sh imports the public datasets into data/)"
                                   : ""));
  }
}

void check_corpus_path_for_startup(const Config& cfg) {
  if (!cfg.storage.dir.empty()) {
    try {
      const std::optional<StorageManifest> m = read_storage_manifest(cfg.storage.dir);
      if (m && !m->snapshot_path.empty()) return;  // the snapshot is the base
    } catch (const Error&) {
      return;
    }
  }
  check_corpus_path(cfg);
}

namespace {
/// True when both paths name one existing file (same device and inode).
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}
}  // namespace

namespace {
// `path` made absolute and free of "." / ".." and links as far as it exists (std::filesystem's
// weakly_canonical), so that an output not written yet compares with the other paths.
std::string path_key(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  return ec ? path : p.string();
}
}  // namespace

std::vector<std::pair<std::string, std::string>> corpus_inputs(const Config& cfg) {
  std::vector<std::pair<std::string, std::string>> in{{"corpus", cfg.corpus.path}};
  if (cfg.corpus.path.empty()) return in;
  std::vector<std::string> datasets{cfg.corpus.dataset, cfg.corpus.ids_dataset};
  datasets.insert(datasets.end(), cfg.corpus.attributes.begin(), cfg.corpus.attributes.end());
  try {
    for (const std::string& f : dataset_files(cfg.corpus.path, datasets)) in.push_back({"corpus's linked data", f});
  } catch (const Error&) {
  }
  return in;
}

void check_output_path(const std::string& out, const std::vector<std::pair<std::string, std::string>>& inputs,
                       OutputKind kind, const std::string& storage_dir) {
  // An existing output must be a file: a directory cannot be written as one, and HDF5 on a FIFO
  // (or a device) would block or fail; a text output may also go to a device or a pipe
  // (/dev/null, /dev/stdout).
  struct stat st {};
  if (::stat(out.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    const bool text_ok = kind == OutputKind::kText && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode));
    if (!text_ok)
      throw Error(detail::concat("cannot write '", out, "': it is ",
                                 S_ISDIR(st.st_mode)    ? "a directory (name the file to write in it)"
                                 : S_ISFIFO(st.st_mode) ? "a FIFO, not a regular file"
                                 : S_ISSOCK(st.st_mode) ? "a socket, not a regular file"
                                                        : "a device, not a regular file"));
    return;  // a device or a pipe: nothing else to compare
  }
  const std::string key = path_key(out);
  for (const auto& [what, in] : inputs)
    SHARDTOPK_EXPECTS(in.empty() || (!same_file(out, in) && key != path_key(in)), "refusing to write '", out,
                      "': it is the ", what, " file '", in, "' (choose another output path)");
  if (!storage_dir.empty()) {
    const std::string dir = path_key(storage_dir);
    SHARDTOPK_EXPECTS(key.rfind(dir + "/", 0) != 0, "refusing to write '", out, "': it is inside storage.dir '",
                      storage_dir, "', whose files are the service's (choose another output path)");
  }
  const auto slash = out.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : out.substr(0, slash));
  SHARDTOPK_EXPECTS(::access(dir.c_str(), W_OK) == 0, "cannot write '", out, "': folder '", dir,
                    "' does not exist or is not writable");
  // Any storage directory, named by this config or not: its manifest, log and snapshots are a
  // service's (docs/STORAGE.md), and one replaced file leaves it for a manual recovery.
  struct stat manifest {};
  SHARDTOPK_EXPECTS(::stat((dir + "/" + storage::kManifestName).c_str(), &manifest) != 0, "refusing to write '", out,
                    "': folder '", dir, "' is a storage directory (it holds ", storage::kManifestName,
                    "), whose files are a service's (choose another output path)");
}

void rank0_then_agree(int rank, double timeout_s, const std::function<void()>& work) {
  bool ok = true;
  std::string msg;
  if (rank == 0) {
    try {
      work();
    } catch (const std::exception& e) {
      ok = false;
      msg = e.what();
    }
  }
  make_mpi_communicator(timeout_s)->check(ok, msg);
}

ShutdownGuard::~ShutdownGuard() {
  if (comm_failed) return;
  try {
    index.shutdown();
  } catch (const std::exception& e) {
    print_error(e.what());
    abort_job(2);
  }
}

void print_error(const char* message) { std::fprintf(stderr, "shardtopk: error: %s\n", message); }

int end_job(std::exception_ptr err, int rank) {
  try {
    std::rethrow_exception(err);
  } catch (const CommError& e) {
    print_error(e.what());
    abort_job(2);
  } catch (const RemoteError& e) {
    if (rank == 0) print_error(e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardtopk: error: rank %d: %s\n", rank, e.what());
    abort_job(1);
  }
}

}  // namespace shardtopk::cli
