// MANIFEST.json (docs/STORAGE.md, "File formats"): its text, read strictly, and the identities
// it records of a directory's base (the corpus file's sampled checksum, the rows' digests).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/parallel.hpp"
#include "io/value_convert.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/storage.hpp"
#include "storage/crc32c.hpp"
#include "storage/fs.hpp"
#include "storage/storage_impl.hpp"

namespace shardtopk {
namespace storage {

std::string snapshot_name(std::uint64_t seq) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "snapshot-%020llu.h5", static_cast<unsigned long long>(seq));
  return buf;
}

bool parse_snapshot_name(const std::string& name, std::uint64_t* seq) {
  if (name.size() != 32 || name.compare(0, 9, "snapshot-") != 0 || name.compare(29, 3, ".h5") != 0) return false;
  std::uint64_t v = 0;
  for (std::size_t i = 9; i < 29; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    const std::uint64_t d = static_cast<std::uint64_t>(name[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *seq = v;
  return true;
}

std::string digest_text(std::uint64_t d) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(d));
  return buf;
}

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One row's term of a digest: depends on its global position, so the sum is order-sensitive.
std::uint64_t row_term(std::int64_t row, std::uint64_t value) {
  return splitmix64(splitmix64(static_cast<std::uint64_t>(row)) ^ value);
}

}  // namespace

std::string manifest_json(const Manifest& m) {
  nlohmann::json j;
  j["format"] = "shardtopk-storage";
  j["version"] = kFormatVersion;
  j["dim"] = m.dim;
  j["metric"] = to_string(m.metric);
  j["snapshot"] = m.snapshot.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.snapshot);
  j["seq"] = m.seq;
  if (!m.snapshot.empty() && m.snapshot_bytes >= 0) {
    j["snapshot_bytes"] = m.snapshot_bytes;
    j["snapshot_crc32c"] = m.snapshot_crc32c;
  }
  if (m.snapshot.empty() && m.corpus_bytes >= 0)
    j["corpus"] = {{"path", m.corpus_path}, {"bytes", m.corpus_bytes}, {"sample_crc32c", m.corpus_sample_crc32c}};
  if (m.capacity_rows > 0) j["capacity_rows"] = m.capacity_rows;
  if (m.snapshot.empty() && m.base.rows >= 0)
    j["base"] = {{"rows", m.base.rows},
                 {"dim", m.base.dim},
                 {"ids_digest", digest_text(m.base.ids_digest)},
                 {"data_digest", digest_text(m.base.data_digest)}};
  if (m.log_seq > 0) j["log_seq"] = m.log_seq;
  return j.dump(2) + "\n";
}

std::uint32_t corpus_sample_crc32c(const std::string& path, std::uint64_t bytes) {
  if (bytes <= 2 * kCorpusSampleBytes) return file_crc32c(path, 0, bytes);
  const std::uint32_t head = file_crc32c(path, 0, kCorpusSampleBytes);
  const std::uint32_t tail = file_crc32c(path, bytes - kCorpusSampleBytes, kCorpusSampleBytes);
  return crc32c_extend(crc32c_extend(0, &head, sizeof head), &tail, sizeof tail);
}

namespace {

// A manifest's integer: a JSON integer (not a real, not a string) in [0, max], named in errors.
std::uint64_t manifest_uint(const nlohmann::json& obj, const char* key, std::uint64_t max, const std::string& path,
                            std::uint64_t min = 0) {
  SHARDTOPK_EXPECTS(obj.contains(key), "'", path, "': the manifest has no '", key, "'");
  const nlohmann::json& v = obj.at(key);
  SHARDTOPK_EXPECTS(v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0), "'", path,
                    "': '", key, "' is ", v.dump(), " (expected an integer ", min, " .. ", max, ")");
  const std::uint64_t u = v.get<std::uint64_t>();
  SHARDTOPK_EXPECTS(u >= min && u <= max, "'", path, "': '", key, "' is ", u, " (expected an integer ", min, " .. ",
                    max, ")");
  return u;
}

std::string manifest_string(const nlohmann::json& obj, const char* key, const std::string& path) {
  SHARDTOPK_EXPECTS(obj.contains(key), "'", path, "': the manifest has no '", key, "'");
  SHARDTOPK_EXPECTS(obj.at(key).is_string(), "'", path, "': '", key, "' is ", obj.at(key).dump(), " (expected a string)");
  return obj.at(key).get<std::string>();
}

std::uint64_t manifest_digest(const nlohmann::json& obj, const char* key, const std::string& path) {
  const std::string t = manifest_string(obj, key, path);
  SHARDTOPK_EXPECTS(t.size() == 16 && t.find_first_not_of("0123456789abcdef") == std::string::npos, "'", path, "': '",
                    key, "' is \"", t, "\" (expected 16 lower-case hex digits)");
  return std::stoull(t, nullptr, 16);
}

}  // namespace

Manifest parse_manifest(const std::string& text, const std::string& path) {
  Manifest m;
  // A NUL byte cannot be in JSON text; the parser would stop at it and take what came before.
  SHARDTOPK_EXPECTS(text.find('\0') == std::string::npos, "'", path, "': a NUL byte at offset ", text.find('\0'));
  constexpr std::uint64_t kInt64Max = static_cast<std::uint64_t>(INT64_MAX);
  try {
    // A key given twice in one object is refused (the parser would keep the last).
    std::vector<std::vector<std::string>> keys;
    const auto j = nlohmann::json::parse(text, [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& v) {
      if (ev == nlohmann::json::parse_event_t::object_start) keys.emplace_back();
      if (ev == nlohmann::json::parse_event_t::object_end) keys.pop_back();
      if (ev == nlohmann::json::parse_event_t::key) {
        const std::string k = v.get<std::string>();
        SHARDTOPK_EXPECTS(std::find(keys.back().begin(), keys.back().end(), k) == keys.back().end(), "'", path,
                          "': key '", k, "' appears more than once in an object");
        keys.back().push_back(k);
      }
      return true;
    });
    SHARDTOPK_EXPECTS(j.is_object() && j.contains("format") && j.at("format") == "shardtopk-storage", "'", path,
                      "' is not a shardtopk storage manifest");
    const auto version = manifest_uint(j, "version", UINT32_MAX, path);
    SHARDTOPK_EXPECTS(version == kFormatVersion, "'", path, "': manifest version ", version, " (this build reads ",
                      kFormatVersion, ")");
    m.dim = static_cast<std::int64_t>(manifest_uint(j, "dim", kMaxDim, path));
    m.metric = parse_metric(manifest_string(j, "metric", path), "'" + path + "': metric");
    SHARDTOPK_EXPECTS(j.contains("snapshot"), "'", path, "': the manifest has no 'snapshot'");
    if (!j.at("snapshot").is_null()) m.snapshot = manifest_string(j, "snapshot", path);
    m.seq = manifest_uint(j, "seq", kInt64Max, path);
    SHARDTOPK_EXPECTS(j.contains("snapshot_bytes") == j.contains("snapshot_crc32c"), "'", path,
                      "': 'snapshot_bytes' and 'snapshot_crc32c' come together (the manifest has only ",
                      j.contains("snapshot_bytes") ? "'snapshot_bytes'" : "'snapshot_crc32c'", ")");
    if (j.contains("snapshot_bytes")) {
      SHARDTOPK_EXPECTS(!m.snapshot.empty(), "'", path, "': a snapshot checksum but no snapshot");
      m.snapshot_bytes = static_cast<std::int64_t>(manifest_uint(j, "snapshot_bytes", kInt64Max, path));
      m.snapshot_crc32c = static_cast<std::uint32_t>(manifest_uint(j, "snapshot_crc32c", UINT32_MAX, path));
    }
    if (j.contains("corpus")) {
      const auto& c = j.at("corpus");
      SHARDTOPK_EXPECTS(c.is_object(), "'", path, "': 'corpus' is ", c.dump(), " (expected an object)");
      m.corpus_path = manifest_string(c, "path", path);
      m.corpus_bytes = static_cast<std::int64_t>(manifest_uint(c, "bytes", kInt64Max, path));
      m.corpus_sample_crc32c = static_cast<std::uint32_t>(manifest_uint(c, "sample_crc32c", UINT32_MAX, path));
    }
    if (j.contains("capacity_rows")) {
      m.capacity_rows = static_cast<std::int64_t>(manifest_uint(j, "capacity_rows", kInt64Max, path, 1));
    }
    if (j.contains("base")) {
      const auto& b = j.at("base");
      SHARDTOPK_EXPECTS(b.is_object(), "'", path, "': 'base' is ", b.dump(), " (expected an object)");
      m.base.rows = static_cast<std::int64_t>(manifest_uint(b, "rows", kInt64Max, path));
      m.base.dim = static_cast<std::int64_t>(manifest_uint(b, "dim", kMaxDim, path));
      m.base.ids_digest = manifest_digest(b, "ids_digest", path);
      m.base.data_digest = manifest_digest(b, "data_digest", path);
    }
    if (j.contains("log_seq")) m.log_seq = manifest_uint(j, "log_seq", kInt64Max, path);
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + path + "': unreadable manifest: " + e.what());
  }
  std::uint64_t s = 0;
  SHARDTOPK_EXPECTS(m.snapshot.empty() || (parse_snapshot_name(m.snapshot, &s) && s == m.seq), "'", path,
                    "': snapshot '", m.snapshot, "' does not match seq ", m.seq);
  // Without a snapshot the base is the corpus, before record 1: a larger seq would claim that
  // records 1 .. seq are held by a snapshot that does not exist, and recovery would skip them
  // and remove their segments.
  SHARDTOPK_EXPECTS(!m.snapshot.empty() || m.seq == 0, "'", path, "': 'seq' is ", m.seq,
                    " but 'snapshot' is null: no snapshot holds records 1 .. ", m.seq,
                    " (without a snapshot the base is the corpus, seq 0); set 'seq' to 0, or name the snapshot "
                    "file whose seq it is");
  SHARDTOPK_EXPECTS(m.dim >= 1 && m.dim <= kMaxDim, "'", path, "': dim ", m.dim, " out of range");
  return m;
}

bool is_temp_leftover(const std::string& name) {
  const std::string sfx = kTempSuffix;
  if (name.size() <= sfx.size() || name.compare(name.size() - sfx.size(), sfx.size(), sfx) != 0) return false;
  const std::string base = name.substr(0, name.size() - sfx.size());
  std::uint64_t seq = 0;
  return base == kManifestName || parse_snapshot_name(base, &seq);
}

}  // namespace storage

using namespace storage;

BaseIdentity base_identity_part(const float* rows, const std::int64_t* ids, std::int64_t n, std::int64_t dim,
                                std::int64_t first_row, int threads) {
  return base_identity_part(rows, RowFormat::kFloat32, ids, n, dim, first_row, threads);
}

BaseIdentity base_identity_part(const void* rows, RowFormat format, const std::int64_t* ids, std::int64_t n,
                                std::int64_t dim, std::int64_t first_row, int threads, bool f16c) {
  SHARDTOPK_EXPECTS(n >= 0 && dim >= 1 && (n == 0 || rows), "base_identity_part: bad shape [", n, ", ", dim, "]");
  const int parts = range_parts(n * dim, std::max(1, threads), 1 << 20);
  std::vector<BaseIdentity> part(static_cast<std::size_t>(parts), BaseIdentity{0, dim, 0, 0});
  parallel_ranges(n, parts, [&](std::int64_t lo, std::int64_t hi, int p) {
    BaseIdentity& b = part[static_cast<std::size_t>(p)];
    io_detail::RowsAsFloat32 in(rows, format, dim, f16c);
    for (std::int64_t i = lo; i < hi; ++i) {
      const std::int64_t row = first_row + i;
      const std::int64_t id = ids ? ids[i] : row;
      b.ids_digest += row_term(row, static_cast<std::uint64_t>(id));
      b.data_digest += row_term(row, crc32c(in.row(i), static_cast<std::size_t>(dim) * sizeof(float)));
    }
    b.rows = hi - lo;
  });
  BaseIdentity all{0, dim, 0, 0};
  for (const BaseIdentity& b : part) all = add_base_parts(all, b);
  return all;
}

BaseIdentity add_base_parts(const BaseIdentity& a, const BaseIdentity& b) {
  SHARDTOPK_EXPECTS(a.dim == b.dim || a.rows == 0 || b.rows == 0, "add_base_parts: dims ", a.dim, " and ", b.dim);
  return BaseIdentity{a.rows + b.rows, a.rows ? a.dim : b.dim, a.ids_digest + b.ids_digest,
                      a.data_digest + b.data_digest};
}

std::optional<StorageManifest> read_storage_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestName;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  const Manifest m = parse_manifest(read_small_file(path), path);
  return StorageManifest{m.dim, m.metric, m.snapshot.empty() ? std::string() : dir + "/" + m.snapshot, m.seq,
                         m.capacity_rows};
}

}  // namespace shardtopk
