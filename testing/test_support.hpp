#pragma once
// Helpers shared by the CPU test binaries: temporary folders, deterministic data, error capture,
// running the engine and comparing with the float64 oracle by DESIGN.md's correctness terms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "engine_runner.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "tools/oracle.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::test {

// ------------------------------------------------------------------------------ temp folders

/// A fresh folder under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/shardtopk-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.good()) throw std::runtime_error("cannot write " + path);
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Truncate a file to half its size (a "truncated download").
inline void truncate_to_half(const std::string& path) {
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size / 2);
}

// ------------------------------------------------------------------------------ data

/// Uniform floats in [lo, hi), deterministic for a seed.
inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// Small integers in [lo, hi] as floats: every dot product and squared distance of such
/// vectors is exact in float32 (as long as |sum| < 2^24), and many scores tie.
inline std::vector<float> small_ints(std::size_t n, std::uint64_t seed, int lo = -3, int hi = 3) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(dist(rng));
  return v;
}

/// Give every all-zero row a 1 in column 0 (cosine needs a direction).
inline void fix_zero_rows(std::vector<float>* v, std::int64_t dim) {
  for (std::size_t r = 0; r < v->size() / static_cast<std::size_t>(dim); ++r) {
    bool zero = true;
    for (std::int64_t d = 0; d < dim; ++d) zero = zero && (*v)[r * dim + d] == 0.0f;
    if (zero) (*v)[r * dim] = 1.0f;
  }
}

/// Round every value through a storage dtype, as the engine stores it.
inline std::vector<float> round_to(Dtype dt, std::vector<float> v) {
  if (dt == Dtype::kFloat16)
    for (auto& x : v) x = half::from_f16(half::to_f16(x));
  if (dt == Dtype::kBFloat16)
    for (auto& x : v) x = half::from_bf16(half::to_bf16(x));
  return v;
}

inline std::vector<float> normalized(std::vector<float> v, std::int64_t rows, std::int64_t dim) {
  normalize_rows(v.data(), rows, dim, 0, "test row");
  return v;
}

inline std::vector<std::int64_t> iota_ids(std::int64_t n, std::int64_t first = 0) {
  std::vector<std::int64_t> ids(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ids[i] = first + i;
  return ids;
}

// ------------------------------------------------------------------------------ files

inline std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!out.good()) throw std::runtime_error("cannot write " + path);
}

/// Flips bit `bit` (0..7) of the byte at `offset` of the file, in place (damage on purpose).
inline void flip_bit(const std::string& path, std::uint64_t offset, int bit) {
  auto b = read_bytes(path);
  b.at(offset) ^= static_cast<unsigned char>(1u << bit);
  write_bytes(path, b);
}

// ------------------------------------------------------------------------------ errors

/// Runs f and returns the message of the shardtopk::Error (or std::exception) it threw;
/// "<no exception>" when it returned normally. Never lets an exception escape.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "<non-std exception>";
  }
  return "<no exception>";
}

/// Occurrences of `needle` in `hay`.
inline int count_of(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (std::size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

// ------------------------------------------------------------------------------ bge-m3

/// Folder of the real bge-m3 vectors shipped with the tests (tests/data/bge-m3, MIT licence).
inline std::string bge_dir() { return std::string(SHARDTOPK_SOURCE_DIR "/tests/data/bge-m3"); }

/// Reads a raw float32 [rows, dim] file. The real-data tests never skip for want of their
/// data: @throws std::runtime_error naming the file when it is absent or not rows x dim x 4 bytes.
inline std::vector<float> read_raw_f32(const std::string& path, std::int64_t rows, std::int64_t dim) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamsize want = static_cast<std::streamsize>(rows * dim * sizeof(float));
  if (!in) throw std::runtime_error("cannot open '" + path + "' (the repository's test data)");
  if (static_cast<std::streamsize>(in.tellg()) != want)
    throw std::runtime_error("'" + path + "' holds " + std::to_string(static_cast<long long>(in.tellg())) +
                             " bytes, not [" + std::to_string(rows) + " x " + std::to_string(dim) + "] float32");
  in.seekg(0);
  std::vector<float> v(static_cast<size_t>(rows * dim));
  in.read(reinterpret_cast<char*>(v.data()), want);
  if (in.gcount() != want) throw std::runtime_error("short read of '" + path + "'");
  return v;
}

// ------------------------------------------------------------------------------ engine runs

/// Ids [nq, k] and scores [nq, k] in reported units (similarity, or squared distance for l2).
struct Answer {
  std::vector<std::int64_t> ids;
  std::vector<float> scores;
};

/// Search nq queries through an engine in batches of `batch` (queries are prepared: cosine
/// normalises them, as the index does).
inline Answer run_engine(Engine& e, const std::vector<float>& queries, std::int64_t nq, int k, int batch) {
  const EngineInfo info = e.info();
  const std::int64_t dim = info.dim;
  EngineRunner runner(e);
  Answer a;
  a.ids.resize(static_cast<size_t>(nq * k));
  a.scores.resize(a.ids.size());
  for (std::int64_t q0 = 0; q0 < nq; q0 += batch) {
    const int b = static_cast<int>(std::min<std::int64_t>(batch, nq - q0));
    const std::vector<Candidate> got = runner.search(queries.data() + q0 * dim, b, k);
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(b) * k; ++i) {
      a.ids[q0 * k + i] = got[i].id;
      a.scores[q0 * k + i] = reported_score(info.metric, got[i].score);
    }
  }
  return a;
}

/// Bit-identical ids and scores (DESIGN.md "bit-exact").
inline void expect_bit_identical(const Answer& a, const Answer& b, const std::string& what) {
  ASSERT_EQ(a.ids.size(), b.ids.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < a.ids.size(); ++i) {
    std::uint32_t ua, ub;
    std::memcpy(&ua, &a.scores[i], 4);
    std::memcpy(&ub, &b.scores[i], 4);
    if (a.ids[i] != b.ids[i] || ua != ub) {
      if (++bad <= 5)
        ADD_FAILURE() << what << ": position " << i << ": id " << a.ids[i] << " score " << a.scores[i] << " vs id "
                      << b.ids[i] << " score " << b.scores[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " positions differ";
}

/// Totals of oracle::check_query over all queries.
struct CheckTotals {
  std::int64_t hits = 0, exact_id_matches = 0, near_tie_swaps = 0, bad_scores = 0, out_of_order = 0, duplicates = 0;
  std::int64_t slots = 0;
};

/// Within tolerance (DESIGN.md): every returned id a hit, every score within ε of its float64
/// score, in order within ε, no duplicates. Near-tie swaps are counted and printed, not hidden.
/// `corpus` holds the values the engine scores (already rounded for float16/bfloat16).
inline CheckTotals expect_within_tolerance(Metric m, const std::vector<float>& corpus, std::int64_t n,
                                           const std::int64_t* ids, const std::vector<float>& queries,
                                           std::int64_t nq, std::int64_t dim, int k, const Answer& got,
                                           const std::string& what) {
  std::vector<std::int64_t> tid;
  std::vector<double> tsc;
  oracle::topk(m, corpus.data(), n, ids, queries.data(), nq, dim, k, &tid, &tsc, 2);
  CheckTotals t;
  for (std::int64_t q = 0; q < nq; ++q) {
    const oracle::Check c =
        oracle::check_query(m, corpus.data(), n, ids, queries.data() + q * dim, dim, k, got.ids.data() + q * k,
                            got.scores.data() + q * k, tid.data() + q * k, tsc.data() + q * k);
    EXPECT_EQ(c.hits, k) << what << ": query " << q << " misses";
    EXPECT_EQ(c.bad_scores, 0) << what << ": query " << q << " has scores off by more than eps";
    EXPECT_EQ(c.out_of_order, 0) << what << ": query " << q;
    EXPECT_EQ(c.duplicates, 0) << what << ": query " << q;
    t.hits += c.hits;
    t.exact_id_matches += c.exact_id_matches;
    t.near_tie_swaps += c.near_tie_swaps;
    t.bad_scores += c.bad_scores;
    t.out_of_order += c.out_of_order;
    t.duplicates += c.duplicates;
    t.slots += k;
  }
  std::printf("  [%s] recall@%d = %.6f, exact id matches %lld/%lld, near-tie swaps %lld\n", what.c_str(), k,
              static_cast<double>(t.hits) / static_cast<double>(t.slots), static_cast<long long>(t.exact_id_matches),
              static_cast<long long>(t.slots), static_cast<long long>(t.near_tie_swaps));
  return t;
}

/// Exact ids (DESIGN.md): on inputs whose scores are exact in float32 the ids equal the oracle's,
/// ties included, and every score equals the float64 score.
inline void expect_exact(Metric m, const std::vector<float>& corpus, std::int64_t n, const std::int64_t* ids,
                         const std::vector<float>& queries, std::int64_t nq, std::int64_t dim, int k,
                         const Answer& got, const std::string& what) {
  std::vector<std::int64_t> tid;
  std::vector<double> tsc;
  oracle::topk(m, corpus.data(), n, ids, queries.data(), nq, dim, k, &tid, &tsc, 2);
  int bad = 0;
  for (std::int64_t i = 0; i < nq * k; ++i) {
    if (got.ids[i] != tid[i] || static_cast<double>(got.scores[i]) != tsc[i]) {
      if (++bad <= 5)
        ADD_FAILURE() << what << ": query " << i / k << " rank " << i % k << ": got id " << got.ids[i] << " score "
                      << got.scores[i] << ", oracle id " << tid[i] << " score " << tsc[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << nq * k << " positions differ from the oracle";
}

}  // namespace shardtopk::test
