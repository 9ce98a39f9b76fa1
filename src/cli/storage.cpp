// `shardtopk storage info DIR` and `shardtopk storage verify DIR`: a storage directory read
// without the service and without its lock (docs/STORAGE.md, "Inspecting and verifying").
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "shardtopk/storage_inspect.hpp"

namespace shardtopk::cli {
namespace {

// As the manifest writes them: JSON numbers this large lose bits in many readers.
std::string hex64(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

nlohmann::json info_json(const StorageDirSummary& s) {
  nlohmann::json j;
  j["dir"] = s.dir;
  if (!s.manifest_error.empty()) j["manifest_error"] = s.manifest_error;
  j["empty"] = s.empty;
  j["dim"] = s.dim;
  j["metric"] = to_string(s.metric);
  j["snapshot"] = s.snapshot.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.snapshot);
  j["snapshot_seq"] = s.snapshot_seq;
  if (s.snapshot_bytes >= 0) {
    j["snapshot_bytes"] = s.snapshot_bytes;
    j["snapshot_crc32c"] = s.snapshot_crc32c;
  }
  if (s.snapshot_info) {
    const SnapshotInfo& si = *s.snapshot_info;
    j["snapshot_rows"] = si.rows;
    j["snapshot_dtype"] = to_string(si.dtype);
    j["snapshot_normalized"] = si.normalized;
    j["snapshot_attributes"] = nlohmann::json::object();
    for (const auto& [name, type] : si.attributes) j["snapshot_attributes"][name] = to_string(type);
  }
  if (!s.snapshot_error.empty()) j["snapshot_error"] = s.snapshot_error;
  if (s.corpus_bytes >= 0)
    j["corpus"] = {{"path", s.corpus_path}, {"bytes", s.corpus_bytes}, {"sample_crc32c", s.corpus_sample_crc32c}};
  if (s.base.rows >= 0)
    j["base"] = {{"rows", s.base.rows}, {"dim", s.base.dim}, {"ids_digest", hex64(s.base.ids_digest)},
                 {"data_digest", hex64(s.base.data_digest)}};
  j["capacity_rows"] = s.capacity_rows;
  j["last_seq"] = s.last_seq;
  j["recorded_log_seq"] = s.recorded_log_seq;
  j["log_records"] = s.log_records;
  j["log_bytes"] = s.log_bytes;
  j["segments"] = nlohmann::json::array();
  for (const auto& g : s.segments)
    j["segments"].push_back({{"name", g.name}, {"first_seq", g.first_seq}, {"last_seq", g.last_seq},
                             {"records", g.records}, {"bytes", g.bytes}, {"tail_bytes", g.tail_bytes},
                             {"role", g.role}});
  j["older_snapshots"] = s.older_snapshots;
  j["leftovers"] = s.leftovers;
  j["unclaimed_snapshots"] = s.unclaimed_snapshots;
  j["lock_holder"] = s.lock_holder;
  if (!s.lock_error.empty()) j["lock_error"] = s.lock_error;
  return j;
}

void print_info(const StorageDirSummary& s) {
  std::printf("storage directory %s\n", s.dir.c_str());
  if (s.empty)
    std::printf("  manifest   none: not a storage directory (no MANIFEST.json, no log segment, no snapshot)\n");
  else if (!s.manifest_error.empty())
    std::printf("  manifest   unreadable: %s\n", s.manifest_error.c_str());
  else std::printf("  manifest   dim %lld, metric %s\n", static_cast<long long>(s.dim), to_string(s.metric).c_str());
  if (!s.snapshot.empty()) {
    std::printf("  snapshot   %s: seq %llu", s.snapshot.c_str(), static_cast<unsigned long long>(s.snapshot_seq));
    if (s.snapshot_info)
      std::printf(", %lld rows, dim %lld, %s%s", static_cast<long long>(s.snapshot_info->rows),
                  static_cast<long long>(s.snapshot_info->dim), to_string(s.snapshot_info->dtype).c_str(),
                  s.snapshot_info->normalized ? " (normalised)" : "");
    if (s.snapshot_bytes >= 0)
      std::printf(", %lld bytes, CRC-32C 0x%08x recorded", static_cast<long long>(s.snapshot_bytes), s.snapshot_crc32c);
    else
      std::printf(", no checksum recorded");
    std::printf("\n");
    if (!s.snapshot_error.empty()) std::printf("             unreadable: %s\n", s.snapshot_error.c_str());
  } else if (s.manifest_error.empty()) {
    std::printf("  snapshot   none: the base is the corpus file");
    if (s.corpus_bytes >= 0)
      std::printf(" '%s' (%lld bytes, sample CRC-32C 0x%08x)", s.corpus_path.c_str(),
                  static_cast<long long>(s.corpus_bytes), s.corpus_sample_crc32c);
    else
      std::printf(" (its identity is not recorded yet)");
    std::printf("\n");
  }
  if (s.snapshot.empty() && s.base.rows >= 0)
    std::printf("  base rows  [%lld x %lld], ids digest %s, rows digest %s\n", static_cast<long long>(s.base.rows),
                static_cast<long long>(s.base.dim), hex64(s.base.ids_digest).c_str(), hex64(s.base.data_digest).c_str());
  if (s.capacity_rows > 0)
    std::printf("  capacity   %lld row slots over all ranks (kept while storage.capacity_rows is unset)\n",
                static_cast<long long>(s.capacity_rows));
  else
    std::printf("  capacity   not recorded\n");
  std::printf("  log        %lld record(s) after the snapshot, %lld bytes; last seq %llu", static_cast<long long>(s.log_records),
              static_cast<long long>(s.log_bytes), static_cast<unsigned long long>(s.last_seq));
  if (s.recorded_log_seq > 0)
    std::printf(" (seq %llu reached at the last clean close or snapshot)", static_cast<unsigned long long>(s.recorded_log_seq));
  std::printf("\n");
  for (const auto& g : s.segments) {
    std::printf("    %s  seq %llu .. %llu, %lld record(s), %lld bytes, %s", g.name.c_str(),
                static_cast<unsigned long long>(g.first_seq), static_cast<unsigned long long>(g.last_seq),
                static_cast<long long>(g.records), static_cast<long long>(g.bytes), g.role.c_str());
    if (g.tail_bytes > 0) std::printf(", %lld bytes after the last record", static_cast<long long>(g.tail_bytes));
    std::printf("\n");
  }
  for (const auto& n : s.older_snapshots) std::printf("  older      %s (storage.keep_snapshots)\n", n.c_str());
  for (const auto& n : s.leftovers) std::printf("  leftover   %s (a start-up removes it)\n", n.c_str());
  for (const auto& n : s.unclaimed_snapshots)
    std::printf("  unclaimed  %s (no readable manifest names it: a start-up refuses the directory and removes "
                "nothing; keep it)\n",
                n.c_str());
  if (!s.lock_holder.empty()) std::printf("  lock       last taken by %s\n", s.lock_holder.c_str());
  if (!s.lock_error.empty()) std::printf("  lock       %s\n", s.lock_error.c_str());
  std::printf("  (record counts from the record headers; `shardtopk storage verify` checks every checksum)\n");
}

}  // namespace

int run_storage(const StorageArgs& a) {
  if (a.action == "info") {
    const StorageDirSummary s = inspect_storage_dir(a.dir);
    if (a.json) std::cout << info_json(s).dump(2) << "\n";
    else print_info(s);
    return 0;
  }
  struct stat st {};
  if (::stat(a.dir.c_str(), &st) != 0 && errno == ENOENT) {  // a mistyped path: nothing to verify, nothing damaged
    if (a.json) std::cout << nlohmann::json{{"dir", a.dir}, {"empty", true}, {"exists", false}, {"exit_code", 4}}.dump(2) << "\n";
    else std::printf("storage '%s' does not exist: not a storage directory, nothing was verified; exit 4\n", a.dir.c_str());
    return 4;
  }
  const StorageVerifyReport r = verify_storage_dir(a.dir, a.corpus);
  // 0 every check passed, 1 damage, 3 only a torn tail, 4 not a storage directory (nothing to check)
  const int code = r.empty ? 4 : r.damaged() ? 1 : r.clean() ? 0 : 3;
  if (a.json) {
    nlohmann::json j;
    j["dir"] = a.dir;
    j["checked"] = r.checked;
    j["notes"] = r.notes;
    j["problems"] = nlohmann::json::array();
    for (const StorageProblem& p : r.problems)
      j["problems"].push_back({{"kind", p.kind == StorageProblem::Kind::kDamage ? "damage" : "torn_tail"},
                               {"file", p.file}, {"what", p.what}});
    j["empty"] = r.empty;
    j["exit_code"] = code;
    std::cout << j.dump(2) << "\n";
    return code;
  }
  for (const auto& c : r.checked) std::printf("ok       %s\n", c.c_str());
  for (const auto& n : r.notes) std::printf("note     %s\n", n.c_str());
  int damaged = 0, torn = 0;
  for (const StorageProblem& p : r.problems) {
    const bool dmg = p.kind == StorageProblem::Kind::kDamage;
    (dmg ? damaged : torn) += 1;
    std::printf("%s %s%s%s\n", dmg ? "DAMAGED " : "TORN    ", p.file.c_str(), p.file.empty() ? "" : ": ", p.what.c_str());
  }
  if (r.empty)
    std::printf("EMPTY    not a storage directory: no MANIFEST.json, no log segment, no snapshot\n"
                "storage '%s': holds no storage data, so nothing was verified (nothing is damaged either: a start-up "
                "with it as storage.dir makes a fresh one); exit 4\n",
                a.dir.c_str());
  else if (code == 0)
    std::printf("storage '%s': every check passed\n", a.dir.c_str());
  else if (code == 1)
    std::printf("storage '%s': %d damaged (a start-up refuses it, or a kept file is damaged); exit 1\n", a.dir.c_str(),
                damaged);
  else
    std::printf("storage '%s': %d torn tail(s) that a start-up cuts; nothing else is damaged; exit 3\n", a.dir.c_str(),
                torn);
  return code;
}

}  // namespace shardtopk::cli
