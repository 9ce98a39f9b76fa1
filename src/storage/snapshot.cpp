// The snapshot protocol (docs/STORAGE.md, "Snapshots"): a new base file written to a temporary
// name and synced, renamed into place, committed by an atomic rewrite of the manifest, then the
// log records it covers and the previous snapshot removed.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>

#include "core/log.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/storage.hpp"
#include "storage/storage_impl.hpp"

namespace shardtopk {

using namespace storage;

struct SnapshotWriter::Impl {
  Storage::Impl* st = nullptr;
  SnapshotSpec spec;
  std::string temp_path, final_path;
  std::unique_ptr<H5Writer> h5;
  std::int64_t written = 0;
  std::vector<std::int64_t> ids;
  std::vector<std::vector<std::uint64_t>> columns;  // 8-byte values per attribute, bit patterns
  bool renamed = false;   // final_path exists and is not (yet) named by the manifest
  bool finished = false;  // committed, or given up after the commit point

  void step(SnapshotStep s) const {
    if (st->opt.on_snapshot_step) st->opt.on_snapshot_step(s);
  }
};

namespace storage {

std::vector<std::string> apply_retention(Storage::Impl& st) {
  std::vector<std::string> removed;
  const std::size_t older = static_cast<std::size_t>(std::max(1, st.opt.keep_snapshots) - 1);
  while (st.older_snapshots.size() > older) {
    removed.push_back(st.path(st.older_snapshots.front()));
    st.older_snapshots.erase(st.older_snapshots.begin());
  }
  // The log from the oldest snapshot kept on: a segment all of whose records it holds goes.
  std::uint64_t anchor = st.manifest.seq;
  for (const std::string& n : st.older_snapshots) {
    std::uint64_t s = 0;
    if (parse_snapshot_name(n, &s)) anchor = std::min(anchor, s);
  }
  while (!st.retained.empty() && st.retained.front().last_seq <= anchor) {
    removed.push_back(st.retained.front().path);
    st.retained.erase(st.retained.begin());
  }
  for (const std::string& p : removed) remove_file(p);
  if (!removed.empty()) fsync_dir(st.opt.dir);
  return removed;
}

}  // namespace storage

SnapshotWriter::SnapshotWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SnapshotWriter::~SnapshotWriter() {
  Impl& w = *impl_;
  if (!w.finished) {
    // Abandoned before the commit point: leave the directory as it was.
    try {
      w.h5.reset();
      remove_file(w.temp_path);
      if (w.renamed) remove_file(w.final_path);
    } catch (const std::exception& e) {
      spdlog::warn("storage '{}': cleaning up an abandoned snapshot: {}", w.st->opt.dir, e.what());
    }
  }
  std::lock_guard<std::mutex> lk(w.st->state_mu);
  w.st->snapshot_active = false;
}

void SnapshotWriter::write(std::int64_t n, const std::int64_t* ids, const float* vectors,
                           const std::vector<AttributeColumnView>& attributes) {
  Impl& w = *impl_;
  SHARDTOPK_EXPECTS(!w.finished && w.h5, "snapshot '", w.final_path, "': write after commit");
  SHARDTOPK_EXPECTS(n >= 0 && n <= w.spec.rows - w.written, "snapshot '", w.final_path, "': ", n,
                    " more rows after ", w.written, " exceed the ", w.spec.rows, " announced");
  SHARDTOPK_EXPECTS(attributes.size() == w.spec.attributes.size(), "snapshot '", w.final_path, "': ",
                    attributes.size(), " attribute columns given, ", w.spec.attributes.size(), " announced");
  for (std::size_t k = 0; k < attributes.size(); ++k)
    SHARDTOPK_EXPECTS(attributes[k].name == w.spec.attributes[k].first && attributes[k].type == w.spec.attributes[k].second &&
                          (n == 0 || attributes[k].data != nullptr),
                      "snapshot '", w.final_path, "': attribute column ", k, " is '", attributes[k].name,
                      "', announced '", w.spec.attributes[k].first, "' of the same type");
  if (n == 0) return;
  SHARDTOPK_EXPECTS(ids != nullptr && vectors != nullptr, "snapshot '", w.final_path, "': null ids or vectors");
  w.h5->write_rows(w.written, n, vectors);
  w.ids.insert(w.ids.end(), ids, ids + n);
  for (std::size_t k = 0; k < attributes.size(); ++k) {
    const auto* v = static_cast<const std::uint64_t*>(attributes[k].data);
    w.columns[k].insert(w.columns[k].end(), v, v + n);
  }
  w.written += n;
}

std::string SnapshotWriter::commit() {
  Impl& w = *impl_;
  Storage::Impl& st = *w.st;
  SHARDTOPK_EXPECTS(!w.finished && w.h5, "snapshot '", w.final_path, "': committed twice");
  SHARDTOPK_EXPECTS(w.written == w.spec.rows, "snapshot '", w.final_path, "': ", w.written, " rows written, ",
                    w.spec.rows, " announced");
  const Metric metric = st.opt.metric;
  if (w.spec.rows == 0) {
    if (w.spec.dtype == Dtype::kFloat16)
      w.h5->write_f16("train", nullptr, 0, st.opt.dim);
    else
      w.h5->write_f32("train", nullptr, 0, st.opt.dim);
  }
  w.h5->write_i64("ids", w.ids.data(), w.spec.rows, 0);
  for (std::size_t k = 0; k < w.spec.attributes.size(); ++k) {
    const auto& [name, type] = w.spec.attributes[k];
    if (type == AttributeType::kInt64)
      w.h5->write_i64("attributes/" + name, reinterpret_cast<const std::int64_t*>(w.columns[k].data()), w.spec.rows, 0);
    else
      w.h5->write_f64("attributes/" + name, reinterpret_cast<const double*>(w.columns[k].data()), w.spec.rows, 0);
  }
  w.h5->set_attr("format", std::string("shardtopk-snapshot"));
  w.h5->set_attr("format_version", static_cast<std::int64_t>(kFormatVersion));
  w.h5->set_attr("seq", static_cast<std::int64_t>(w.spec.seq));
  w.h5->set_attr("rows", w.spec.rows);
  w.h5->set_attr("dim", st.opt.dim);
  w.h5->set_attr("metric", to_string(metric));
  w.h5->set_attr("distance", to_string(metric));  // what the corpus loader reads
  w.h5->set_attr("dtype", to_string(w.spec.dtype));
  w.h5->set_attr("normalized", static_cast<std::int64_t>(w.spec.normalized ? 1 : 0));
  w.h5->close();
  w.h5.reset();
  fsync_path(w.temp_path);
  w.step(SnapshotStep::kTempWritten);

  rename_synced(w.temp_path, w.final_path, st.opt.dir);
  w.renamed = true;
  w.step(SnapshotStep::kRenamed);

  Manifest next;
  std::string previous;
  std::unique_lock<std::mutex> writing(st.manifest_mu);
  {
    std::lock_guard<std::mutex> lk(st.state_mu);
    next = st.manifest;
    previous = st.manifest.snapshot;
  }
  next.snapshot = snapshot_name(w.spec.seq);
  next.seq = w.spec.seq;
  next.snapshot_bytes = static_cast<std::int64_t>(file_size(w.final_path));
  next.snapshot_crc32c = file_crc32c(w.final_path, 0, static_cast<std::uint64_t>(next.snapshot_bytes));
  next.corpus_path.clear();  // the snapshot is the base from now on
  next.corpus_bytes = -1;
  next.base = BaseIdentity{-1, 0, 0, 0};
  next.log_seq = std::max(next.log_seq, st.writer->durable_seq());
  const std::string mpath = st.path(kManifestName);
  write_file_synced(mpath + kTempSuffix, manifest_json(next));
  w.step(SnapshotStep::kManifestWritten);
  rename_file(mpath + kTempSuffix, mpath);
  // The manifest now names the new snapshot (durably once the directory is synced): whatever
  // fails from here on, the new file must stay, and recovery removes what is superseded.
  {
    std::lock_guard<std::mutex> lk(st.state_mu);
    st.manifest = next;
    st.base_time = std::chrono::system_clock::now();
  }
  writing.unlock();
  w.renamed = false;
  w.finished = true;
  fsync_dir(st.opt.dir);
  w.step(SnapshotStep::kCommitted);

  std::vector<std::string> removed;
  {
    std::unique_lock<std::shared_mutex> files(st.files_mu);
    std::vector<SegmentInfo> detached = st.writer->detach_through(w.spec.seq);
    std::lock_guard<std::mutex> lk(st.state_mu);
    if (!previous.empty() && previous != next.snapshot) st.older_snapshots.push_back(previous);
    st.retained.insert(st.retained.end(), detached.begin(), detached.end());
    removed = apply_retention(st);
  }
  w.step(SnapshotStep::kLogTruncated);
  spdlog::info("storage '{}': snapshot {} committed ({} rows, seq {}); removed {} superseded file(s)", st.opt.dir,
               next.snapshot, w.spec.rows, w.spec.seq, removed.size());
  return w.final_path;
}

std::unique_ptr<SnapshotWriter> Storage::begin_snapshot(const SnapshotSpec& spec) {
  Impl& st = *impl_;
  const std::string fail = st.writer->failure();
  SHARDTOPK_EXPECTS(fail.empty(), "storage '", st.opt.dir, "': no snapshot ", kAfterLogError, ": ", fail);
  SHARDTOPK_EXPECTS(spec.dtype == Dtype::kFloat32 || spec.dtype == Dtype::kFloat16, "snapshot: dtype ",
                    to_string(spec.dtype), " (allowed: float32, float16)");
  SHARDTOPK_EXPECTS(spec.rows >= 0, "snapshot: rows = ", spec.rows);
  std::set<std::string> names;
  for (const auto& [name, type] : spec.attributes) {
    check_attribute_name(name, "snapshot");
    SHARDTOPK_EXPECTS(names.insert(name).second, "snapshot: attribute '", name, "' given twice");
    SHARDTOPK_EXPECTS(type == AttributeType::kInt64 || type == AttributeType::kFloat64, "snapshot: attribute '",
                      name, "' has unknown type ", static_cast<std::uint32_t>(type));
  }
  const std::uint64_t last = last_seq();
  auto w = std::make_unique<SnapshotWriter::Impl>();
  {
    std::lock_guard<std::mutex> lk(st.state_mu);
    SHARDTOPK_EXPECTS(!st.snapshot_active, "storage '", st.opt.dir, "': a snapshot is already being written");
    const bool has = !st.manifest.snapshot.empty();
    SHARDTOPK_EXPECTS(spec.seq <= last && (spec.seq > st.manifest.seq || (!has && spec.seq == st.manifest.seq)),
                      "snapshot: seq ", spec.seq, " outside ", has ? "(" : "[", st.manifest.seq, ", ", last,
                      "] (the current snapshot's seq, the last durable seq)");
    st.snapshot_active = true;
  }
  w->st = &st;
  w->spec = spec;
  w->final_path = st.path(snapshot_name(spec.seq));
  w->temp_path = w->final_path + kTempSuffix;
  w->columns.resize(spec.attributes.size());
  std::unique_ptr<SnapshotWriter> out(new SnapshotWriter(std::move(w)));  // releases snapshot_active on error
  st.writer->start_segment_after(spec.seq);  // the records after spec.seq in a segment of their own
  // Whatever is at the temporary name goes first (a link itself, not its target), and the file
  // is created exclusively: a link planted there cannot redirect the snapshot's bytes.
  remove_file(out->impl_->temp_path);
  out->impl_->h5 = std::make_unique<H5Writer>(out->impl_->temp_path, /*exclusive=*/true);
  if (spec.rows > 0) out->impl_->h5->create_rows("train", spec.dtype, spec.rows, st.opt.dim);
  return out;
}

SnapshotInfo inspect_snapshot(const std::string& path) {
  SnapshotInfo info;
  const FileInfo file = inspect_file(path);
  auto int_attr = [&](const char* name) {
    const auto it = file.int_attributes.find(name);
    SHARDTOPK_EXPECTS(it != file.int_attributes.end() && it->second.size() == 1, "'", path,
                      "': not a shardtopk snapshot (no integer attribute '", name, "')");
    return it->second[0];
  };
  const std::int64_t seq = int_attr("seq");
  SHARDTOPK_EXPECTS(seq >= 0, "'", path, "': seq ", seq);
  info.seq = static_cast<std::uint64_t>(seq);
  info.rows = int_attr("rows");
  info.dim = int_attr("dim");
  info.normalized = file.int_attributes.count("normalized") > 0 && int_attr("normalized") != 0;
  info.metric = parse_metric(read_string_attribute(path, "metric"), "'" + path + "': metric");
  info.dtype = parse_dtype(read_string_attribute(path, "dtype"), "'" + path + "': dtype");
  const DatasetInfo train = inspect_dataset(path, "train");
  SHARDTOPK_EXPECTS(train.dims == (std::vector<std::int64_t>{info.rows, info.dim}), "'", path,
                    "': train is not [rows, dim] = [", info.rows, ", ", info.dim, "]");
  const DatasetInfo ids = inspect_dataset(path, "ids");
  SHARDTOPK_EXPECTS(ids.dims == std::vector<std::int64_t>{info.rows} && ids.dtype == "int64", "'", path,
                    "': ids is not int64 [", info.rows, "]");
  for (const DatasetInfo& d : file.datasets) {
    if (d.name.rfind("attributes/", 0) != 0) continue;
    SHARDTOPK_EXPECTS(d.dims == std::vector<std::int64_t>{info.rows} && (d.dtype == "int64" || d.dtype == "float64"),
                      "'", path, "': ", d.name, " is not int64 or float64 [", info.rows, "]");
    info.attributes.emplace_back(d.name.substr(11), d.dtype == "int64" ? AttributeType::kInt64 : AttributeType::kFloat64);
  }
  std::sort(info.attributes.begin(), info.attributes.end());
  return info;
}

}  // namespace shardtopk
