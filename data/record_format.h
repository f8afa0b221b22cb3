// data/record_format.h — the on-disk structures of ember's record files
// (data/FORMAT.md is the specification), with their sizes checked.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ember::data {

inline constexpr char kRecordFileMagic[8] = {'E', 'M', 'B', 'E', 'R', 'R', 'E', 'C'};
inline constexpr uint32_t kRecordFormatVersion = 1;
inline constexpr uint32_t kRecordMagic = 0x31524345;  // "ECR1" little-endian
inline constexpr uint32_t kFlagComplete = 1u;
inline constexpr uint64_t kRecordAlign = 64;

enum class Encoding : uint32_t { jpeg = 1, png = 2, raw = 3, other = 4 };
enum class LabelType : uint32_t { class_index = 0, f32_vector = 1 };

#pragma pack(push, 1)
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t flags;
  uint64_t record_count;
  uint64_t index_offset;
  uint64_t index_length;
  uint32_t index_crc;
  uint32_t meta_crc;
  uint64_t meta_offset;
  uint64_t meta_length;
  uint32_t label_width;
  uint32_t label_type;
  uint32_t num_classes;
  uint32_t packer_resize;
  uint32_t packer_quality;
  uint32_t packer_channels;
  uint64_t created_unix;
  char packer[32];
  uint8_t reserved[124];
  uint32_t header_crc;  // of bytes [0, 252)
};

struct RecordHeader {
  uint32_t magic;
  uint32_t header_crc;  // of bytes [8, 64)
  uint64_t id;
  int64_t label;
  uint64_t payload_length;
  uint32_t height;
  uint32_t width;
  uint32_t channels;
  uint32_t encoding;
  uint32_t payload_crc;  // of the label values and the payload
  uint32_t extra_label_bytes;
  uint8_t reserved[8];
};

struct IndexEntry {
  uint64_t offset;
  uint64_t payload_length;
  int64_t label;
  uint32_t height;
  uint32_t width;
};
#pragma pack(pop)

static_assert(sizeof(FileHeader) == 256, "FileHeader must be 256 bytes (data/FORMAT.md)");
static_assert(sizeof(RecordHeader) == 64, "RecordHeader must be 64 bytes");
static_assert(sizeof(IndexEntry) == 32, "IndexEntry must be 32 bytes");
static_assert(offsetof(FileHeader, header_crc) == 252);
static_assert(offsetof(FileHeader, packer) == 96);
static_assert(offsetof(RecordHeader, payload_crc) == 48);

inline uint64_t align_up(uint64_t x, uint64_t a = kRecordAlign) { return (x + a - 1) / a * a; }

}  // namespace ember::data
