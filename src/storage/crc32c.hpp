#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, as iSCSI, ext4 and SSE4.2's crc32
// instruction compute it): the checksum of every log record and segment header. Internal header.
#include <cstddef>
#include <cstdint>

namespace shardtopk::storage {

/// CRC-32C of `n` bytes at `data`, continuing from `crc` (the value returned for the bytes
/// before them; 0 to start). crc32c_extend(crc32c_extend(0, a), b) == CRC-32C of a ‖ b.
/// Uses the SSE4.2 instruction where the CPU has it, else an 8-way table (same results).
std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t n);

/// CRC-32C of `n` bytes at `data`.
inline std::uint32_t crc32c(const void* data, std::size_t n) { return crc32c_extend(0, data, n); }

/// The table implementation alone (tests compare it with the hardware one).
std::uint32_t crc32c_extend_portable(std::uint32_t crc, const void* data, std::size_t n);

/// Whether crc32c_extend uses the CPU's instruction.
bool crc32c_hardware();

}  // namespace shardtopk::storage
