// net/safetensors.h — checkpoints in the safetensors format (Hugging Face).
//
// Layout: u64 little-endian header length N, N bytes of JSON header
// {"__metadata__":{"k":"v",...}, "name":{"dtype":"F32","shape":[..],
// "data_offsets":[begin,end]}, ...} padded with spaces to a multiple of 8,
// then the raw little-endian tensor bytes; offsets are relative to the end
// of the header. Files are laid out as the reference writer does (tensors
// sorted by descending dtype alignment, then by name; compact JSON) and
// written with write_file_atomic, so PyTorch/timm read them as they are.
//
// Loading treats the file as untrusted: every length and offset is checked
// before it is used, and the data section must be covered exactly by the
// tensors (no gaps, no overlaps), as the reference reader requires. Errors
// are one-line ember::Errors starting with the file path. Fields of a tensor
// entry other than dtype/shape/data_offsets are ignored, as the reference
// reader does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace ember {

// Largest header accepted (the reference implementation's limit).
constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

// Writes tensors (any device; copied to the host) and string metadata.
// Names must be unique and not "__metadata__". dtypes: f32 F32, f64 F64,
// f16 F16, bf16 BF16, i32 I32, i64 I64, u8 U8; reading gives the same
// dtypes back (a BF16 tensor of timm or Hugging Face is a bf16 tensor).
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // CPU tensors, in header order
  std::map<std::string, std::string> metadata;
  const Tensor* find(const std::string& name) const;  // nullptr if absent
};

SafetensorsFile load_safetensors(const std::string& path);
// The same parser over bytes in memory; `name` starts error messages.
SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& name = "<memory>");

// The bytes save_safetensors writes, without touching the disk.
std::vector<uint8_t> serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                           const std::map<std::string, std::string>& metadata = {});

// "F32" for DType::f32, ...
const char* safetensors_dtype_name(DType t);

}  // namespace ember
