// Stored float values into the reader's row format, checked on the way: a fast pass that
// converts and flags a run, and a scan of a flagged run for its first bad value.
#include "io/value_convert.hpp"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define STK_X86 1
#endif

#include "core/half.hpp"

namespace shardtopk::io_detail {
namespace {

// Largest float32 magnitude (as bits of |x|) that the output format/storage keeps finite:
// half::to_f16 overflows from 65520 up, half::to_bf16 from 0x7F7F8000 up (round to nearest even).
constexpr std::uint32_t kF32Inf = 0x7F800000u;
constexpr std::uint32_t kF16Limit = 0x477FF000u;   // 65520.0f
constexpr std::uint32_t kBF16Limit = 0x7F7F8000u;  // 3.3961e38

// Returns true when some |bits| >= lim (vectorises: a compare and an OR per value).
inline bool any_at_least(const std::uint32_t* u, size_t n, std::uint32_t lim) {
  std::uint32_t flag = 0;
  for (size_t i = 0; i < n; ++i)
    flag |= static_cast<std::uint32_t>(static_cast<std::int32_t>(u[i] & 0x7FFFFFFFu) >= static_cast<std::int32_t>(lim));
  return flag != 0;
}
inline bool any_f16_nonfinite(const std::uint16_t* h, size_t n) {
  std::uint16_t flag = 0;
  for (size_t i = 0; i < n; ++i)
    flag |= static_cast<std::uint16_t>(static_cast<std::int16_t>(h[i] & 0x7FFF) >= static_cast<std::int16_t>(0x7C00));
  return flag != 0;
}

RunBad find_f32(const float* x, size_t n, const Limit& lim) {
  RunBad b;
  for (size_t i = 0; i < n; ++i) {
    const std::uint32_t a = half::bits(x[i]) & 0x7FFFFFFFu;
    if (a >= kF32Inf) return {static_cast<std::ptrdiff_t>(i), Fault::kNonFinite, x[i]};
    if (a >= lim.bits) return {static_cast<std::ptrdiff_t>(i), Fault::kOutOfRange, x[i], lim.type, lim.max};
  }
  return b;
}

// float16 bits -> float32.
#ifdef STK_X86
// Converts and checks in one pass; returns true when some value is Inf/NaN (exponent all ones).
__attribute__((target("avx,f16c"))) bool f16_to_f32_f16c(const std::uint16_t* h, float* f, size_t n) {
  size_t i = 0;
  const __m128i exp = _mm_set1_epi16(0x7C00);
  __m128i bad = _mm_setzero_si128();
  for (; i + 8 <= n; i += 8) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i));
    bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(x, exp), exp));
    _mm256_storeu_ps(f + i, _mm256_cvtph_ps(x));
  }
  bool any = _mm_movemask_epi8(bad) != 0;
  for (; i < n; ++i) {
    any |= (h[i] & 0x7C00) == 0x7C00;
    f[i] = half::from_f16(h[i]);
  }
  return any;
}
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* f, std::uint16_t* h, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(f + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) h[i] = half::to_f16(f[i]);
}
// F16C from CPUID (leaf 1, ECX bit 29): clang 14 has no __builtin_cpu_supports("f16c"); AVX
// (which also checks that the OS saves the YMM registers) from the builtin.
const bool kHaveF16c = [] {
  __builtin_cpu_init();  // this may run before libgcc's own constructor
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0 && __builtin_cpu_supports("avx");
}();
#else
const bool kHaveF16c = false;
#endif

// Returns true when some value is Inf/NaN (then `f` is unspecified). `f16c`: the caller's
// ReadOptions::f16c and the CPU both allow F16C.
bool f16_to_f32(const std::uint16_t* h, float* f, size_t n, bool f16c) {
#ifdef STK_X86
  if (f16c) return f16_to_f32_f16c(h, f, n);
#else
  (void)f16c;
#endif
  if (any_f16_nonfinite(h, n)) return true;
  // Exact table conversion (the same values as half::from_f16).
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (std::uint32_t i = 0; i < 65536; ++i) t[i] = half::from_f16(static_cast<std::uint16_t>(i));
    return t;
  }();
  for (size_t i = 0; i < n; ++i) f[i] = table[h[i]];
  return false;
}

void f32_to_f16(const float* f, std::uint16_t* h, size_t n, bool f16c) {
#ifdef STK_X86
  if (f16c) return f32_to_f16_f16c(f, h, n);
#else
  (void)f16c;
#endif
  for (size_t i = 0; i < n; ++i) h[i] = half::to_f16(f[i]);
}

}  // namespace

Limit limit_for(RowFormat f, Dtype storage) {
  if (f == RowFormat::kFloat16Bits || storage == Dtype::kFloat16) return {kF16Limit, "float16", 65504.0};
  if (storage == Dtype::kBFloat16) return {kBF16Limit, "bfloat16", static_cast<double>(half::from_bf16(0x7F7F))};
  return {};
}

bool cpu_has_f16c() { return kHaveF16c; }

void f16_bits_to_f32(const std::uint16_t* h, float* f, size_t n, bool f16c) {
  // The portable path leaves `f` unset when some value is not finite: then value by value.
  if (f16_to_f32(h, f, n, f16c && kHaveF16c))
    for (size_t i = 0; i < n; ++i) f[i] = half::from_f16(h[i]);
}

RunBad convert_run(Elem e, const void* src, RowFormat fmt, void* dst, size_t n, const Limit& lim, float* scratch,
                   bool f16c) {
  if (e == Elem::kF32) {
    const float* x = static_cast<const float*>(src);
    if (any_at_least(reinterpret_cast<const std::uint32_t*>(x), n, lim.bits)) return find_f32(x, n, lim);
    if (fmt == RowFormat::kFloat32) {
      if (dst != src) std::memcpy(dst, src, n * 4);
    } else {
      f32_to_f16(x, static_cast<std::uint16_t*>(dst), n, f16c);
    }
    return {};
  }
  if (e == Elem::kF16) {
    const std::uint16_t* h = static_cast<const std::uint16_t*>(src);
    // every finite float16 fits float32 and bfloat16 (65504 < 3.39e38)
    const bool bad = fmt == RowFormat::kFloat32 ? f16_to_f32(h, static_cast<float*>(dst), n, f16c) : any_f16_nonfinite(h, n);
    if (bad) {
      for (size_t i = 0; i < n; ++i)
        if ((h[i] & 0x7C00) == 0x7C00) return {static_cast<std::ptrdiff_t>(i), Fault::kNonFinite, half::from_f16(h[i])};
    }
    if (fmt == RowFormat::kFloat16Bits && dst != src) std::memcpy(dst, src, n * 2);
    return {};
  }
  // float64: every value must be finite and within float32, then within the output's limit.
  const double* x = static_cast<const double*>(src);
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    if (!std::isfinite(v)) return {static_cast<std::ptrdiff_t>(i), Fault::kNonFinite, v};
    const float f = static_cast<float>(v);
    if (std::isinf(f)) return {static_cast<std::ptrdiff_t>(i), Fault::kOutOfRange, v, "float32", FLT_MAX};
    if ((half::bits(f) & 0x7FFFFFFFu) >= lim.bits)
      return {static_cast<std::ptrdiff_t>(i), Fault::kOutOfRange, v, lim.type, lim.max};
    if (fmt == RowFormat::kFloat32) static_cast<float*>(dst)[i] = f;
    else scratch[i] = f;
  }
  if (fmt == RowFormat::kFloat16Bits) f32_to_f16(scratch, static_cast<std::uint16_t*>(dst), n, f16c);
  return {};
}

}  // namespace shardtopk::io_detail
