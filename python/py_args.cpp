// Argument conversion for the Python module (py_args.hpp).
#include "py_args.hpp"

#include "py_index.hpp"
#include <dlfcn.h>
#include <mpi.h>
#include <pybind11/numpy.h>
#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>
#include <set>
#include <vector>
#include "core/log.hpp"
#include "core/parse.hpp"
#include "dlpack_io.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/config.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/ingest.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/shard_plan.hpp"

namespace shardtopk::python {

py::module_ numpy() { return py::module_::import("numpy"); }

std::string type_name(py::handle o) { return py::str(py::type::of(o).attr("__name__")); }

/// An integer argument (int, numpy integer; not bool, not float), or nullopt when it does not
/// fit a long long (the caller names the range).
std::optional<long long> integer_arg(py::handle v, const char* name) {
  SHARDTOPK_EXPECTS(!PyBool_Check(v.ptr()), name, " must be an integer, got bool");
  PyObject* i = PyNumber_Index(v.ptr());
  if (!i) {
    PyErr_Clear();
    throw Error(detail::concat(name, " must be an integer, got ", type_name(v), " ", std::string(py::repr(v))));
  }
  py::object io = py::reinterpret_steal<py::object>(i);
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(io.ptr(), &overflow);
  if (overflow != 0) return std::nullopt;
  return x;
}

/// A config value as the YAML/--set text the config parser reads.
std::string override_value(py::handle v, const std::string& key) {
  if (PyBool_Check(v.ptr())) return v.ptr() == Py_True ? "true" : "false";
  if (PyLong_Check(v.ptr())) return py::str(v);
  if (PyFloat_Check(v.ptr())) return py::repr(v);  // round-trips
  if (PyUnicode_Check(v.ptr())) return v.cast<std::string>();
  if (py::hasattr(v, "__fspath__")) return py::str(py::module_::import("os").attr("fspath")(v));
  if (PyList_Check(v.ptr()) || PyTuple_Check(v.ptr())) {
    std::string joined;
    for (py::handle item : v) joined += (joined.empty() ? "" : ",") + override_value(item, key);
    return joined;
  }
  throw Error(detail::concat("override ", key, "=", std::string(py::repr(v)), ": not a config value (str, int, float, "
                             "bool, or a list of str)"));
}

/// A keyword that is neither an argument of the call nor a config key (config keys are dotted:
/// engine__threads): "Index.open(): unknown keyword argument 'metrc'; did you mean
/// 'search__metric'?", the nearest of the call's arguments (as module.cpp declares them), else
/// the config key whose last part is nearest.
std::string unknown_keyword(const std::string& name, bool from_arrays) {
  const std::string call = from_arrays ? "Index.from_arrays()" : "Index.open()";
  const std::vector<std::string> args =
      from_arrays ? std::vector<std::string>{"vectors", "ids", "metric", "dtype", "k_max", "batch_max", "backend",
                                             "attributes"}
                  : std::vector<std::string>{"config_path"};
  std::string near = closest_name(name, args);
  if (near.empty()) {
    std::vector<std::string> keys, leaves;
    for (const std::string& k : config_keys())
      if (k != "service.threads" && !(from_arrays && k.rfind("corpus.", 0) == 0)) {
        keys.push_back(k);
        leaves.push_back(k.substr(k.find('.') + 1));
      }
    const std::string leaf = closest_name(name, leaves);
    for (std::size_t i = 0; i < keys.size() && near.empty(); ++i)
      if (leaves[i] == leaf) near = keys[i].replace(keys[i].find('.'), 1, "__");
  }
  std::string all;
  for (const std::string& a : args) all += (all.empty() ? "" : ", ") + a;
  return call + ": unknown keyword argument '" + name + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?") +
         " (its arguments: " + all + "; config keys as engine__threads=2 or **{'engine.threads': 2}, docs/CONFIG.md)";
}

/// Keyword overrides: engine__backend="cpu" is engine.backend=cpu; dotted names come through
/// **{"engine.backend": "cpu"}. Checked as the config file and --set are; a name that is no
/// config key's shape (no dot) is an unknown keyword argument (TypeError, as Python's own).
void apply_overrides(Config& cfg, const py::kwargs& overrides, bool from_arrays) {
  for (auto item : overrides) {
    std::string key = py::str(item.first);
    for (std::size_t p = key.find("__"); p != std::string::npos; p = key.find("__", p + 1)) key.replace(p, 2, ".");
    if (key.find('.') == std::string::npos) throw py::type_error(unknown_keyword(key, from_arrays));
    SHARDTOPK_EXPECTS(!from_arrays || key.rfind("corpus.", 0) != 0, "override ", key,
                      ": from_arrays takes its rows from `vectors`; corpus.* keys are for Index.open");
    apply_override(cfg, key + "=" + override_value(item.second, key));
  }
}

/// The config's deprecation messages as FutureWarnings (the command line prints them).
void warn(const Config& cfg) {
  for (const std::string& w : cfg.warnings)
    if (PyErr_WarnEx(PyExc_FutureWarning, w.c_str(), 2) != 0) throw py::error_already_set();
}

/// stream=: an int (a cudaStream_t handle; 0 = the legacy default stream) or an object with
/// .cuda_stream (torch.cuda.Stream) or .ptr (cupy.cuda.Stream).
StreamHandle stream_handle(py::handle s) {
  py::object h;
  if (PyLong_Check(s.ptr()) && !PyBool_Check(s.ptr())) h = py::reinterpret_borrow<py::object>(s);
  else if (py::hasattr(s, "cuda_stream")) h = s.attr("cuda_stream");
  else if (py::hasattr(s, "ptr")) h = s.attr("ptr");
  SHARDTOPK_EXPECTS(h && PyLong_Check(h.ptr()), "stream= takes an int (a cudaStream_t handle, 0 for the legacy default "
                    "stream) or an object with .cuda_stream (torch.cuda.Stream) or .ptr (cupy.cuda.Stream); got ",
                    type_name(s));
  const long long v = h.cast<long long>();
  SHARDTOPK_EXPECTS(v >= 0, "stream=", v, " is not a CUDA stream handle");
  return static_cast<StreamHandle>(v);
}


const TorchApi* torch_api() {
  static TorchApi api;
  static bool found = false;
  if (found) return &api;
  PyObject* mod = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed; no import
  if (!mod) return nullptr;
  py::module_ torch = py::reinterpret_borrow<py::module_>(mod);
  if (!py::hasattr(torch, "Tensor") || !py::hasattr(torch, "cuda")) return nullptr;  // torch still importing
  const auto keep = [](py::object o) { return o.release(); };  // a reference held for good
  py::object c = torch.attr("_C");
  api.tensor = keep(torch.attr("Tensor"));
  api.to_dlpack = keep(py::hasattr(c, "_to_dlpack") ? py::object(c.attr("_to_dlpack"))
                                                     : py::module_::import("torch.utils.dlpack").attr("to_dlpack"));
  if (py::hasattr(c, "_cuda_getCurrentRawStream")) api.raw_stream = keep(c.attr("_cuda_getCurrentRawStream"));
  api.current_stream = keep(torch.attr("cuda").attr("current_stream"));
  found = true;
  return &api;
}

/// A reference to `o` (nullptr for None or a null object) that may be dropped from any thread:
/// it takes the GIL to release it, and leaves it alone once the interpreter is finalising.
std::shared_ptr<void> keep_alive(const py::object& o) {
  if (!o || o.is_none()) return nullptr;
  PyObject* p = o.ptr();
  Py_INCREF(p);
  return std::shared_ptr<void>(p, [](void* x) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    Py_DECREF(static_cast<PyObject*>(x));
  });
}

/// The producer's current stream on `device`, asked of the library that made `q` (PyTorch,
/// CuPy); the legacy default stream for any other producer (JAX orders its own work before any
/// stream it is handed).
/// `owner`: set to the stream's Python object when there is one (CuPy's current stream).
StreamHandle producer_stream(py::handle q, int device, py::object* owner) {
  if (const TorchApi* t = torch_api(); t && t->is_tensor(q)) return t->stream(device);
  PyObject* cupy = PyDict_GetItemString(PyImport_GetModuleDict(), "cupy");
  if (cupy) {
    py::module_ cp = py::reinterpret_borrow<py::module_>(cupy);
    if (py::hasattr(cp, "ndarray") && py::isinstance(q, cp.attr("ndarray"))) {
      py::object cuda = cp.attr("cuda");
      py::object dev = cuda.attr("Device")(device);
      dev.attr("__enter__")();  // CuPy's current stream is per device
      py::object current = cuda.attr("get_current_stream")();
      dev.attr("__exit__")(py::none(), py::none(), py::none());
      *owner = current;
      return current.attr("ptr").cast<StreamHandle>();
    }
  }
  return 0;
}

/// A writable C-contiguous numpy array of `dtype` and shape [rows, cols], for out=.
void check_host_out(py::handle a, py::dtype dtype, std::int64_t rows, std::int64_t cols, const char* what) {
  SHARDTOPK_EXPECTS(py::isinstance<py::array>(a), what, " must be a numpy array for host queries, got ", type_name(a));
  py::array arr = py::reinterpret_borrow<py::array>(a);
  SHARDTOPK_EXPECTS(arr.dtype().is(dtype), what, " must be ", std::string(py::str(dtype)), ", got ",
                    std::string(py::str(arr.dtype())));
  SHARDTOPK_EXPECTS(arr.ndim() == 2 && arr.shape(0) == rows && arr.shape(1) == cols, what, " must have shape [", rows,
                    ", ", cols, "] ([batch, k]), got ", std::string(py::str(arr.attr("shape"))));
  SHARDTOPK_EXPECTS((arr.flags() & py::array::c_style) != 0, what, " must be C-contiguous (row-major)");
  SHARDTOPK_EXPECTS(arr.writeable(), what, " is read-only");
}

/// The (ids, scores) of out=: a sequence of two arrays.
std::pair<py::object, py::object> out_pair(py::handle out) {
  bool ok = PyTuple_Check(out.ptr()) || PyList_Check(out.ptr());
  ok = ok && py::len(out) == 2;
  SHARDTOPK_EXPECTS(ok, "out= must be a pair (ids, scores), got ", type_name(out));
  py::sequence s = py::reinterpret_borrow<py::sequence>(out);
  return {s[0], s[1]};
}


/// A list or tuple of Python ints as an int64 array, or a float64 one when `to_float`; None
/// for anything else. numpy reads [1, 2, 2**63] as float64 (rounding what does not fit) and
/// [-2**63 - 1] as objects: such values are refused here by name, as a uint64 array's are.
py::object int_list(py::handle x, const std::string& what, bool to_float) {
  if (!PyList_Check(x.ptr()) && !PyTuple_Check(x.ptr())) return py::none();
  const auto seq = py::reinterpret_borrow<py::sequence>(x);
  if (seq.size() == 0) return py::none();
  for (py::handle v : seq)
    if (!PyLong_Check(v.ptr()) || PyBool_Check(v.ptr())) return py::none();
  std::size_t i = 0;
  for (py::handle v : seq) {
    int overflow = 0;
    const long long ll = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (to_float) {
      bool exact = overflow == 0 && exactly_float64(static_cast<std::int64_t>(ll));
      if (overflow != 0) {
        try {
          exact = py::float_(py::reinterpret_borrow<py::object>(v)).equal(v);  // compared exactly
        } catch (const py::error_already_set&) {  // beyond the float range
          exact = false;
        }
      }
      SHARDTOPK_EXPECTS(exact, what, "[", i, "] = ", std::string(py::str(v)),
                        " is not exactly representable as a float64 (the attribute is float64)");
    } else {
      SHARDTOPK_EXPECTS(overflow == 0, what, ": a value exceeds the int64 range (", std::string(py::str(v)), ")");
    }
    ++i;
  }
  return numpy().attr("asarray")(x, py::arg("dtype") = to_float ? "float64" : "int64");
}

/// attributes=: None or a dict name → 1-D [rows] array of integers (int64) or reals (float64).
/// With `schema` (an upsert into an index), integers for a float64 attribute are converted as
/// numpy's astype(float64) does, and reals for an int64 attribute are refused; names the schema
/// lacks keep their own type (the index names them).
std::vector<AttributeInput> attribute_inputs(py::handle attributes, std::int64_t rows,
                                             const AttributeSchema* schema) {
  std::vector<AttributeInput> out;
  if (attributes.is_none()) return out;
  SHARDTOPK_EXPECTS(PyDict_Check(attributes.ptr()), "attributes must be a dict {name: [rows] values}, got ",
                    type_name(attributes));
  for (auto item : py::reinterpret_borrow<py::dict>(attributes)) {
    SHARDTOPK_EXPECTS(PyUnicode_Check(item.first.ptr()), "attributes: a name must be a str, got ", type_name(item.first));
    AttributeInput a;
    a.name = item.first.cast<std::string>();
    SHARDTOPK_EXPECTS(!a.name.empty(), "attributes: an empty name");
    bool to_float = false;
    if (schema)
      for (const AttributeSpec& s : *schema) to_float = to_float || (s.name == a.name && s.type == AttributeType::kFloat64);
    py::object arr = int_list(item.second, "attributes['" + a.name + "']", to_float);
    if (arr.is_none()) arr = numpy().attr("asarray")(item.second);
    const std::string kind = py::str(arr.attr("dtype").attr("kind"));
    SHARDTOPK_EXPECTS(kind == "i" || kind == "u" || kind == "f" || kind == "b", "attributes['", a.name,
                      "'] must hold integers or reals, got dtype ", std::string(py::str(arr.attr("dtype"))));
    a.type = kind == "f" ? AttributeType::kFloat64 : AttributeType::kInt64;
    if (schema) {
      for (const AttributeSpec& s : *schema) {
        if (s.name != a.name) continue;
        const bool reals = kind == "f" && arr.attr("size").cast<long long>() > 0;
        SHARDTOPK_EXPECTS(!(s.type == AttributeType::kInt64 && reals), "attributes['", a.name, "'] holds reals (dtype ",
                          std::string(py::str(arr.attr("dtype"))), ") but the attribute is int64: pass integers");
        a.type = s.type;
      }
    }
    if (a.type == AttributeType::kInt64 && kind == "u" && arr.attr("dtype").attr("itemsize").cast<int>() == 8)
      SHARDTOPK_EXPECTS(!arr.attr("__gt__")(py::int_(INT64_MAX)).attr("any")().cast<bool>(), "attributes['", a.name,
                        "']: a value exceeds the int64 range");
    // Integers for a float64 attribute: each must be a float64 exactly, as in the filter
    // language (an equality filter would never find a rounded value).
    if (a.type == AttributeType::kFloat64 && (kind == "i" || kind == "u") &&
        arr.attr("dtype").attr("itemsize").cast<int>() == 8) {
      const py::array w = numpy().attr("ascontiguousarray")(arr, py::arg("dtype") = kind == "u" ? "uint64" : "int64");
      for (py::ssize_t i = 0; i < w.size(); ++i) {
        const bool exact = kind == "u" ? exactly_float64(static_cast<const std::uint64_t*>(w.data())[i])
                                       : exactly_float64(static_cast<const std::int64_t*>(w.data())[i]);
        SHARDTOPK_EXPECTS(exact, "attributes['", a.name, "'][", i, "] = ",
                          std::string(py::str(w.attr("__getitem__")(i))),
                          " is not exactly representable as a float64 (the attribute is float64)");
      }
    }
    a.values = numpy().attr("ascontiguousarray")(
        arr, py::arg("dtype") = a.type == AttributeType::kFloat64 ? "float64" : "int64");
    SHARDTOPK_EXPECTS(a.values.ndim() == 1 && a.values.shape(0) == rows, "attributes['", a.name,
                      "'] must be 1-D [rows] with one value per row of vectors (", rows, " rows), got shape ",
                      std::string(py::str(a.values.attr("shape"))));
    out.push_back(std::move(a));
  }
  return out;
}

/// Rows [r.lo, r.hi) of each attribute (no Python calls: runs without the GIL).
std::vector<AttributeColumn> shard_columns(const std::vector<AttributeInput>& attrs, RowRange r) {
  std::vector<AttributeColumn> cols;
  for (const AttributeInput& a : attrs) {
    AttributeColumn c{a.name, a.type, {}, {}};
    if (a.type == AttributeType::kInt64) {
      const auto* v = static_cast<const std::int64_t*>(a.values.data());
      c.ints.assign(v + r.lo, v + r.hi);
    } else {
      const auto* v = static_cast<const double*>(a.values.data());
      c.reals.assign(v + r.lo, v + r.hi);
    }
    cols.push_back(std::move(c));
  }
  return cols;
}

/// filter=: a dict (or list, as the language's JSON), or its JSON text; compiled against the
/// index's attributes. numpy scalars and arrays in it are taken as their Python values.
FilterProgram compile_py_filter(py::handle filter, const AttributeSchema& schema) {
  std::string text;
  if (PyUnicode_Check(filter.ptr())) {
    text = filter.cast<std::string>();
  } else {
    const py::cpp_function as_plain([](py::handle o) -> py::object {
      if (py::hasattr(o, "tolist")) return o.attr("tolist")();  // numpy scalars and arrays
      throw py::type_error("filter: a value of type " + type_name(o) + " is not a JSON value");
    });
    try {
      text = py::module_::import("json")
                 .attr("dumps")(filter, py::arg("allow_nan") = false, py::arg("default") = as_plain)
                 .cast<std::string>();
    } catch (py::error_already_set& e) {
      // The exception's type and message (not its traceback); a RecursionError for nesting
      // far past the language's depth, a ValueError for NaN or infinity.
      const std::string why = std::string(py::str(e.type().attr("__name__"))) + ": " + std::string(py::str(e.value()));
      throw Error("filter: not a JSON value (" + why.substr(0, 200) + ")");
    }
  }
  return parse_filter(text, schema);
}

}  // namespace shardtopk::python
