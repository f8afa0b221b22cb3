// data/crc32c.h — CRC-32C (Castagnoli), the checksum of the record files.
//
// Uses the SSE4.2 crc32 instruction on three interleaved streams when the
// compiler targets it, a table-driven loop otherwise. crc32c("123456789") is
// 0xE3069283.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ember::data {

// CRC of n bytes, continuing from a previous CRC (0 to start).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The same with tables only (no SSE4.2): what CPUs without it run, and the
// tests' reference for the hardware path.
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc = 0);

}  // namespace ember::data
