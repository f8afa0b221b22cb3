// data/crc32c.h — CRC-32C (Castagnoli), the checksum of the record files.
//
// Uses the SSE4.2 crc32 instruction when the compiler targets it (8 bytes
// per instruction), a table-driven loop otherwise. crc32c("123456789") is
// 0xE3069283.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ember::data {

// CRC of n bytes, continuing from a previous CRC (0 to start).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace ember::data
