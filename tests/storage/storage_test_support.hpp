#pragma once
// Helpers shared by the storage tests: requests with deterministic contents, records read back
// into owned copies, byte-level surgery on log files (the format as docs/STORAGE.md states it,
// parsed here independently of src/storage), and a gate that holds the log's writer.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shardtopk/corpus_io.hpp"
#include "shardtopk/storage.hpp"
#include "test_support.hpp"

namespace shardtopk::test {

namespace fs = std::filesystem;

/// An upsert or delete with owned data.
struct Request {
  WalRecordType type = WalRecordType::kUpsert;
  std::vector<std::int64_t> ids;
  std::vector<float> vectors;
  std::vector<std::int64_t> tenant;  // attribute "tenant" (int64)
  std::vector<double> score;         // attribute "score" (float64)
  bool with_attributes = false;

  UpsertRows view() const {
    UpsertRows u;
    u.rows = static_cast<std::int64_t>(ids.size());
    u.ids = ids.data();
    u.vectors = vectors.data();
    if (with_attributes) {
      u.attributes.push_back({"tenant", AttributeType::kInt64, tenant.data()});
      u.attributes.push_back({"score", AttributeType::kFloat64, score.data()});
    }
    return u;
  }
};

/// rows ids first_id.. with values from `seed` (ties on purpose: small integers).
inline Request make_upsert(std::uint64_t seed, std::int64_t rows, std::int64_t dim, std::int64_t first_id,
                           bool attributes) {
  Request r;
  std::mt19937_64 rng(seed);
  for (std::int64_t i = 0; i < rows; ++i) {
    r.ids.push_back(first_id + i);
    for (std::int64_t d = 0; d < dim; ++d) r.vectors.push_back(static_cast<float>(static_cast<int>(rng() % 17) - 8));
    r.tenant.push_back(static_cast<std::int64_t>(rng() % 5));
    r.score.push_back(static_cast<double>(rng() % 1000) / 8.0);
  }
  r.with_attributes = attributes;
  return r;
}

inline Request make_delete(std::vector<std::int64_t> ids) {
  Request r;
  r.type = WalRecordType::kDelete;
  r.ids = std::move(ids);
  return r;
}

inline std::uint64_t append(Storage& st, const Request& r) {
  return r.type == WalRecordType::kUpsert ? st.upsert(r.view())
                                          : st.delete_ids(r.ids.data(), static_cast<std::int64_t>(r.ids.size()));
}

/// A record read back, owning its data.
struct OwnedRecord {
  std::uint64_t seq = 0;
  WalRecordType type = WalRecordType::kUpsert;
  std::int64_t dim = 0;
  std::vector<std::int64_t> ids;
  std::vector<float> vectors;
  std::map<std::string, std::vector<std::uint64_t>> attributes;  // bit patterns
  std::map<std::string, AttributeType> attribute_types;

  static OwnedRecord from(const WalRecord& w) {
    OwnedRecord o;
    o.seq = w.seq;
    o.type = w.type;
    o.dim = w.dim;
    o.ids.assign(w.ids, w.ids + w.rows);
    if (w.vectors) o.vectors.assign(w.vectors, w.vectors + w.rows * w.dim);
    for (const auto& a : w.attributes) {
      const auto* p = static_cast<const std::uint64_t*>(a.data);
      o.attributes[a.name].assign(p, p + w.rows);
      o.attribute_types[a.name] = a.type;
    }
    return o;
  }
};

/// Whether `o` holds exactly what `r` asked for (bit for bit).
inline bool same(const OwnedRecord& o, const Request& r) {
  if (o.type != r.type || o.ids != r.ids) return false;
  if (r.type == WalRecordType::kDelete) return o.vectors.empty() && o.attributes.empty();
  if (o.vectors.size() != r.vectors.size() ||
      std::memcmp(o.vectors.data(), r.vectors.data(), r.vectors.size() * sizeof(float)) != 0)
    return false;
  if (!r.with_attributes) return o.attributes.empty();
  if (o.attributes.size() != 2 || o.attribute_types.at("tenant") != AttributeType::kInt64 ||
      o.attribute_types.at("score") != AttributeType::kFloat64)
    return false;
  return std::memcmp(o.attributes.at("tenant").data(), r.tenant.data(), r.tenant.size() * 8) == 0 &&
         std::memcmp(o.attributes.at("score").data(), r.score.data(), r.score.size() * 8) == 0;
}

inline std::vector<OwnedRecord> replay_all(const Storage& st, std::uint64_t after = 0) {
  std::vector<OwnedRecord> out;
  st.replay(after, [&](const WalRecord& w) { out.push_back(OwnedRecord::from(w)); });
  return out;
}

inline StorageOptions options_for(const std::string& dir, std::int64_t dim) {
  StorageOptions o;
  o.dir = dir;
  o.dim = dim;
  return o;
}

// ------------------------------------------------------------------------------ files

inline std::vector<std::string> segment_paths(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("wal-", 0) == 0 && n.size() > 4 && n.substr(n.size() - 4) == ".log") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline std::vector<std::string> dir_names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// [begin, end) of each record in a segment, parsed from the documented layout: a 32-byte
/// segment header, then records of a 32-byte header (payload bytes at +16) and the payload
/// padded to a multiple of 8.
inline std::vector<std::pair<std::uint64_t, std::uint64_t>> record_spans(const std::string& path) {
  const auto b = read_bytes(path);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  std::uint64_t off = 32;
  while (off + 32 <= b.size()) {
    std::uint64_t payload = 0;
    std::memcpy(&payload, b.data() + off + 16, 8);
    const std::uint64_t end = off + 32 + ((payload + 7) & ~std::uint64_t{7});
    if (end > b.size()) break;
    spans.emplace_back(off, end);
    off = end;
  }
  return spans;
}

inline void copy_dir(const std::string& from, const std::string& to) {
  fs::remove_all(to);
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from))
    if (e.path().filename() != "LOCK") fs::copy_file(e.path(), fs::path(to) / e.path().filename());
}

// ------------------------------------------------------------------------------ log lines

/// Captures the default logger's lines while alive; text() may be read while another thread logs.
class LogCapture {
 public:
  LogCapture()
      : prev_(spdlog::default_logger()), sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1 << 16)) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink_));
  }
  ~LogCapture() { spdlog::set_default_logger(prev_); }
  std::string text() const {
    std::string out;
    for (const std::string& line : sink_->last_formatted()) out += line;
    return out;
  }

 private:
  std::shared_ptr<spdlog::logger> prev_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

// ------------------------------------------------------------------------------ writer gate

/// Holds the log's writer inside on_durable for record `seq` until released, so that records
/// appended meanwhile queue up and go out together in the next group commit.
class WriterGate {
 public:
  explicit WriterGate(std::uint64_t seq) : seq_(seq) {}
  std::function<void(const WalRecord&)> hook() {
    return [this](const WalRecord& r) {
      if (r.seq != seq_) return;
      std::unique_lock<std::mutex> lk(mu_);
      entered_ = true;
      cv_.notify_all();
      cv_.wait(lk, [&] { return open_; });
    };
  }
  /// Waits until the writer is held (record `seq` is durable and its group commit done).
  void wait_held() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return entered_; });
  }
  void release() {
    std::lock_guard<std::mutex> lk(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::uint64_t seq_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  bool entered_ = false;
};

/// Polls until `n` records are queued behind the writer (fails the test after 60 s instead of
/// hanging; a bound against hangs, not a timing assertion).
inline void wait_queued(const Storage& st, std::int64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (st.stats().queued_records < n) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "records never queued";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// ------------------------------------------------------------------------------ state model

/// One live row: its vector and the two attribute columns the requests carry.

struct Row {
  std::vector<float> v;
  std::int64_t tenant = 0;
  double score = 0;
  bool operator==(const Row& o) const {
    return v.size() == o.v.size() && std::memcmp(v.data(), o.v.data(), v.size() * 4) == 0 && tenant == o.tenant &&
           std::memcmp(&score, &o.score, 8) == 0;
  }
};
using State = std::map<std::int64_t, Row>;

inline void apply_to(State& s, const WalRecord& r) {
  for (std::int64_t i = 0; i < r.rows; ++i) {
    if (r.type == WalRecordType::kDelete) {
      s.erase(r.ids[i]);
      continue;
    }
    Row row;
    row.v.assign(r.vectors + i * r.dim, r.vectors + (i + 1) * r.dim);
    for (const auto& a : r.attributes) {
      if (a.name == "tenant") row.tenant = a.int64s()[i];
      if (a.name == "score") row.score = a.float64s()[i];
    }
    s[r.ids[i]] = std::move(row);
  }
}

inline void apply_to(State& s, const Request& r) {
  // The same request as the log would return it.
  WalRecord w;
  w.type = r.type;
  w.rows = static_cast<std::int64_t>(r.ids.size());
  w.ids = r.ids.data();
  w.vectors = r.vectors.data();
  w.dim = r.ids.empty() ? 0 : static_cast<std::int64_t>(r.vectors.size() / r.ids.size());
  if (r.with_attributes) w.attributes = r.view().attributes;
  apply_to(s, w);
}

// Writes a log of 5 records into `dir`, each its own group commit (record 3 a delete); returns them.
inline std::vector<Request> five_records(const std::string& dir, std::int64_t dim) {
  std::vector<Request> reqs;
  Storage st(options_for(dir, dim));
  for (int i = 0; i < 5; ++i) {
    reqs.push_back(i == 2 ? make_delete({1, 2, 3}) : make_upsert(100 + i, 2 + i, dim, i * 10, i % 2 == 1));
    append(st, reqs.back());
  }
  return reqs;
}

// Requests with ties and re-inserted and deleted ids; every upsert has both attributes.
inline std::vector<Request> workload(int n, std::int64_t dim, std::uint64_t seed) {
  std::vector<Request> out;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < n; ++i) {
    if (i % 4 == 3) {
      out.push_back(make_delete({static_cast<std::int64_t>(rng() % 40), static_cast<std::int64_t>(rng() % 40)}));
    } else {
      out.push_back(make_upsert(seed * 1000 + i, 1 + rng() % 6, dim, static_cast<std::int64_t>(rng() % 40), true));
    }
  }
  return out;
}

inline State model_at(const std::vector<Request>& reqs, std::size_t seq) {
  State s;
  for (std::size_t i = 0; i < seq; ++i) apply_to(s, reqs[i]);
  return s;
}

inline std::vector<double> read_f64_column(const std::string& path, const std::string& name) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << path;
  hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(ds, 0) << name;
  hid_t sp = H5Dget_space(ds);
  std::vector<double> out(static_cast<std::size_t>(H5Sget_simple_extent_npoints(sp)));
  if (!out.empty()) EXPECT_GE(H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), 0);
  H5Sclose(sp);
  H5Dclose(ds);
  H5Fclose(f);
  return out;
}

// The state a restart sees: the snapshot the manifest names, then the log after it.
inline State recovered_state(const Storage& st) {
  State s;
  const std::string snap = st.snapshot_path();
  if (!snap.empty()) {
    const SnapshotInfo info = inspect_snapshot(snap);
    EXPECT_EQ(info.seq, st.snapshot_seq());
    if (info.rows > 0) {
      const HostMatrix m = read_rows(snap, "train", RowRange{0, info.rows});
      const auto ids = read_int64_vector(snap, "ids");
      const auto tenant = read_int64_vector(snap, "attributes/tenant");
      const auto score = read_f64_column(snap, "attributes/score");
      for (std::int64_t i = 0; i < info.rows; ++i) {
        Row r;
        r.v.assign(m.data.begin() + i * m.cols, m.data.begin() + (i + 1) * m.cols);
        r.tenant = tenant[static_cast<std::size_t>(i)];
        r.score = score[static_cast<std::size_t>(i)];
        EXPECT_TRUE(s.emplace(ids[static_cast<std::size_t>(i)], std::move(r)).second) << "duplicate id in snapshot";
      }
    }
  }
  st.replay(st.snapshot_seq(), [&](const WalRecord& r) { apply_to(s, r); });
  return s;
}

inline const std::vector<std::pair<std::string, AttributeType>> kColumns = {{"tenant", AttributeType::kInt64},
                                                                       {"score", AttributeType::kFloat64}};

// Writes `s` as the snapshot at `seq`, `chunk` rows per write().
inline std::unique_ptr<SnapshotWriter> write_snapshot(Storage& st, const State& s, std::uint64_t seq, Dtype dtype,
                                               std::int64_t chunk) {
  SnapshotSpec spec{seq, static_cast<std::int64_t>(s.size()), dtype, kColumns};
  auto w = st.begin_snapshot(spec);
  std::vector<std::int64_t> ids, tenant;
  std::vector<float> vec;
  std::vector<double> score;
  auto flush = [&] {
    w->write(static_cast<std::int64_t>(ids.size()), ids.data(), vec.data(),
             {{"tenant", AttributeType::kInt64, tenant.data()}, {"score", AttributeType::kFloat64, score.data()}});
    ids.clear(), vec.clear(), tenant.clear(), score.clear();
  };
  for (const auto& [id, r] : s) {
    ids.push_back(id);
    vec.insert(vec.end(), r.v.begin(), r.v.end());
    tenant.push_back(r.tenant);
    score.push_back(r.score);
    if (static_cast<std::int64_t>(ids.size()) == chunk) flush();
  }
  if (!ids.empty()) flush();
  return w;
}

}  // namespace shardtopk::test
