#pragma once
// Conversions between float32 and the storage types of the CUDA engine's kernels, and the
// normalisation arithmetic of normalize_rows() (device code).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "shardtopk/types.hpp"

namespace shardtopk::cuda_detail {

__device__ __forceinline__ float to_float(float x) { return x; }

template <typename T>
__device__ __forceinline__ T storage_from_float(float x);
template <>
__device__ __forceinline__ float storage_from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half storage_from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 storage_from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/// float32 → TF32 (round to nearest, ties away; the low 13 mantissa bits zero).
__device__ __forceinline__ float to_tf32(float x) {
  std::uint32_t u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
  return __uint_as_float(u);
}

/// The batched GEMM's output type for storage type T: float16 shards write __half (half the
/// bytes per chunk), the others float.
template <typename T>
using GemmOut = typename std::conditional<std::is_same<T, __half>::value, __half, float>::type;

/// ‖x‖ of x [dim] with normalize_rows()' arithmetic (src/engine/normalize.cpp): the float64 sum
/// of squares in column order, with _rn intrinsics so that nvcc cannot contract the multiply-add
/// into an FMA the host does not use, then the correctly rounded square root.
__device__ __forceinline__ double norm_f64(const float* x, std::int64_t dim) {
  double ss = 0.0;
  for (std::int64_t d = 0; d < dim; ++d) {
    const double v = static_cast<double>(x[d]);
    ss = __dadd_rn(ss, __dmul_rn(v, v));
  }
  return __dsqrt_rn(ss);
}

template <typename T>
struct TypeTag {
  using type = T;
};

/// Calls f(TypeTag<T>{}) with T the storage type of `d` (float, __half or __nv_bfloat16): the
/// launchers' one switch from a runtime dtype to a kernel instantiation (host code).
template <typename F>
decltype(auto) with_storage_type(Dtype d, F&& f) {
  switch (d) {
    case Dtype::kFloat16: return f(TypeTag<__half>{});
    case Dtype::kBFloat16: return f(TypeTag<__nv_bfloat16>{});
    case Dtype::kFloat32: break;
  }
  return f(TypeTag<float>{});
}

}  // namespace shardtopk::cuda_detail
