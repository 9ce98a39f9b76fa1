// shardtopk.Index (py_index.hpp): construction, search in host or device memory, the followers'
// loop, and MPI's initialisation for the process (from the first index to interpreter exit).
#include "py_index.hpp"

#include <dlfcn.h>
#include <mpi.h>
#include <pybind11/numpy.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <vector>

#include "core/log.hpp"
#include "core/parse.hpp"
#include "dlpack_io.hpp"
#include "py_args.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/config.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/ingest.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/shard_plan.hpp"

namespace shardtopk::python {
namespace {

// ------------------------------------------------------------------------------ MPI and open indexes

std::mutex g_mu;
std::set<PyIndex*> g_open;           // every index not yet destroyed
std::unique_ptr<MpiSession> g_mpi;   // from the first index to interpreter exit
bool g_finalized = false;

/// MPI for the first index; later ones share it. Finalised at interpreter exit.
void ensure_mpi() {
  std::lock_guard<std::mutex> lock(g_mu);
  SHARDTOPK_EXPECTS(!g_finalized, "MPI has been finalised (the interpreter is exiting): no new index");
  if (g_mpi) return;
  // Open MPI loads its components with dlopen, and they look for libmpi's symbols in the global
  // namespace, where a Python extension (loaded RTLD_LOCAL) does not put them: promote the
  // already loaded libmpi to RTLD_GLOBAL first, as mpi4py does.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&MPI_Init), &info) != 0 && info.dli_fname)
    (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  g_mpi = std::make_unique<MpiSession>(nullptr, nullptr, MpiThreads::kSerialized);
}

/// A start-up failure of this rank's own (its input, file, memory) is a ValueError like any bad
/// input; another rank's is a RemoteError (RuntimeError).
template <typename Build>
std::unique_ptr<ShardedIndex> build_collectively(const Build& build) {
  try {
    return build();
  } catch (const RemoteError& e) {
    if (e.local()) throw Error(e.what());
    throw;
  }
}

}  // namespace

// ------------------------------------------------------------------------------ construction

PyIndex::PyIndex(std::unique_ptr<ShardedIndex> index) : index_(std::move(index)) {
  const IndexInfo i = index_->info();
  const EngineInfo& e = i.engine;
  rank_ = i.rank;
  world_ = i.world_size;
  dim_ = i.dim;
  rows_ = i.rows;
  k_rows_ = i.k_rows;
  writable_ = i.writable;
  k_max_ = i.k_max;
  batch_max_ = i.batch_max;
  cuda_ = e.space == MemSpace::kDevice;
  device_ = e.device;
  metric_ = to_string(i.metric);
  dtype_ = to_string(e.dtype);
  engine_ = e.name;
  device_name_ = e.device_name;
  comm_ = i.comm;
  resident_bytes_ = i.ingest.engine_resident_bytes;
  max_filters_ = i.max_filters;
  attributes_ = i.schema;
  std::lock_guard<std::mutex> lock(g_mu);
  g_open.insert(this);
}

std::unique_ptr<PyIndex> PyIndex::open(py::object config_path, const py::kwargs& overrides) {
  const std::string path = py::str(py::module_::import("os").attr("fspath")(config_path));
  Config cfg = load_config(path);
  apply_overrides(cfg, overrides, /*from_arrays=*/false);
  validate(cfg);
  warn(cfg);
  std::unique_ptr<ShardedIndex> index;
  {
    py::gil_scoped_release nogil;
    ensure_mpi();
    index = build_collectively([&] { return load_index(cfg, /*log_progress=*/true); });
  }
  return std::unique_ptr<PyIndex>(new PyIndex(std::move(index)));
}

std::unique_ptr<PyIndex> PyIndex::from_arrays(py::object vectors, py::object ids, const std::string& metric,
                                              const std::string& dtype, py::object k_max, py::object batch_max,
                                              const std::string& backend, py::object attributes,
                                              const py::kwargs& overrides) {
  Config cfg;
  apply_override(cfg, "search.metric=" + metric);
  apply_override(cfg, "engine.dtype=" + dtype);
  apply_override(cfg, "engine.backend=" + backend);
  apply_override(cfg, "search.k_max=" + override_value(k_max, "search.k_max"));
  apply_override(cfg, "search.batch_max=" + override_value(batch_max, "search.batch_max"));
  apply_overrides(cfg, overrides, /*from_arrays=*/true);
  warn(cfg);
  const Metric m = cfg.search.metric.value_or(Metric::kInnerProduct);

  // The rows as float32 [rows, dim], row-major (a copy only when they are not that already).
  if (const std::optional<DlDevice> d = dlpack_device_of(vectors))
    SHARDTOPK_EXPECTS(d->type == kDLCPU, "vectors are on ", device_text(*d),
                      "; from_arrays takes host arrays (tensor.cpu(), cupy.asnumpy(a))");
  py::object arr = numpy().attr("asarray")(vectors);
  const std::string kind = py::str(arr.attr("dtype").attr("kind"));
  SHARDTOPK_EXPECTS(kind == "f" || kind == "i" || kind == "u", "vectors must hold real numbers, got dtype ",
                    std::string(py::str(arr.attr("dtype"))));
  const bool converted = !py::reinterpret_borrow<py::array>(arr).dtype().is(py::dtype::of<float>());
  py::array v = numpy().attr("ascontiguousarray")(arr, py::arg("dtype") = "float32");
  SHARDTOPK_EXPECTS(v.ndim() == 2, "vectors must be 2-D [rows, dim], got shape ", std::string(py::str(v.attr("shape"))));
  const std::int64_t rows = v.shape(0), dim = v.shape(1);
  SHARDTOPK_EXPECTS(rows >= 1 && dim >= 1, "vectors are empty: shape [", rows, ", ", dim, "]");
  const float* data = static_cast<const float*>(v.data());

  py::object id_arr;  // int64 [rows], or None
  if (!ids.is_none()) {
    py::object a = int_list(ids, "ids", false);
    if (a.is_none()) a = numpy().attr("asarray")(ids);
    const std::string ik = py::str(a.attr("dtype").attr("kind"));
    SHARDTOPK_EXPECTS(ik == "i" || ik == "u", "ids must be integers, got dtype ", std::string(py::str(a.attr("dtype"))));
    SHARDTOPK_EXPECTS(a.attr("ndim").cast<int>() == 1 && a.attr("shape").cast<py::tuple>()[0].cast<std::int64_t>() == rows,
                      "ids must be 1-D [rows] with one id per row of vectors (", rows, " rows), got shape ",
                      std::string(py::str(a.attr("shape"))));
    if (ik == "u" && a.attr("dtype").attr("itemsize").cast<int>() == 8)
      SHARDTOPK_EXPECTS(!a.attr("__gt__")(py::int_(INT64_MAX)).attr("any")().cast<bool>(),
                        "ids: a value exceeds the int64 range");
    id_arr = numpy().attr("ascontiguousarray")(a, py::arg("dtype") = "int64");
  }
  const std::int64_t* all_ids =
      id_arr ? static_cast<const std::int64_t*>(py::reinterpret_borrow<py::array>(id_arr).data()) : nullptr;
  // A bad attribute is this rank's error, reported through the collective below (after the
  // shapes' check, so that ranks passing other arrays hear that first), never before it.
  std::vector<AttributeInput> attrs;
  std::string attr_error;
  try {
    attrs = attribute_inputs(attributes, rows);
  } catch (const Error& e) {
    attr_error = e.what();
  }

  std::unique_ptr<ShardedIndex> index;
  {
    py::gil_scoped_release nogil;
    ensure_mpi();
    index = build_collectively([&] {
      std::unique_ptr<Communicator> comm = make_mpi_communicator(cfg.comm.timeout_s);
      const int rank = comm->rank(), world = comm->world_size();
      init_logging(rank, world);
      // Every rank passes the same arrays and keeps its shard_rows() slice.
      const std::int64_t mine[2] = {rows, dim};
      std::vector<std::int64_t> all(2 * static_cast<std::size_t>(world));
      comm->allgather(mine, all.data(), sizeof mine);
      bool ok = true;
      std::string msg;
      const RowRange r = shard_rows(rows, world, rank);
      std::vector<float> normalized;
      std::vector<std::int64_t> shard_ids(static_cast<std::size_t>(r.size()));
      try {
        for (int p = 0; p < world; ++p)
          SHARDTOPK_EXPECTS(all[2 * p] == rows && all[2 * p + 1] == dim, "vectors: rank ", p, " passed [", all[2 * p],
                            ", ", all[2 * p + 1], "] but rank ", rank, " passed [", rows, ", ", dim,
                            "]; every rank passes the same full arrays (each keeps its own rows)");
        if (!attr_error.empty()) throw Error(attr_error);
        for (std::int64_t i = r.lo; i < r.hi; ++i) {
          const float* x = data + i * dim;
          for (std::int64_t c = 0; c < dim; ++c)
            SHARDTOPK_EXPECTS(std::isfinite(x[c]), "vectors: corpus row ", i, " has a non-finite value (", x[c],
                              ") at column ", c, converted ? " (after conversion to float32)" : "");
        }
        if (all_ids && rank == 0) {  // the same ids on every rank: one rank checks them
          std::vector<std::int64_t> sorted(all_ids, all_ids + rows);
          std::sort(sorted.begin(), sorted.end());
          const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
          SHARDTOPK_EXPECTS(dup == sorted.end(), "ids are not unique: id ", (dup == sorted.end() ? 0 : *dup),
                            " appears more than once");
          SHARDTOPK_EXPECTS(sorted.back() != kPadId, "ids: id ", kPadId, " is reserved");
        }
        for (std::int64_t i = 0; i < r.size(); ++i) shard_ids[i] = all_ids ? all_ids[r.lo + i] : r.lo + i;
        if (m == Metric::kCosine) {  // stored normalised, as load_index does
          normalized.assign(data + r.lo * dim, data + r.hi * dim);
          normalize_rows(normalized.data(), r.size(), dim, r.lo, "corpus row");
        }
      } catch (const std::exception& e) {
        ok = false;
        msg = e.what();
      }
      AttributeTable table;
      if (ok && !attrs.empty()) {
        try {
          table = AttributeTable(shard_columns(attrs, r), shard_ids, 1);
        } catch (const std::exception& e) {
          ok = false;
          msg = e.what();
        }
      }
      comm->check(ok, msg);
      ShardInput in;
      in.data = m == Metric::kCosine ? normalized.data() : data + r.lo * dim;
      in.rows = r.size();
      in.dim = dim;
      in.ids = shard_ids.data();
      if (!attrs.empty()) in.attributes = &table;
      return build_index(cfg, m, rows, r, in, std::move(comm));
    });
  }
  return std::unique_ptr<PyIndex>(new PyIndex(std::move(index)));
}

PyIndex::~PyIndex() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_open.erase(this);
  }
  if (closed_) return;
  try {
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      close_locked();
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      close_locked();
    }
  } catch (const std::exception& e) {
    spdlog::warn("rank {}: closing a shardtopk.Index that was not closed: {}", rank_, e.what());
  }
}

void PyIndex::close_all_and_finalize() {
  std::vector<PyIndex*> open;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    open.assign(g_open.begin(), g_open.end());
  }
  for (PyIndex* p : open) {
    try {
      p->close();
    } catch (const std::exception& e) {
      spdlog::warn("rank {}: closing a shardtopk.Index at exit: {}", p->rank_, e.what());
    }
  }
  py::gil_scoped_release nogil;
  std::lock_guard<std::mutex> lock(g_mu);
  g_mpi.reset();
  g_finalized = true;
}

// ------------------------------------------------------------------------------ closing

void PyIndex::require_open(const char* call) const {
  SHARDTOPK_EXPECTS(index_ != nullptr, call, ": the index is closed");
}

void PyIndex::close_locked() {
  if (!index_) return;
  std::unique_ptr<ShardedIndex> index = std::move(index_);  // closed from here on, whatever happens
  closed_ = true;
  if (rank_ == 0) index->shutdown();
  else index->follow();  // serves rank 0's remaining calls until its close()
}

void PyIndex::close() {
  py::gil_scoped_release nogil;
  std::lock_guard<std::mutex> lock(mu_);
  close_locked();
}

void PyIndex::follow() {
  py::gil_scoped_release nogil;
  std::lock_guard<std::mutex> lock(mu_);
  require_open("follow()");
  index_->follow();  // throws on rank 0: it drives the index
  index_.reset();     // rank 0 closed it: closed here too
  closed_ = true;
}

py::dict PyIndex::info() {
  py::dict d;
  d["rows"] = rows_;
  d["dim"] = dim_;
  d["metric"] = metric_;
  d["dtype"] = dtype_;
  d["engine"] = engine_;
  d["device"] = cuda_ ? "cuda:" + std::to_string(device_) : std::string("cpu");
  d["device_name"] = device_name_;
  d["ranks"] = world_;
  d["rank"] = rank_;
  d["k_max"] = k_max_;
  d["batch_max"] = batch_max_;
  d["comm"] = comm_;
  d["resident_bytes"] = resident_bytes_;
  py::dict attrs;
  for (const AttributeSpec& a : attributes_) attrs[py::str(a.name)] = to_string(a.type);
  d["attributes"] = attrs;
  d["max_filters"] = max_filters_;
  d["closed"] = closed();
  d["writable"] = writable_;
  if (writable_ && rank_ == 0) {  // rank 0 keeps the update counters
    UpdateStats u;
    bool open = false;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      open = index_ != nullptr;
      if (open) u = index_->update_stats();
    }
    if (open) {
      d["live_rows"] = u.live_rows;
      d["capacity_rows"] = u.capacity_rows;
      d["tombstones"] = u.tombstones;
      d["applied_seq"] = u.applied_seq;
      d["snapshot_seq"] = u.snapshot_seq;
      d["log_bytes"] = u.log_bytes;
    }
  }
  return d;
}

// ------------------------------------------------------------------------------ search

template <typename Run>
void PyIndex::in_pieces(std::int64_t batch, const Run& run) {
  const bool split = batch > batch_max_;
  std::size_t piece = 0;
  for (std::int64_t off = 0; off < batch; off += batch_max_, ++piece) {
    const int n = static_cast<int>(std::min<std::int64_t>(batch_max_, batch - off));
    try {
      run(off, n, piece);
    } catch (const RemoteError&) {
      throw;
    } catch (const CommError&) {
      throw;
    } catch (const Error& e) {
      if (!split) throw;
      throw Error(detail::concat("queries ", off, " .. ", off + n - 1, " of this call (searched together, ",
                                 batch_max_, " at a time: search.batch_max): ", e.what()));
    }
  }
}

template <typename Admit>
void PyIndex::admit_pieces(std::int64_t batch, const Admit& admit, const FilterProgram* filter,
                           std::vector<SearchBatch>* pieces) {
  py::gil_scoped_release nogil;
  std::lock_guard<std::mutex> lock(mu_);
  require_open("search()");
  const FilterProgram* const* filters = piece_filters(filter);
  in_pieces(batch, [&](std::int64_t off, int n, std::size_t) { pieces->push_back(admit(off, n, filters)); });
}

namespace {

/// search()'s third value (docs/PYTHON.md "Ranges, pages and counts"): per query, the rows
/// within its bound (-1: none), scanned and passing, its real results, and its next page's
/// search_after ((score, id) of its last result when the page is full, else None).
py::dict stats_dict(const std::vector<QueryStats>& stats, const std::vector<std::int32_t>& counts,
                    const std::int64_t* ids, const float* scores, int k, bool count_only) {
  const auto batch = static_cast<py::ssize_t>(stats.size());
  py::array_t<std::int64_t> total(batch), scanned(batch), passing(batch);
  py::array_t<std::int32_t> count(batch);
  auto t = total.mutable_unchecked<1>(), sc = scanned.mutable_unchecked<1>(), ps = passing.mutable_unchecked<1>();
  auto c = count.mutable_unchecked<1>();
  py::list next;
  for (py::ssize_t q = 0; q < batch; ++q) {
    const QueryStats& s = stats[static_cast<std::size_t>(q)];
    t(q) = s.total;
    sc(q) = s.scanned;
    ps(q) = s.passing;
    const std::int32_t n = counts[static_cast<std::size_t>(q)];
    c(q) = count_only ? 0 : n;
    if (count_only) continue;
    if (n == k && k > 0) {
      const std::size_t last = static_cast<std::size_t>(q) * static_cast<std::size_t>(k) + static_cast<std::size_t>(k - 1);
      next.append(py::make_tuple(static_cast<double>(scores[last]), ids[last]));
    } else {
      next.append(py::none());
    }
  }
  py::dict d;
  d["total"] = total;
  d["rows_scanned"] = scanned;
  d["rows_passing"] = passing;
  d["count"] = count;
  if (!count_only) d["next"] = next;
  return d;
}

/// A list, tuple or array of values (not a string, not a 0-d array: a scalar).
bool is_sequence(py::handle v) {
  if (py::isinstance<py::array>(v)) return py::reinterpret_borrow<py::array>(v).ndim() > 0;
  return PySequence_Check(v.ptr()) && !PyUnicode_Check(v.ptr()) && !PyBytes_Check(v.ptr());
}

/// A real number of an order argument (not a bool), within float32's finite range.
double order_number(py::handle v, const std::string& what) {
  SHARDTOPK_EXPECTS(!PyBool_Check(v.ptr()) && PyNumber_Check(v.ptr()) && !is_sequence(v), what,
                    " must be a number, got ", type_name(v), " ", std::string(py::repr(v)));
  const double d = PyFloat_AsDouble(v.ptr());
  if (d == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw Error(detail::concat(what, " must be a real number, got ", type_name(v), " ", std::string(py::repr(v))));
  }
  SHARDTOPK_EXPECTS(std::isfinite(d) && std::fabs(d) <= std::numeric_limits<float>::max(), what, " = ",
                    std::string(py::repr(v)), " is outside float32");
  return d;
}

/// One value for every query, or a sequence of one per query (`pair`: a value is itself a
/// (score, id) pair, so a single pair is told from a sequence of pairs by its first element).
std::vector<py::object> per_query(py::handle v, std::int64_t batch, bool pair, const char* name) {
  bool list = is_sequence(v);
  if (list && pair && py::len(v) > 0) {
    const py::object first = py::reinterpret_borrow<py::sequence>(v)[0];
    list = is_sequence(first);
  }
  if (!list) return std::vector<py::object>(static_cast<std::size_t>(batch), py::reinterpret_borrow<py::object>(v));
  const py::sequence s = py::reinterpret_borrow<py::sequence>(v);
  const auto n = static_cast<std::int64_t>(py::len(s));
  SHARDTOPK_EXPECTS(n == batch, name, " has ", n, " entries for ", batch, " quer", batch == 1 ? "y" : "ies",
                    "; give one value for every query, or one entry per query");
  std::vector<py::object> out;
  for (std::int64_t q = 0; q < n; ++q) out.push_back(s[static_cast<std::size_t>(q)]);
  return out;
}

}  // namespace

long long PyIndex::search_k(py::handle k_obj, py::handle limit, const OrderArgs& order) const {
  const bool l2 = metric_ == "l2";
  const char* bound_name = l2 ? "max_distance" : "min_score";
  SHARDTOPK_EXPECTS((l2 ? order.min_score : order.max_distance).is_none(), l2 ? "min_score" : "max_distance",
                    " is for ", l2 ? "inner_product and cosine" : "l2", "; this index ranks by ",
                    l2 ? "l2 distance: give max_distance" : "similarity: give min_score");
  SHARDTOPK_EXPECTS(k_obj.is_none() || limit.is_none(), "give limit or k, not both (they are the same number)");
  SHARDTOPK_EXPECTS(!order.count_only || !(l2 ? order.max_distance : order.min_score).is_none(),
                    "count_only counts the rows within a bound: give ", bound_name);
  const char* name = k_obj.is_none() ? "limit" : "k";
  const py::handle v = k_obj.is_none() ? limit : k_obj;
  if (v.is_none()) {
    if (order.count_only) return 1;
    throw py::type_error("search() missing its argument k (or limit=): the results per query");
  }
  const std::optional<long long> k = integer_arg(v, name);
  if (!k) {
    const std::int64_t kmax = std::min<std::int64_t>(k_max_, k_rows_);
    throw Error(detail::concat(name, "=", std::string(py::str(v)), " out of range: allowed 1 .. ", kmax));
  }
  return *k;
}

std::vector<QueryBounds> PyIndex::query_bounds(const OrderArgs& order, std::int64_t batch) const {
  if (!order.bounded()) return {};
  const bool l2 = metric_ == "l2";
  const char* bound_name = l2 ? "max_distance" : "min_score";
  std::vector<QueryBounds> bounds(static_cast<std::size_t>(batch));
  const py::object& bound = l2 ? order.max_distance : order.min_score;
  if (!bound.is_none()) {
    const std::vector<py::object> v = per_query(bound, batch, false, bound_name);
    for (std::int64_t q = 0; q < batch; ++q) {
      const double d = order_number(v[static_cast<std::size_t>(q)], detail::concat(bound_name, " of query ", q));
      bounds[static_cast<std::size_t>(q)].has_bound = true;
      bounds[static_cast<std::size_t>(q)].bound = bound_as_float(d, l2);
    }
  }
  if (!order.search_after.is_none()) {
    const std::vector<py::object> v = per_query(order.search_after, batch, true, "search_after");
    for (std::int64_t q = 0; q < batch; ++q) {
      const py::object& p = v[static_cast<std::size_t>(q)];
      const std::string what = detail::concat("search_after of query ", q);
      SHARDTOPK_EXPECTS(is_sequence(p) && py::len(p) == 2, what, " must be (score, id) (a previous answer's next), got ",
                        std::string(py::repr(p)));
      const py::sequence pair = py::reinterpret_borrow<py::sequence>(p);
      QueryBounds& x = bounds[static_cast<std::size_t>(q)];
      x.has_after = true;
      const py::object score = pair[0];
      x.after_score = static_cast<float>(order_number(score, what + " score"));
      const py::object id = pair[1];
      std::optional<long long> i;
      try {
        i = integer_arg(id, "id");
      } catch (const Error&) {
      }
      SHARDTOPK_EXPECTS(i.has_value(), what, ": the id must be an int64 integer, got ", std::string(py::repr(id)));
      x.after_id = *i;
    }
  }
  return bounds;
}

py::tuple PyIndex::search(py::object queries, py::object k_obj, py::object filter, py::object limit,
                          const OrderArgs& order, py::object stream, py::object out) {
  require_open("search()");
  SHARDTOPK_EXPECTS(rank_ == 0, "search() runs on rank 0, which drives the collective search; rank ", rank_, " of ",
                    world_, " calls follow() (or close()) instead");
  const long long k = search_k(k_obj, limit, order);
  SHARDTOPK_EXPECTS(!order.count_only || out.is_none(), "out= with count_only: a count answers no ids or scores");
  // Compiled once, for every query of the call (and every piece of a split batch).
  std::optional<FilterProgram> program;
  if (!filter.is_none()) program = compile_py_filter(filter, attributes_);
  return search_queries(queries, k, program ? &*program : nullptr, order, stream, out);
}

py::tuple PyIndex::search_queries(py::object queries, long long k, const FilterProgram* f, const OrderArgs& order,
                                  py::object stream, py::object out) {
  if (py::isinstance<py::array>(queries)) {
    py::array a = py::reinterpret_borrow<py::array>(queries);
    SHARDTOPK_EXPECTS(a.dtype().is(py::dtype::of<float>()), "queries must be float32, got ",
                      std::string(py::str(a.dtype())), " (convert with queries.astype(numpy.float32))");
    SHARDTOPK_EXPECTS(a.ndim() == 1 || a.ndim() == 2, "queries must be 1-D [dim] or 2-D [batch, dim], got ", a.ndim(), "-D");
    const std::int64_t cols = a.shape(a.ndim() - 1), batch = a.ndim() == 2 ? a.shape(0) : 1;
    SHARDTOPK_EXPECTS(cols == dim_, "queries have dimension ", cols, " but the index has dimension ", dim_);
    SHARDTOPK_EXPECTS((a.flags() & py::array::c_style) != 0,
                      "queries must be C-contiguous (row-major, rows packed); copy them first (numpy.ascontiguousarray)");
    return search_host(static_cast<const float*>(a.data()), batch, a.ndim() == 1, k, f, order, out);
  }
  // A torch tensor: its device from C-level attributes (__dlpack_device__ is Python code).
  std::optional<DlDevice> d;
  const TorchApi* t = torch_api();
  const bool is_torch = t && t->is_tensor(queries);
  if (is_torch) {
    d = queries.attr("is_cuda").cast<bool>() ? DlDevice{kDLCUDA, queries.attr("get_device")().cast<int>()}
                                             : DlDevice{kDLCPU, 0};
  } else {
    d = dlpack_device_of(queries);
  }
  if (d) {
    if (d->type == kDLCUDA) return search_device(queries, d->id, k, f, order, stream, out);
    SHARDTOPK_EXPECTS(d->type == kDLCPU, "queries are on ", device_text(*d), "; pass host arrays or arrays on the index's GPU (",
                      cuda_ ? "cuda:" + std::to_string(device_) : "none: CPU engine", ")");
    const auto qt = is_torch ? ImportedTensor::from_capsule(t->to_dlpack(queries), "queries")
                             : ImportedTensor::exchange(queries, std::nullopt, "queries");
    const MatrixShape s = check_matrix(qt->tensor(), kDlFloat32, "float32", "queries");
    SHARDTOPK_EXPECTS(s.cols == dim_, "queries have dimension ", s.cols, " but the index has dimension ", dim_);
    return search_host(static_cast<const float*>(qt->data()), s.rows, s.one_d, k, f, order, out);
  }
  // Anything else numpy can read as numbers (a list of floats, a list of lists).
  py::array a = numpy().attr("asarray")(queries, py::arg("dtype") = "float32");
  return search_queries(a, k, f, order, stream, out);
}

const FilterProgram* const* PyIndex::piece_filters(const FilterProgram* filter) {
  if (!filter) return nullptr;
  piece_filters_.assign(static_cast<std::size_t>(batch_max_), filter);
  return piece_filters_.data();
}

py::tuple PyIndex::search_host(const float* q, std::int64_t batch, bool one_d, long long k_in,
                               const FilterProgram* filter, const OrderArgs& order, py::object out) {
  (void)one_d;  // a single query is a batch of one: [1, k]
  const std::vector<QueryBounds> bounds = query_bounds(order, batch);
  const bool with_stats = order.any();
  // Every piece admitted before anything is allocated or searched (an empty call: k alone).
  std::vector<SearchBatch> pieces;
  if (batch == 0) check_k(k_in, k_max_, k_rows_);
  else admit_pieces(batch, [&](std::int64_t off, int n, const FilterProgram* const* filters) {
    if (!with_stats) return index_->admit(q + off * dim_, n, k_in, filters);
    return index_->admit(q + off * dim_, n, k_in, filters, bounds.empty() ? nullptr : bounds.data() + off, true);
  }, filter, &pieces);
  const int k = static_cast<int>(k_in);
  // count_only: the answer's ids and scores are [batch, 0]; the search writes into buffers here.
  const std::int64_t k_out = order.count_only ? 0 : k;
  py::object ids_obj, scores_obj;
  if (!out.is_none()) {
    auto [i, s] = out_pair(out);
    check_host_out(i, py::dtype::of<std::int64_t>(), batch, k, "out[0] (ids)");
    check_host_out(s, py::dtype::of<float>(), batch, k, "out[1] (scores)");
    ids_obj = i;
    scores_obj = s;
  } else {
    ids_obj = py::array(py::dtype::of<std::int64_t>(), {batch, k_out});
    scores_obj = py::array(py::dtype::of<float>(), {batch, k_out});
  }
  std::vector<std::int64_t> count_ids;
  std::vector<float> count_scores;
  std::int64_t* ids = nullptr;
  float* scores = nullptr;
  if (order.count_only) {
    count_ids.resize(static_cast<std::size_t>(batch) * static_cast<std::size_t>(k));
    count_scores.resize(count_ids.size());
    ids = count_ids.data();
    scores = count_scores.data();
  } else {
    ids = static_cast<std::int64_t*>(py::reinterpret_borrow<py::array>(ids_obj).mutable_data());
    scores = static_cast<float*>(py::reinterpret_borrow<py::array>(scores_obj).mutable_data());
  }
  std::vector<std::int32_t> counts(with_stats ? static_cast<std::size_t>(batch) : 0);
  std::vector<QueryStats> stats(counts.size());
  if (batch > 0) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    require_open("search()");
    in_pieces(batch, [&](std::int64_t off, int, std::size_t piece) {
      if (with_stats) index_->search(pieces[piece], ids + off * k, scores + off * k, counts.data() + off, stats.data() + off);
      else index_->search(pieces[piece], ids + off * k, scores + off * k);
    });
  }
  if (!with_stats) return py::make_tuple(ids_obj, scores_obj);
  return py::make_tuple(ids_obj, scores_obj, stats_dict(stats, counts, ids, scores, k, order.count_only));
}

py::tuple PyIndex::search_device(py::object queries, int device, long long k_in, const FilterProgram* filter,
                                 const OrderArgs& order, py::object stream_obj, py::object out) {
  SHARDTOPK_EXPECTS(cuda_, "queries are on cuda:", device, " but the index runs on the ", engine_,
                    " engine; pass host arrays (numpy), or build the index on a GPU (engine.backend cuda)");
  SHARDTOPK_EXPECTS(device == device_, "queries are on cuda:", device, " but the index is on cuda:", device_,
                    "; move them there first (tensor.to('cuda:", device_, "'))");
  SHARDTOPK_EXPECTS(!order.any(), "min_score, max_distance, search_after, count_only and stats take host queries "
                    "on the CPU engine; these queries are in device memory (the CUDA engine)");
  // Each array through the exchange of the protocol, which orders its producer's pending work
  // before `s`; torch tensors through torch's own export, torch's current stream then ordered
  // before `s` here (what torch's __dlpack__ does, without its Python-level cost).
  const TorchApi* torch = torch_api();
  const bool torch_queries = torch && torch->is_tensor(queries);
  const StreamHandle torch_stream = torch_queries ? torch->stream(device) : 0;
  py::object stream_owner = !stream_obj.is_none() && !PyLong_Check(stream_obj.ptr()) ? stream_obj : py::object();
  const StreamHandle s = !stream_obj.is_none() ? stream_handle(stream_obj)
                         : torch_queries       ? torch_stream
                                               : producer_stream(queries, device, &stream_owner);
  bool from_torch = false;
  const auto take = [&](py::handle o, const char* what) {
    if (torch && torch->is_tensor(o)) {
      from_torch = true;
      return ImportedTensor::from_capsule(torch->to_dlpack(o), what);
    }
    return ImportedTensor::exchange(o, dlpack_stream_arg(s), what);
  };
  const auto qt = take(queries, "queries");
  const DLTensor& qv = qt->tensor();
  SHARDTOPK_EXPECTS(qv.device.device_type == kDLCUDA && qv.device.device_id == device_, "queries: memory on ",
                    device_text({qv.device.device_type, qv.device.device_id}), ", not on cuda:", device_);
  const MatrixShape shape = check_matrix(qv, kDlFloat32, "float32", "queries");
  SHARDTOPK_EXPECTS(shape.cols == dim_, "queries have dimension ", shape.cols, " but the index has dimension ", dim_);
  const std::int64_t batch = shape.rows;
  const auto* q = static_cast<const float*>(qt->data());
  // Every piece admitted (k, rows, filter) before the answers are allocated; the values are
  // checked on the device.
  std::vector<SearchBatch> pieces;
  if (batch == 0) check_k(k_in, k_max_, k_rows_);
  else admit_pieces(batch, [&](std::int64_t off, int n, const FilterProgram* const* filters) {
    return index_->admit_device(q + off * dim_, reinterpret_cast<void*>(s), n, k_in, filters);
  }, filter, &pieces);
  const int k = static_cast<int>(k_in);

  std::unique_ptr<ImportedTensor> out_ids, out_scores;
  std::shared_ptr<DeviceBlock> ids_block, scores_block;
  std::int64_t* ids = nullptr;
  float* scores = nullptr;
  py::object out_i, out_s;
  if (!out.is_none()) {
    std::tie(out_i, out_s) = out_pair(out);
    const auto check_out = [&](const ImportedTensor& t, DLDataType dt, const char* dt_name, const char* what) {
      const DLTensor& x = t.tensor();
      SHARDTOPK_EXPECTS(x.device.device_type == kDLCUDA && x.device.device_id == device_, what, " must be on cuda:",
                        device_, " like the queries, got ", device_text({x.device.device_type, x.device.device_id}));
      const MatrixShape os = check_matrix(x, dt, dt_name, what);
      SHARDTOPK_EXPECTS(x.ndim == 2 && os.rows == batch && os.cols == k, what, " must have shape [", batch, ", ", k,
                        "] ([batch, k]), got [", (x.ndim == 2 ? std::to_string(os.rows) + ", " : ""), os.cols, "]");
    };
    out_ids = take(out_i, "out[0] (ids)");
    check_out(*out_ids, kDlInt64, "int64", "out[0] (ids)");
    out_scores = take(out_s, "out[1] (scores)");
    check_out(*out_scores, kDlFloat32, "float32", "out[1] (scores)");
    ids = static_cast<std::int64_t*>(out_ids->data());
    scores = static_cast<float*>(out_scores->data());
  } else {
    const auto n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(k);
    const std::shared_ptr<void> owner = keep_alive(stream_owner);
    ids_block = std::make_shared<DeviceBlock>(device_, n * sizeof(std::int64_t), s, owner);
    scores_block = std::make_shared<DeviceBlock>(device_, n * sizeof(float), s, owner);
    ids = static_cast<std::int64_t*>(ids_block->data());
    scores = static_cast<float*>(scores_block->data());
  }
  if (from_torch) order_streams(device_, torch_queries ? torch_stream : torch->stream(device_), s);
  if (batch > 0) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    require_open("search()");
    in_pieces(batch, [&](std::int64_t off, int, std::size_t piece) {
      index_->search_async(pieces[piece], ids + off * k, scores + off * k);
    });
  }
  if (!out.is_none()) return py::make_tuple(out_i, out_s);
  return py::make_tuple(py::cast(DeviceArray(ids_block, batch, k, kDlInt64)),
                        py::cast(DeviceArray(scores_block, batch, k, kDlFloat32)));
}

}  // namespace shardtopk::python
