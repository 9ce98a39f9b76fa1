// shardtopk.Index (py_index.hpp): writes (upsert, remove, remove_matching, snapshot) and the
// rank of given ids (rank_of); construction and search are in py_index.cpp.
#include "py_index.hpp"

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

// ------------------------------------------------------------------------------ updates

namespace {

/// ids=: 1-D integers [n] (numpy, a list, ...) as a C-contiguous int64 array. `write`: empty
/// is refused here; otherwise (rank_of) it comes back empty, for the index to name the range.
py::array id_array(py::handle ids, bool write = true) {
  py::object a = int_list(ids, "ids", false);
  if (a.is_none()) a = numpy().attr("asarray")(ids);
  // Empty is refused as empty, whatever dtype numpy gave it ([] is float64).
  if (!write && a.attr("size").cast<long long>() == 0) return py::array_t<std::int64_t>(0);
  SHARDTOPK_EXPECTS(a.attr("size").cast<long long>() > 0, "ids is empty: a write needs at least one id");
  const std::string kind = py::str(a.attr("dtype").attr("kind"));
  SHARDTOPK_EXPECTS(kind == "i" || kind == "u", "ids must be integers, got dtype ", std::string(py::str(a.attr("dtype"))));
  SHARDTOPK_EXPECTS(a.attr("ndim").cast<int>() == 1, "ids must be 1-D [n], got shape ",
                    std::string(py::str(a.attr("shape"))));
  if (kind == "u" && a.attr("dtype").attr("itemsize").cast<int>() == 8)
    SHARDTOPK_EXPECTS(!a.attr("__gt__")(py::int_(INT64_MAX)).attr("any")().cast<bool>(),
                      "ids: a value exceeds the int64 range");
  py::array out = numpy().attr("ascontiguousarray")(a, py::arg("dtype") = "int64");
  SHARDTOPK_EXPECTS(out.shape(0) >= 1, "ids is empty: a write needs at least one id");
  return out;
}

py::dict write_answer(const char* key, const WriteResult& r) {
  py::dict d;
  d[key] = r.rows;
  d["seq"] = r.seq;
  return d;
}

}  // namespace

void PyIndex::require_driver(const char* call) const {
  require_open(call);
  SHARDTOPK_EXPECTS(rank_ == 0, call, " runs on rank 0, which drives the index; rank ", rank_, " of ", world_,
                    " calls follow() (or close()) instead");
}

py::dict PyIndex::upsert(py::object ids, py::object vectors, py::object attributes) {
  require_driver("upsert()");
  const py::array id = id_array(ids);
  const std::int64_t n = id.shape(0);
  if (const std::optional<DlDevice> d = dlpack_device_of(vectors))
    SHARDTOPK_EXPECTS(d->type == kDLCPU, "vectors are on ", device_text(*d),
                      "; upsert takes host arrays (tensor.cpu(), cupy.asnumpy(a))");
  py::object arr = numpy().attr("asarray")(vectors);
  const std::string kind = py::str(arr.attr("dtype").attr("kind"));
  SHARDTOPK_EXPECTS(kind == "f" || kind == "i" || kind == "u", "vectors must hold real numbers, got dtype ",
                    std::string(py::str(arr.attr("dtype"))));
  const py::array v = numpy().attr("ascontiguousarray")(arr, py::arg("dtype") = "float32");
  SHARDTOPK_EXPECTS(v.ndim() == 2 && v.shape(0) == n && v.shape(1) == dim_, "vectors must be [n, dim] = [", n, ", ",
                    dim_, "] (one row per id), got shape ", std::string(py::str(v.attr("shape"))));
  const std::vector<AttributeInput> attrs = attribute_inputs(attributes, n, &attributes_);
  UpsertRows rows;
  rows.rows = n;
  rows.ids = static_cast<const std::int64_t*>(id.data());
  rows.vectors = static_cast<const float*>(v.data());
  for (const AttributeInput& a : attrs) rows.attributes.push_back(AttributeColumnView{a.name, a.type, a.values.data()});
  return write_answer("upserted", write("upsert()", [&] { return index_->upsert(rows); }));
}

py::dict PyIndex::remove(py::object ids) {
  require_driver("remove()");
  const py::array id = id_array(ids);
  const auto* ids_in = static_cast<const std::int64_t*>(id.data());
  const std::int64_t n = id.shape(0);
  return write_answer("deleted", write("remove()", [&] { return index_->remove(ids_in, n); }));
}

py::dict PyIndex::remove_matching(py::object filter) {
  require_driver("remove_matching()");
  SHARDTOPK_EXPECTS(!filter.is_none(), "remove_matching() needs a filter (to delete every row: {\"all\": []})");
  const FilterProgram program = compile_py_filter(filter, attributes_);
  return write_answer("deleted", write("remove_matching()", [&] { return index_->remove_matching(program); }));
}

py::dict PyIndex::snapshot() {
  require_driver("snapshot()");
  SnapshotResult r;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    require_open("snapshot()");
    r = index_->snapshot();
  }
  py::dict d;
  d["path"] = r.path;
  d["seq"] = r.seq;
  d["rows"] = r.rows;
  return d;
}

py::tuple PyIndex::rank_of(py::object query, py::object ids, py::object filter) {
  require_driver("rank_of()");
  py::array q = py::isinstance<py::array>(query) ? py::reinterpret_borrow<py::array>(query)
                                                 : py::array(numpy().attr("asarray")(query, py::arg("dtype") = "float32"));
  SHARDTOPK_EXPECTS(q.dtype().is(py::dtype::of<float>()), "query must be float32, got ", std::string(py::str(q.dtype())),
                    " (convert with query.astype(numpy.float32))");
  SHARDTOPK_EXPECTS((q.ndim() == 1 || (q.ndim() == 2 && q.shape(0) == 1)) && q.shape(q.ndim() - 1) == dim_,
                    "query must be one vector [dim] = [", dim_, "], got shape ", std::string(py::str(q.attr("shape"))));
  SHARDTOPK_EXPECTS((q.flags() & py::array::c_style) != 0,
                    "query must be C-contiguous; copy it first (numpy.ascontiguousarray)");
  const py::array id = id_array(ids, /*write=*/false);
  const std::int64_t n = id.shape(0);
  std::optional<FilterProgram> program;
  if (!filter.is_none()) program = compile_py_filter(filter, attributes_);
  py::array_t<std::int64_t> ranks(n);
  py::array_t<float> scores(n);
  const auto* qv = static_cast<const float*>(q.data());
  const auto* iv = static_cast<const std::int64_t*>(id.data());
  std::int64_t* rv = ranks.mutable_data();
  float* sv = scores.mutable_data();
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    require_open("rank_of()");
    index_->rank(qv, iv, static_cast<int>(std::min<std::int64_t>(n, INT_MAX)), program ? &*program : nullptr, rv, sv);
  }
  return py::make_tuple(ranks, scores);
}

}  // namespace shardtopk::python
