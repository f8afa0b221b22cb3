// net/mxnet_params.h — MXNet's parameter files (.params: mx.nd.save,
// Module.save_checkpoint's prefix-EEEE.params, Gluon's save_parameters),
// read and written. net/mxnet_resnet.h maps their names to ember's ResNets.
//
// The layout (src/ndarray/ndarray.cc, NDArray::Save of a named list), all
// little-endian:
//   u64 0x112 (the list magic) | u64 reserved (0)
//   u64 count | count arrays | u64 count | count names (u64 length, bytes)
// An array (format V2, 0xF993fac9; V3, 0xF993faca, is the same with
// NumPy shape semantics: ndim -1 is "unknown", 0 a scalar):
//   u32 magic | i32 storage type (0: dense; sparse arrays are refused)
//   | i32 ndim | ndim x i64 dims
//   (nothing more for an empty array: V2 ndim 0, V3 ndim -1)
//   | i32 device type | i32 device id | i32 dtype | the elements
// dtypes: 0 f32, 1 f64, 2 f16, 3 u8, 4 i32, 5 i8, 6 i64, 12 bf16; the
// floating ones are read (as f32). The file is untrusted: every count and
// size is checked against what is left, and errors are one line starting
// with the path (and the array's index or name).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ember::net {

inline constexpr uint64_t kMxnetListMagic = 0x112;

struct MxnetArray {
  std::string name;  // "" when the file has no names
  std::vector<int64_t> shape;
  std::vector<float> values;  // row-major
  std::string stored_dtype;   // "float32", "float16", ... as the file held it
};

// Reads every array of an NDArray list file. A file whose names are absent
// (a plain list) gives empty names; otherwise there is one name per array.
std::vector<MxnetArray> read_mxnet_params(const std::string& path);
// The same over bytes in memory; `name` starts error messages.
std::vector<MxnetArray> parse_mxnet_params(const uint8_t* data, size_t size, const std::string& name);

// True when the file starts with the list magic (an MXNet .params file).
bool is_mxnet_params_file(const std::string& path);

// Writes f32 arrays, format V2 on the CPU device, as MXNet 1.x's mx.nd.save
// does; atomically (engine/file_io.h). Names must be unique and non-empty;
// errors start with `path`.
void write_mxnet_params(const std::string& path, const std::vector<MxnetArray>& arrays);
// The bytes write_mxnet_params writes.
std::vector<uint8_t> serialize_mxnet_params(const std::vector<MxnetArray>& arrays, const std::string& name);

}  // namespace ember::net
