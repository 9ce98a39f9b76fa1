#pragma once
// DLPack in and out (https://dmlc.github.io/dlpack/latest/python_spec.html):
//   ImportedTensor  takes a producer's tensor (torch, CuPy, JAX, numpy) through
//                   obj.__dlpack__(stream=...), the exchange that orders the producer's pending
//                   work before the consumer's stream;
//   DeviceArray     the module's answers in device memory, which any consumer takes through
//                   its own from_dlpack (or __cuda_array_interface__).

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "device.hpp"

namespace shardtopk::python {

namespace py = pybind11;

/// What obj.__dlpack_device__() answers: a DLDeviceType and the device's ordinal.
struct DlDevice {
  int type = kDLCPU;
  int id = 0;
};

/// obj.__dlpack_device__(), or nullopt when obj has no such method. @throws Error when it
/// answers something that is not (int, int).
std::optional<DlDevice> dlpack_device_of(py::handle obj);

/// "cpu", "cuda:1", "cuda_host:0", ... for messages.
std::string device_text(const DlDevice& d);

/// The value of __dlpack__'s `stream` argument for a stream handle (0, the legacy default
/// stream, is spelled 1 there: 0 is not allowed).
inline long long dlpack_stream_arg(StreamHandle s) { return s == 0 ? 1 : static_cast<long long>(s); }

/// A tensor taken from its producer: obj.__dlpack__(stream=stream) (stream left out when
/// nullopt, as for host memory). Owns the producer's DLManagedTensor and calls its deleter when
/// destroyed, which must happen with the GIL held (numpy's deleter touches Python objects).
class ImportedTensor {
 public:
  /// obj.__dlpack__(stream=stream), the exchange of the protocol (the producer orders its
  /// pending work on obj before `stream`). @param what names the argument in messages
  /// ("queries", "out[0] (ids)"). @throws Error when the answer is not a "dltensor" capsule.
  static std::unique_ptr<ImportedTensor> exchange(py::handle obj, std::optional<long long> stream,
                                                  const std::string& what);
  /// A "dltensor" capsule already made (e.g. by torch's to_dlpack); the caller orders the
  /// producer's work. @throws Error when it is not one.
  static std::unique_ptr<ImportedTensor> from_capsule(py::handle capsule, const std::string& what);
  ~ImportedTensor();
  ImportedTensor(const ImportedTensor&) = delete;
  ImportedTensor& operator=(const ImportedTensor&) = delete;

  const DLTensor& tensor() const { return managed_->dl_tensor; }
  /// data + byte_offset.
  void* data() const;

 private:
  ImportedTensor() = default;
  DLManagedTensor* managed_ = nullptr;
};

/// Shape of a row-major matrix view: [rows, cols], or a 1-D [cols] read as one row.
struct MatrixShape {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  bool one_d = false;
};

/// Checks that `t` is a 1-D or 2-D C-contiguous (row-major, rows packed) array of element type
/// `want` (named `want_name` in messages) and returns its shape. @throws Error naming `what`,
/// the element type, the number of dimensions or the strides found.
MatrixShape check_matrix(const DLTensor& t, DLDataType want, const char* want_name, const std::string& what);

constexpr DLDataType kDlFloat32{kDLFloat, 32, 1};
constexpr DLDataType kDlInt64{kDLInt, 64, 1};

/// Answers [rows, cols] in device memory owned by the module (a DeviceBlock), written by work
/// queued on `stream`. Exported to other libraries through __dlpack__ (the consumer's stream is
/// made to wait for `stream` first) and __cuda_array_interface__ (which names `stream`).
class DeviceArray {
 public:
  DeviceArray(std::shared_ptr<DeviceBlock> block, std::int64_t rows, std::int64_t cols, DLDataType dtype);

  /// __dlpack__(stream=None, max_version=None, dl_device=None, copy=None): a "dltensor" capsule.
  py::capsule dlpack(py::object stream, py::object max_version, py::object dl_device, py::object copy) const;
  /// __dlpack_device__(): (kDLCUDA, device).
  py::tuple dlpack_device() const;
  /// __cuda_array_interface__ (version 3).
  py::dict cuda_array_interface() const;
  /// A host copy as a numpy array (waits for the stream).
  py::object numpy() const;

  py::tuple shape() const;
  std::string dtype_name() const;
  int device() const { return block_->device(); }
  std::uintptr_t ptr() const { return reinterpret_cast<std::uintptr_t>(block_->data()); }
  StreamHandle stream() const { return block_->stream(); }
  std::int64_t rows() const { return rows_; }
  std::string repr() const;

 private:
  std::shared_ptr<DeviceBlock> block_;
  std::int64_t rows_ = 0, cols_ = 0;
  DLDataType dtype_{};
};

/// Registers DeviceArray in module `m`.
void bind_device_array(py::module_& m);

}  // namespace shardtopk::python
