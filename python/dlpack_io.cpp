// DLPack in (ImportedTensor) and out (DeviceArray); see dlpack_io.hpp.
#include "dlpack_io.hpp"

#include <pybind11/numpy.h>

#include <sstream>
#include <utility>

#include "shardtopk/error.hpp"

namespace shardtopk::python {
namespace {

constexpr const char* kCapsule = "dltensor";
constexpr const char* kUsedCapsule = "used_dltensor";

std::string dtype_text(DLDataType t) {
  std::string base;
  switch (t.code) {
    case kDLInt: base = "int"; break;
    case kDLUInt: base = "uint"; break;
    case kDLFloat: base = "float"; break;
    case kDLBfloat: base = "bfloat"; break;
    case kDLComplex: base = "complex"; break;
    default: base = "type" + std::to_string(static_cast<int>(t.code)) + "_"; break;
  }
  base += std::to_string(static_cast<int>(t.bits));
  if (t.lanes != 1) base += "x" + std::to_string(static_cast<int>(t.lanes));
  return base;
}

bool same_dtype(DLDataType a, DLDataType b) { return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes; }

// What the module's exported tensors keep alive: the memory and the shape array.
struct ExportContext {
  std::shared_ptr<DeviceBlock> block;
  std::int64_t shape[2] = {0, 0};
  DLManagedTensor managed{};
};

// May run without the GIL (a consumer frees its tensor from any thread): touches no Python object.
void delete_export(DLManagedTensor* m) { delete static_cast<ExportContext*>(m->manager_ctx); }

// A capsule nobody consumed still owns its tensor; a consumed one was renamed "used_dltensor".
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsule)) return;
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (m && m->deleter) m->deleter(m);
}

// The consumer's stream named by __dlpack__(stream=...): None is the legacy default stream (the
// protocol's rule), -1 asks for no ordering at all.
std::optional<StreamHandle> consumer_stream(py::handle stream) {
  if (stream.is_none()) return StreamHandle{1};
  if (!PyLong_Check(stream.ptr()))
    throw py::type_error("__dlpack__: stream must be an int or None, got " + std::string(py::str(py::type::of(stream))));
  const long long s = stream.cast<long long>();
  if (s == -1) return std::nullopt;
  if (s < 0) throw py::value_error("__dlpack__: stream " + std::to_string(s) + " is not a CUDA stream");
  return static_cast<StreamHandle>(s);
}

[[noreturn]] void buffer_error(const std::string& what) {
  PyErr_SetString(PyExc_BufferError, what.c_str());
  throw py::error_already_set();
}

}  // namespace

std::optional<DlDevice> dlpack_device_of(py::handle obj) {
  if (!py::hasattr(obj, "__dlpack_device__")) return std::nullopt;
  py::object d = obj.attr("__dlpack_device__")();
  py::tuple t;
  try {
    t = d.cast<py::tuple>();
  } catch (const py::cast_error&) {
  }
  SHARDTOPK_EXPECTS(t && t.size() == 2, "__dlpack_device__() of a ", std::string(py::str(py::type::of(obj))),
                    " answered ", std::string(py::repr(d)), "; expected (device_type, device_id)");
  return DlDevice{py::int_(t[0]).cast<int>(), py::int_(t[1]).cast<int>()};
}

std::string device_text(const DlDevice& d) {
  switch (d.type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda:" + std::to_string(d.id);
    case kDLCUDAHost: return "cuda_host:" + std::to_string(d.id);
    case kDLCUDAManaged: return "cuda_managed:" + std::to_string(d.id);
    case kDLROCM: return "rocm:" + std::to_string(d.id);
    default: return "device type " + std::to_string(d.type) + ":" + std::to_string(d.id);
  }
}

// ------------------------------------------------------------------------------ in

std::unique_ptr<ImportedTensor> ImportedTensor::exchange(py::handle obj, std::optional<long long> stream,
                                                         const std::string& what) {
  py::object cap = stream ? obj.attr("__dlpack__")(py::arg("stream") = *stream) : obj.attr("__dlpack__")();
  SHARDTOPK_EXPECTS(PyCapsule_IsValid(cap.ptr(), kCapsule), what, ": __dlpack__() of a ",
                    std::string(py::str(py::type::of(obj))), " did not answer a \"dltensor\" capsule (got ",
                    std::string(py::repr(cap)), ")");
  return from_capsule(cap, what);
}

std::unique_ptr<ImportedTensor> ImportedTensor::from_capsule(py::handle cap, const std::string& what) {
  SHARDTOPK_EXPECTS(PyCapsule_IsValid(cap.ptr(), kCapsule), what, ": not a \"dltensor\" capsule (got ",
                    std::string(py::repr(cap)), ")");
  std::unique_ptr<ImportedTensor> t(new ImportedTensor());
  t->managed_ = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), kCapsule));
  // Consumed: the capsule's destructor must not free it; this object calls the deleter.
  if (PyCapsule_SetName(cap.ptr(), kUsedCapsule) != 0) {
    t->managed_ = nullptr;
    throw py::error_already_set();
  }
  return t;
}

ImportedTensor::~ImportedTensor() {
  if (managed_ && managed_->deleter) managed_->deleter(managed_);
}

void* ImportedTensor::data() const {
  return static_cast<char*>(managed_->dl_tensor.data) + managed_->dl_tensor.byte_offset;
}

MatrixShape check_matrix(const DLTensor& t, DLDataType want, const char* want_name, const std::string& what) {
  SHARDTOPK_EXPECTS(same_dtype(t.dtype, want), what, " must be ", want_name, ", got ", dtype_text(t.dtype));
  SHARDTOPK_EXPECTS(t.ndim == 1 || t.ndim == 2, what, " must be 1-D [dim] or 2-D [batch, dim], got ", t.ndim, "-D");
  MatrixShape s;
  s.one_d = t.ndim == 1;
  s.rows = s.one_d ? 1 : t.shape[0];
  s.cols = t.shape[t.ndim - 1];
  if (t.strides) {
    const bool rows_packed = s.cols <= 1 || t.strides[t.ndim - 1] == 1;
    const bool rows_adjacent = s.one_d || s.rows <= 1 || t.strides[0] == s.cols;
    if (!rows_packed || !rows_adjacent) {
      std::ostringstream os;
      os << what << " must be C-contiguous (row-major, rows packed), got strides (";
      for (int i = 0; i < t.ndim; ++i) os << (i ? ", " : "") << t.strides[i];
      os << ") elements for shape [" << (s.one_d ? "" : std::to_string(s.rows) + ", ") << s.cols
         << "]; copy it first (numpy.ascontiguousarray, tensor.contiguous(), cupy.ascontiguousarray)";
      throw Error(os.str());
    }
  }
  return s;
}

// ------------------------------------------------------------------------------ out

DeviceArray::DeviceArray(std::shared_ptr<DeviceBlock> block, std::int64_t rows, std::int64_t cols, DLDataType dtype)
    : block_(std::move(block)), rows_(rows), cols_(cols), dtype_(dtype) {}

py::capsule DeviceArray::dlpack(py::object stream, py::object max_version, py::object dl_device,
                                py::object copy) const {
  (void)max_version;  // a DLPack 0.x capsule, which every version's consumers take
  if (!dl_device.is_none()) {
    const py::tuple d = dl_device.cast<py::tuple>();
    if (d.size() != 2 || d[0].cast<int>() != kDLCUDA || d[1].cast<int>() != device())
      buffer_error("__dlpack__: this array lives on cuda:" + std::to_string(device()) + ", not on " +
                   std::string(py::repr(dl_device)));
  }
  if (!copy.is_none() && copy.cast<bool>())
    buffer_error("__dlpack__: copy=True is not supported (the array lives on cuda:" + std::to_string(device()) + ")");
  if (const std::optional<StreamHandle> consumer = consumer_stream(stream))
    order_streams(device(), block_->stream(), *consumer);

  auto ctx = std::make_unique<ExportContext>();
  ctx->block = block_;
  ctx->shape[0] = rows_;
  ctx->shape[1] = cols_;
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = block_->data();
  t.device = DLDevice{kDLCUDA, device()};
  t.ndim = 2;
  t.dtype = dtype_;
  t.shape = ctx->shape;
  t.strides = nullptr;  // compact, row-major
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = delete_export;
  PyObject* cap = PyCapsule_New(&ctx->managed, kCapsule, capsule_destructor);
  if (!cap) throw py::error_already_set();
  ctx.release();  // owned by the capsule now (then by its consumer)
  return py::reinterpret_steal<py::capsule>(cap);
}

py::tuple DeviceArray::dlpack_device() const { return py::make_tuple(static_cast<int>(kDLCUDA), device()); }

py::dict DeviceArray::cuda_array_interface() const {
  py::dict d;
  d["shape"] = shape();
  d["typestr"] = dtype_.code == kDLInt ? "<i8" : "<f4";
  d["data"] = py::make_tuple(ptr(), false);
  d["version"] = 3;
  d["strides"] = py::none();
  d["stream"] = static_cast<long long>(dlpack_stream_arg(block_->stream()));
  return d;
}

py::object DeviceArray::numpy() const {
  py::array out = dtype_.code == kDLInt ? py::array(py::dtype::of<std::int64_t>(), {rows_, cols_})
                                        : py::array(py::dtype::of<float>(), {rows_, cols_});
  void* dst = out.mutable_data();
  const std::size_t bytes = static_cast<std::size_t>(rows_ * cols_) * (dtype_.bits / 8);
  {
    py::gil_scoped_release nogil;
    copy_to_host(device(), dst, block_->data(), bytes, block_->stream());
  }
  return out;
}

py::tuple DeviceArray::shape() const { return py::make_tuple(rows_, cols_); }

std::string DeviceArray::dtype_name() const { return dtype_text(dtype_); }

std::string DeviceArray::repr() const {
  return "shardtopk.DeviceArray(shape=(" + std::to_string(rows_) + ", " + std::to_string(cols_) +
         "), dtype=" + dtype_name() + ", device=cuda:" + std::to_string(device()) + ", stream=" +
         std::to_string(block_->stream()) + ")";
}

void bind_device_array(py::module_& m) {
  py::class_<DeviceArray>(m, "DeviceArray", R"doc(
An answer in device memory: ids int64 or scores float32, shape [batch, k], row-major, on the
index's GPU, written by work queued on the stream the search ran on (``stream``).

Hand it to any DLPack consumer: ``torch.from_dlpack(a)``, ``cupy.from_dlpack(a)``,
``jax.dlpack.from_dlpack(a)``. The consumer's current stream is made to wait for the search
first (no host synchronisation). ``__cuda_array_interface__`` (version 3, naming the stream) is
there for Numba and older CuPy. The memory returns to the module's pool, in the order of
``stream``, when the last holder lets go; another stream that still uses it must be ordered
after that (as with PyTorch's caching allocator: ``tensor.record_stream`` is not available
for imported memory, so synchronise instead).
)doc")
      .def("__dlpack__", &DeviceArray::dlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
           "DLPack export: a \"dltensor\" capsule. ``stream``: the consumer's stream (None: the legacy "
           "default stream; -1: no ordering), made to wait for this array's stream first.")
      .def("__dlpack_device__", &DeviceArray::dlpack_device, "(2, device): CUDA memory of GPU ``device``.")
      .def_property_readonly("__cuda_array_interface__", &DeviceArray::cuda_array_interface)
      .def("numpy", &DeviceArray::numpy,
           "A host copy as a numpy array; waits for the stream (the only method that does).")
      .def_property_readonly("shape", &DeviceArray::shape, "(batch, k)")
      .def_property_readonly("dtype", &DeviceArray::dtype_name, "'int64' (ids) or 'float32' (scores)")
      .def_property_readonly("device", &DeviceArray::device, "CUDA device ordinal")
      .def_property_readonly("ptr", &DeviceArray::ptr, "device address of element [0, 0]")
      .def_property_readonly("stream", &DeviceArray::stream,
                             "cudaStream_t handle (int) of the stream that writes the array (0: legacy default)")
      .def("__len__", &DeviceArray::rows)
      .def("__repr__", &DeviceArray::repr);
}

}  // namespace shardtopk::python
