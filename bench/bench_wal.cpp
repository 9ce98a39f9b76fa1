// bench_wal: sustained throughput of the write-ahead log (include/shardtopk/storage.hpp) on the
// disk under --dir. Closed-loop writer threads each append upserts of R rows x D float32 (plus
// two attribute columns) as fast as acknowledgements come back, for --seconds per
// configuration; then deletes of --delete-ids ids per request. Every configuration starts from
// an empty log and ends by replaying it: every acknowledged record must be present under its
// seq with its exact ids and vectors, else it counts as wrong.
//
// Output (nccl-tests style): one JSON line per configuration, then a table with a #wrong
// column. Exit status 1 when anything was wrong, 2 on a usage or set-up error.
//
//   bench_wal --dir /data/wal-bench -d 768 --writers 1,4,16 --rows 1,16,256 --seconds 3
#include <CLI/CLI.hpp>

#include <sys/statvfs.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/storage.hpp"

namespace {

using namespace shardtopk;
using namespace shardtopk::bench;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

std::vector<long> parse_list(const std::string& s) {
  std::vector<long> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) out.push_back(std::stol(t));
  return out;
}

struct RunConfig {
  std::string op;  // upsert | delete
  long writers = 0, rows = 0;
};

// What writer w sends as its c-th request: ids w·10^12 + c·10^6 + j (so a replayed record
// names its writer and request); vectors are the writer's fixed buffer.
std::int64_t first_id(long w, long c) { return static_cast<std::int64_t>(w) * 1000000000000ll + c * 1000000ll; }

struct WriterLog {
  std::vector<double> lat_ms;
  std::vector<std::pair<std::uint64_t, long>> acks;  // (seq, request)
};

json run_config(const RunConfig& cfg, const std::string& root, long dim, double seconds, long window_us,
                std::int64_t segment_mb) {
  const std::string dir = root + "/bench-" + cfg.op + "-w" + std::to_string(cfg.writers) + "-r" + std::to_string(cfg.rows);
  std::filesystem::remove_all(dir);
  StorageOptions o;
  o.dir = dir;
  o.dim = dim;
  o.group_commit_window_us = window_us;
  o.segment_bytes = segment_mb << 20;
  std::vector<WriterLog> logs(static_cast<std::size_t>(cfg.writers));
  std::vector<std::vector<float>> vectors(static_cast<std::size_t>(cfg.writers));
  for (long w = 0; w < cfg.writers; ++w) {
    auto& v = vectors[static_cast<std::size_t>(w)];
    v.resize(static_cast<std::size_t>(cfg.rows * dim));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(w)) % 101) * 0.01f;
  }
  double elapsed = 0;
  StorageStats stats;
  {
    Storage st(o);
    std::atomic<bool> stop{false};
    std::vector<std::thread> pool;
    const auto t0 = Clock::now();
    for (long w = 0; w < cfg.writers; ++w)
      pool.emplace_back([&, w] {
        WriterLog& log = logs[static_cast<std::size_t>(w)];
        std::vector<std::int64_t> ids(static_cast<std::size_t>(cfg.rows)), tenant(static_cast<std::size_t>(cfg.rows), w);
        std::vector<double> score(static_cast<std::size_t>(cfg.rows), 0.5);
        for (long c = 0; !stop.load(std::memory_order_relaxed); ++c) {
          for (long j = 0; j < cfg.rows; ++j) ids[static_cast<std::size_t>(j)] = first_id(w, c) + j;
          const auto a = Clock::now();
          std::uint64_t seq;
          if (cfg.op == "upsert") {
            UpsertRows u;
            u.rows = cfg.rows;
            u.ids = ids.data();
            u.vectors = vectors[static_cast<std::size_t>(w)].data();
            u.attributes = {{"tenant", AttributeType::kInt64, tenant.data()}, {"score", AttributeType::kFloat64, score.data()}};
            seq = st.upsert(u);
          } else {
            seq = st.delete_ids(ids.data(), cfg.rows);
          }
          log.lat_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
          log.acks.emplace_back(seq, c);
        }
      });
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto& t : pool) t.join();
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    stats = st.stats();
  }

  // Check: reopen (recovery verifies every checksum), replay, compare with what was acknowledged.
  long wrong = 0, requests = 0;
  std::vector<double> lat;
  std::vector<std::pair<long, long>> by_seq;  // seq - 1 -> (writer, request)
  for (long w = 0; w < cfg.writers; ++w) {
    const auto& log = logs[static_cast<std::size_t>(w)];
    lat.insert(lat.end(), log.lat_ms.begin(), log.lat_ms.end());
    for (const auto& [seq, c] : log.acks) {
      if (by_seq.size() < seq) by_seq.resize(seq, {-1, -1});
      by_seq[seq - 1] = {w, c};
      ++requests;
    }
  }
  const auto r0 = Clock::now();
  std::uint64_t replayed = 0;
  {
    Storage st(o);
    st.replay(0, [&](const WalRecord& r) {
      ++replayed;
      if (r.seq > by_seq.size()) return;  // durable, acknowledged after the clock stopped: not counted
      const auto [w, c] = by_seq[r.seq - 1];
      bool ok = w >= 0 && r.rows == cfg.rows;
      for (long j = 0; ok && j < cfg.rows; ++j) ok = r.ids[j] == first_id(w, c) + j;
      if (ok && cfg.op == "upsert")
        ok = r.dim == dim && std::memcmp(r.vectors, vectors[static_cast<std::size_t>(w)].data(),
                                         static_cast<std::size_t>(cfg.rows * dim) * 4) == 0;
      if (!ok) ++wrong;
    });
  }
  const double replay_s = std::chrono::duration<double>(Clock::now() - r0).count();
  if (replayed < by_seq.size()) wrong += static_cast<long>(by_seq.size() - replayed);  // acknowledged, missing
  std::filesystem::remove_all(dir);

  const double rows_total = static_cast<double>(requests) * static_cast<double>(cfg.rows);
  json j;
  j["bench"] = "wal";
  j["op"] = cfg.op;
  j["writers"] = cfg.writers;
  j["rows_per_request"] = cfg.rows;
  j["dim"] = cfg.op == "upsert" ? dim : 0;
  j["group_commit_window_us"] = window_us;
  j["seconds"] = elapsed;
  j["requests"] = requests;
  j["rows_per_s"] = rows_total / elapsed;
  j["requests_per_s"] = static_cast<double>(requests) / elapsed;
  j["MB_per_s"] = static_cast<double>(stats.log_bytes) / elapsed / 1e6;
  j["group_commits"] = stats.group_commits;
  j["records_per_group_commit"] = stats.group_commits > 0 ? static_cast<double>(stats.records_written) / stats.group_commits : 0;
  j["p50_ms"] = percentile(lat, 50);
  j["p99_ms"] = percentile(lat, 99);
  j["max_ms"] = lat.empty() ? 0.0 : *std::max_element(lat.begin(), lat.end());
  j["replay_MB_per_s"] = static_cast<double>(stats.log_bytes) / replay_s / 1e6;
  j["wrong"] = wrong;
  j["dir"] = root;
  j["date"] = utc_now();
  j["git"] = git_commit();
  j["host"] = host_name();
  j["cpu"] = cpu_name();
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_wal: sustained upsert and delete throughput of the write-ahead log, acknowledged latency"};
  std::string dir, writers_s = "1,4,16", rows_s = "1,16,256", delete_ids_s = "10000", json_out;
  long dim = 768, window_us = 0;
  std::int64_t segment_mb = 64;
  double seconds = 3;
  bool no_deletes = false;
  app.add_option("--dir", dir, "directory on the disk to measure (a fresh sub-folder per configuration, removed after)")
      ->required();
  app.add_option("-d,--dim", dim, "row width (float32)")->capture_default_str();
  app.add_option("--writers,-w", writers_s, "concurrent writer threads, comma-separated")->capture_default_str();
  app.add_option("--rows,-r", rows_s, "rows per upsert request, comma-separated")->capture_default_str();
  app.add_option("--delete-ids", delete_ids_s, "ids per delete request, comma-separated")->capture_default_str();
  app.add_flag("--no-deletes", no_deletes, "skip the delete configurations");
  app.add_option("--seconds,-s", seconds, "seconds per configuration")->capture_default_str();
  app.add_option("--window-us", window_us, "group-commit window (StorageOptions::group_commit_window_us)")
      ->capture_default_str();
  app.add_option("--segment-mb", segment_mb, "segment size in MiB")->capture_default_str();
  app.add_option("-J,--json", json_out, "also append the JSON lines to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::vector<RunConfig> configs;
  try {
    for (long w : parse_list(writers_s))
      for (long r : parse_list(rows_s)) configs.push_back({"upsert", w, r});
    if (!no_deletes)
      for (long w : parse_list(writers_s))
        for (long r : parse_list(delete_ids_s)) configs.push_back({"delete", w, r});
    std::filesystem::create_directories(dir);
  } catch (const std::exception& e) {
    std::cerr << "bench_wal: " << e.what() << "\n";
    return 2;
  }
  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) == 0)
    std::cout << "# dir " << dir << ": " << static_cast<double>(vfs.f_bavail) * vfs.f_frsize / 1e9 << " GB free\n";

  Table table({{"op", "", 7},
               {"writers", "", 7},
               {"rows/req", "", 8},
               {"rows/s", "", 11},
               {"req/s", "", 9},
               {"MB/s", "", 8},
               {"rec/commit", "", 10},
               {"p50", "(ms)", 8},
               {"p99", "(ms)", 8},
               {"max", "(ms)", 8},
               {"#wrong", "", 6}});
  std::vector<std::string> lines;
  long wrong = 0;
  for (const RunConfig& c : configs) {
    json j;
    try {
      j = run_config(c, dir, dim, seconds, window_us, segment_mb);
    } catch (const std::exception& e) {
      std::cerr << "bench_wal: " << c.op << " writers " << c.writers << " rows " << c.rows << ": " << e.what() << "\n";
      return 2;
    }
    std::cout << j.dump() << std::endl;
    write_json_line(json_out, j);
    wrong += j["wrong"].get<long>();
    lines.push_back(table.line({c.op, fmt_int(c.writers), fmt_int(c.rows), fmt_num(j["rows_per_s"].get<double>(), 0),
                                fmt_num(j["requests_per_s"].get<double>(), 0), fmt_num(j["MB_per_s"].get<double>(), 1),
                                fmt_num(j["records_per_group_commit"].get<double>(), 1),
                                fmt_num(j["p50_ms"].get<double>(), 2), fmt_num(j["p99_ms"].get<double>(), 2),
                                fmt_num(j["max_ms"].get<double>(), 2), fmt_int(j["wrong"].get<long>())}));
  }
  std::cout << table.header();
  for (const auto& l : lines) std::cout << l;
  return wrong == 0 ? 0 : 1;
}
