// net/mxnet_params.cpp — the NDArray list format of net/mxnet_params.h.
#include "net/mxnet_params.h"

#include <cstring>
#include <set>

#include "engine/bfloat16.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/half.h"

namespace ember::net {
namespace {

constexpr uint32_t kArrayV2 = 0xF993fac9, kArrayV3 = 0xF993faca;
constexpr uint64_t kMaxElements = uint64_t(1) << 40;

// A bounds-checked little-endian cursor over the file's bytes.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& name) : data_(data), size_(size), name_(name) {}
  template <typename T>
  T get(const std::string& what) {
    EMBER_CHECK(size_ - pos_ >= sizeof(T), name_, ": truncated at byte ", pos_, " reading ", what, " (", size_ - pos_,
                " bytes left, ", sizeof(T), " needed)");
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const uint8_t* take(uint64_t n, const std::string& what) {
    EMBER_CHECK(size_ - pos_ >= n, name_, ": truncated at byte ", pos_, ": ", what, " needs ", n, " bytes, ",
                size_ - pos_, " left");
    const uint8_t* p = data_ + pos_;
    pos_ += size_t(n);
    return p;
  }
  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }

 private:
  const uint8_t* data_;
  size_t size_, pos_ = 0;
  const std::string& name_;
};

struct DtypeInfo {
  const char* name;
  size_t bytes;
  bool floating;
};

DtypeInfo dtype_info(int32_t flag) {
  switch (flag) {
    case 0: return {"float32", 4, true};
    case 1: return {"float64", 8, true};
    case 2: return {"float16", 2, true};
    case 3: return {"uint8", 1, false};
    case 4: return {"int32", 4, false};
    case 5: return {"int8", 1, false};
    case 6: return {"int64", 8, false};
    case 7: return {"bool", 1, false};
    case 12: return {"bfloat16", 2, true};
  }
  return {nullptr, 0, false};
}

MxnetArray read_array(Cursor& c, const std::string& what) {
  MxnetArray a;
  const uint32_t magic = c.get<uint32_t>(what + " magic");
  EMBER_CHECK(magic == kArrayV2 || magic == kArrayV3, what, ": array magic 0x", std::hex, magic, std::dec,
              " is not MXNet's V2/V3 NDArray format (files of MXNet before 1.0 are not read)");
  const int32_t storage = c.get<int32_t>(what + " storage type");
  EMBER_CHECK(storage == 0, what, ": storage type ", storage, " is a sparse array (only dense arrays are read)");
  const int32_t ndim = c.get<int32_t>(what + " ndim");
  const bool empty = magic == kArrayV2 ? ndim == 0 : ndim == -1;
  EMBER_CHECK(empty || (ndim >= 0 && ndim <= 32), what, ": ndim ", ndim, " is out of range");
  if (empty) return a;
  uint64_t elements = 1;
  for (int32_t d = 0; d < ndim; ++d) {
    const int64_t v = c.get<int64_t>(what + " shape");
    EMBER_CHECK(v >= 0 && uint64_t(v) <= kMaxElements, what, ": dimension ", d, " is ", v);
    a.shape.push_back(v);
    elements *= uint64_t(v);
    EMBER_CHECK(elements <= kMaxElements, what, ": more than 2^40 elements");
  }
  (void)c.get<int32_t>(what + " device type");
  (void)c.get<int32_t>(what + " device id");
  const int32_t flag = c.get<int32_t>(what + " dtype");
  const DtypeInfo info = dtype_info(flag);
  EMBER_CHECK(info.name, what, ": unknown dtype flag ", flag);
  a.stored_dtype = info.name;
  EMBER_CHECK(elements * info.bytes <= c.left(), what, ": ", elements, " ", info.name, " elements (",
              elements * info.bytes, " bytes) but only ", c.left(), " bytes are left in the file");
  const uint8_t* p = c.take(elements * info.bytes, what + " data");
  EMBER_CHECK(info.floating, what, ": dtype ", info.name, " is not a floating-point parameter");
  a.values.resize(size_t(elements));
  if (elements == 0) return a;  // a dimension of 0: no data (and no pointers to copy through)
  if (flag == 0) {
    std::memcpy(a.values.data(), p, size_t(elements) * 4);
  } else if (flag == 1) {
    for (uint64_t i = 0; i < elements; ++i) {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      a.values[size_t(i)] = float(v);
    }
  } else {
    std::vector<uint16_t> bits(static_cast<size_t>(elements));
    std::memcpy(bits.data(), p, size_t(elements) * 2);
    if (flag == 2)
      half_to_float_n(bits.data(), a.values.data(), bits.size());
    else
      bf16_to_float_n(bits.data(), a.values.data(), bits.size());
  }
  return a;
}

}  // namespace

std::vector<MxnetArray> parse_mxnet_params(const uint8_t* data, size_t size, const std::string& name) {
  Cursor c(data, size, name);
  const uint64_t magic = c.get<uint64_t>("the header");
  EMBER_CHECK(magic == kMxnetListMagic, name, ": not an MXNet parameter file (starts with 0x", std::hex, magic,
              std::dec, ", not the NDArray list magic 0x112)");
  (void)c.get<uint64_t>("the reserved field");
  const uint64_t count = c.get<uint64_t>("the array count");
  // Each array takes at least 16 bytes: a count beyond that is a lie.
  EMBER_CHECK(count <= c.left() / 16, name, ": claims ", count, " arrays in ", c.left(), " bytes");
  std::vector<MxnetArray> arrays;
  arrays.reserve(size_t(count));
  for (uint64_t i = 0; i < count; ++i) arrays.push_back(read_array(c, cat(name, ": array ", i)));
  const uint64_t names = c.get<uint64_t>("the name count");
  EMBER_CHECK(names == 0 || names == count, name, ": ", names, " names for ", count, " arrays");
  std::set<std::string> seen;
  for (uint64_t i = 0; i < names; ++i) {
    const uint64_t length = c.get<uint64_t>(cat("the length of name ", i));
    EMBER_CHECK(length <= c.left(), name, ": name ", i, " claims ", length, " bytes, ", c.left(), " left");
    const uint8_t* p = c.take(length, cat("name ", i));
    arrays[size_t(i)].name.assign(reinterpret_cast<const char*>(p), size_t(length));
    EMBER_CHECK(seen.insert(arrays[size_t(i)].name).second, name, ": the name '",
                arrays[size_t(i)].name.substr(0, 80), "' appears twice");
  }
  EMBER_CHECK(c.left() == 0, name, ": ", c.left(), " bytes after the last name");
  return arrays;
}

std::vector<MxnetArray> read_mxnet_params(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  return parse_mxnet_params(bytes.data(), bytes.size(), path);
}

bool is_mxnet_params_file(const std::string& path) {
  FileReader r(path);
  if (r.size() < 8) return false;
  uint64_t magic = 0;
  r.read_at(0, &magic, 8);
  return magic == kMxnetListMagic;
}

std::vector<uint8_t> serialize_mxnet_params(const std::vector<MxnetArray>& arrays, const std::string& name) {
  std::set<std::string> seen;
  size_t bytes = 32;
  for (const MxnetArray& a : arrays) {
    EMBER_CHECK(!a.name.empty() && seen.insert(a.name).second, name, ": parameter name '", a.name,
                "' is empty or repeated");
    uint64_t elements = 1;
    for (int64_t d : a.shape) elements *= uint64_t(d);
    EMBER_CHECK(!a.shape.empty() && elements == a.values.size(), name, ": ", a.name, " has ", a.values.size(),
                " values for its shape");
    bytes += 32 + 8 * a.shape.size() + 4 * a.values.size() + 8 + a.name.size();
  }
  std::vector<uint8_t> out;
  out.reserve(bytes);
  const auto put_bytes = [&](const void* p, size_t n) {
    const size_t at = out.size();
    out.resize(at + n);
    if (n > 0) std::memcpy(out.data() + at, p, n);
  };
  const auto put = [&](auto v) { put_bytes(&v, sizeof v); };
  put(kMxnetListMagic);
  put(uint64_t(0));
  put(uint64_t(arrays.size()));
  for (const MxnetArray& a : arrays) {
    put(kArrayV2);
    put(int32_t(0));  // dense
    put(int32_t(a.shape.size()));
    for (int64_t d : a.shape) put(d);
    put(int32_t(1));  // the CPU
    put(int32_t(0));
    put(int32_t(0));  // f32
    put_bytes(a.values.data(), a.values.size() * 4);
  }
  put(uint64_t(arrays.size()));
  for (const MxnetArray& a : arrays) {
    put(uint64_t(a.name.size()));
    put_bytes(a.name.data(), a.name.size());
  }
  return out;
}

void write_mxnet_params(const std::string& path, const std::vector<MxnetArray>& arrays) {
  const std::vector<uint8_t> bytes = serialize_mxnet_params(arrays, path);
  write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace ember::net
