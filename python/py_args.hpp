// Argument conversion for the Python module (py_index.cpp): keyword overrides, streams, out=,
// attributes and filters given as Python objects, PyTorch's and CuPy's entry points.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "device.hpp"
#include "shardtopk/config.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/shard_plan.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::python {

namespace py = pybind11;

py::module_ numpy();

/// The Python type name of `o`, for messages.
std::string type_name(py::handle o);

/// PyTorch's own entry points, once torch is imported: the tensor type, its C++ export to a
/// DLPack capsule (to_dlpack: without __dlpack__'s Python-level checks and stream handling,
/// which cost several microseconds a call; this module orders the streams itself, as
/// __dlpack__ would) and its current raw stream. Kept for the life of the process.
struct TorchApi {
  py::handle tensor, to_dlpack, raw_stream, current_stream;
  /// torch's current stream on `device` (a cudaStream_t handle).
  StreamHandle stream(int device) const {
    if (raw_stream) return raw_stream(device).cast<StreamHandle>();
    return current_stream(device).attr("cuda_stream").cast<StreamHandle>();
  }
  bool is_tensor(py::handle o) const { return PyObject_IsInstance(o.ptr(), tensor.ptr()) == 1; }
};

/// One attribute of from_arrays(attributes=...): its name and all rows' values, as numpy holds them.
struct AttributeInput {
  std::string name;
  AttributeType type = AttributeType::kInt64;
  py::array values;  // [rows] int64 or float64, C-contiguous
};

/// An integer argument (int, numpy integer; not bool, not float), or nullopt when it does not
/// fit a long long (the caller names the range).
std::optional<long long> integer_arg(py::handle v, const char* name);

/// A config value as the YAML/--set text the config parser reads.
std::string override_value(py::handle v, const std::string& key);

/// A keyword that is neither an argument of the call nor a config key (config keys are dotted:
/// engine__threads): "Index.open(): unknown keyword argument 'metrc'; did you mean
/// 'search__metric'?", the nearest of the call's arguments (as module.cpp declares them), else
/// the config key whose last part is nearest.
std::string unknown_keyword(const std::string& name, bool from_arrays);

/// Keyword overrides: engine__backend="cpu" is engine.backend=cpu; dotted names come through
/// **{"engine.backend": "cpu"}. Checked as the config file and --set are; a name that is no
/// config key's shape (no dot) is an unknown keyword argument (TypeError, as Python's own).
void apply_overrides(Config& cfg, const py::kwargs& overrides, bool from_arrays);

/// The config's deprecation messages as FutureWarnings (the command line prints them).
void warn(const Config& cfg);

/// stream=: an int (a cudaStream_t handle; 0 = the legacy default stream) or an object with
/// .cuda_stream (torch.cuda.Stream) or .ptr (cupy.cuda.Stream).
StreamHandle stream_handle(py::handle s);

/// PyTorch's entry points once torch is imported (nullptr before).
const TorchApi* torch_api();

/// A reference to `o` (nullptr for None or a null object) that may be dropped from any thread:
/// it takes the GIL to release it, and leaves it alone once the interpreter is finalising.
std::shared_ptr<void> keep_alive(const py::object& o);

/// The producer's current stream on `device`, asked of the library that made `q` (PyTorch,
/// CuPy); the legacy default stream for any other producer (JAX orders its own work before any
/// stream it is handed).
/// `owner`: set to the stream's Python object when there is one (CuPy's current stream).
StreamHandle producer_stream(py::handle q, int device, py::object* owner);

/// A writable C-contiguous numpy array of `dtype` and shape [rows, cols], for out=.
void check_host_out(py::handle a, py::dtype dtype, std::int64_t rows, std::int64_t cols, const char* what);

/// The (ids, scores) of out=: a sequence of two arrays.
std::pair<py::object, py::object> out_pair(py::handle out);

/// A list or tuple of Python ints as an int64 array, or a float64 one when `to_float`; None
/// for anything else. numpy reads [1, 2, 2**63] as float64 (rounding what does not fit) and
/// [-2**63 - 1] as objects: such values are refused here by name, as a uint64 array's are.
py::object int_list(py::handle x, const std::string& what, bool to_float);

/// attributes=: None or a dict name → 1-D [rows] array of integers (int64) or reals (float64).
/// With `schema` (an upsert into an index), integers for a float64 attribute are converted as
/// numpy's astype(float64) does, and reals for an int64 attribute are refused; names the schema
/// lacks keep their own type (the index names them).
std::vector<AttributeInput> attribute_inputs(py::handle attributes, std::int64_t rows,
                                             const AttributeSchema* schema = nullptr);

/// Rows [r.lo, r.hi) of each attribute (no Python calls: runs without the GIL).
std::vector<AttributeColumn> shard_columns(const std::vector<AttributeInput>& attrs, RowRange r);

/// filter=: a dict (or list, as the language's JSON), or its JSON text; compiled against the
/// index's attributes. numpy scalars and arrays in it are taken as their Python values.
FilterProgram compile_py_filter(py::handle filter, const AttributeSchema& schema);

}  // namespace shardtopk::python
