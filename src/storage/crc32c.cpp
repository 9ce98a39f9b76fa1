#include "storage/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace shardtopk::storage {
namespace {

constexpr std::uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

// Slicing-by-8 tables: t[0] is the classic byte table, t[k][b] advances t[k-1][b] by one zero byte.
struct Tables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  Tables() {
    for (std::uint32_t b = 0; b < 256; ++b) {
      std::uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][b] = c;
    }
    for (std::uint32_t b = 0; b < 256; ++b)
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
};

const Tables& tables() {
  static const Tables tb;
  return tb;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t extend_sse42(std::uint32_t crc, const unsigned char* p,
                                                             std::size_t n) {
  std::uint64_t c = ~crc;
  for (; n > 0 && (reinterpret_cast<std::uintptr_t>(p) & 7u) != 0; --n, ++p)
    c = _mm_crc32_u8(static_cast<std::uint32_t>(c), *p);
  // Three independent streams would hide the instruction's latency; one stream already runs
  // at several GB/s, far above what the log writes, so the simple loop stays.
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(static_cast<std::uint32_t>(c), *p);
  return ~static_cast<std::uint32_t>(c);
}
#endif

bool detect_hardware() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

}  // namespace

std::uint32_t crc32c_extend_portable(std::uint32_t crc, const void* data, std::size_t n) {
  const auto& t = tables().t;
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint32_t lo, hi;
    std::memcpy(&lo, p, 4);  // little-endian hosts only (the log format is little-endian)
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xFFu] ^ t[6][(lo >> 8) & 0xFFu] ^ t[5][(lo >> 16) & 0xFFu] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFFu] ^ t[2][(hi >> 8) & 0xFFu] ^ t[1][(hi >> 16) & 0xFFu] ^ t[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ t[0][(c ^ *p) & 0xFFu];
  return ~c;
}

bool crc32c_hardware() {
  static const bool hw = detect_hardware();
  return hw;
}

std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t n) {
#if defined(__x86_64__)
  if (crc32c_hardware()) return extend_sse42(crc, static_cast<const unsigned char*>(data), n);
#endif
  return crc32c_extend_portable(crc, data, n);
}

}  // namespace shardtopk::storage
