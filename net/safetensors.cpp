// net/safetensors.cpp — safetensors writer (reference layout, atomic file
// write) and a validating reader for untrusted files. See net/safetensors.h.
// A file that is not safetensors at all is named by what its first bytes say
// it is: "X is not a safetensors checkpoint (it looks like a JPEG image)".
#include "net/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <new>
#include <set>

#include "engine/file_io.h"
#include "net/json.h"

namespace ember {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  int rank;  // the reference writer puts higher ranks first (its Dtype enum order: ... F16, BF16, I32, ...)
};
constexpr DTypeInfo kDTypes[] = {
    {DType::i64, "I64", 6}, {DType::f64, "F64", 5},  {DType::f32, "F32", 4}, {DType::i32, "I32", 3},
    {DType::bf16, "BF16", 2}, {DType::f16, "F16", 1}, {DType::u8, "U8", 0},
};

const DTypeInfo& info_of(DType t) {
  for (const DTypeInfo& d : kDTypes)
    if (d.dtype == t) return d;
  fail(cat("safetensors: dtype ", dtype_name(t), " has no safetensors name"));
}

using json::shown;

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

void put_u64_le(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}

// ---------------------------------------------------------------- writing

using Sink = std::function<void(const void*, size_t)>;

void write_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata, const Sink& sink) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    EMBER_CHECK(name != "__metadata__", "save_safetensors: \"__metadata__\" is reserved, not a tensor name");
    EMBER_CHECK(seen.insert(name).second, "save_safetensors: duplicate tensor name ", shown(name));
    EMBER_CHECK(t.defined(), "save_safetensors: tensor ", shown(name), " is undefined");
    info_of(t.dtype());
  }
  // The reference layout: descending dtype alignment, then name.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int ra = info_of(tensors[a].second.dtype()).rank, rb = info_of(tensors[b].second.dtype()).rank;
    if (ra != rb) return ra > rb;
    return tensors[a].first < tensors[b].first;
  });

  json::Object header;
  if (!metadata.empty()) {
    json::Object meta;
    for (const auto& [k, v] : metadata) meta.emplace_back(k, json::Value(v));
    header.emplace_back("__metadata__", json::Value(std::move(meta)));
  }
  int64_t offset = 0;
  for (size_t i : order) {
    const Tensor& t = tensors[i].second;
    json::Array shape;
    for (int64_t d : t.shape()) shape.emplace_back(d);
    const int64_t end = offset + int64_t(t.nbytes());
    json::Object entry;
    entry.emplace_back("dtype", json::Value(info_of(t.dtype()).name));
    entry.emplace_back("shape", json::Value(std::move(shape)));
    entry.emplace_back("data_offsets", json::Value(json::Array{json::Value(offset), json::Value(end)}));
    header.emplace_back(tensors[i].first, json::Value(std::move(entry)));
    offset = end;
  }
  std::string text = json::write(json::Value(std::move(header)));
  text.append((8 - text.size() % 8) % 8, ' ');

  uint8_t len[8];
  put_u64_le(len, text.size());
  sink(len, 8);
  sink(text.data(), text.size());
  for (size_t i : order) {
    const Tensor host = tensors[i].second.to(Device::cpu()).contiguous_host();  // files hold logical order
    if (host.nbytes() > 0) sink(host.raw_data(), host.nbytes());
  }
}

// ---------------------------------------------------------------- reading

// What a file that is not safetensors looks like, from its first bytes
// (nullptr: nothing known). Only asked once the file failed to parse, and
// never for bytes that go on like a safetensors file (its JSON header starts
// at byte 8 with '{'), so a damaged checkpoint is not called an image.
const char* foreign_file_kind(const uint8_t* head, size_t n) {
  if (n > 8 && head[8] == '{') return nullptr;
  struct Signature {
    const char* bytes;
    size_t length, offset;
    const char* kind;
  };
  static constexpr Signature kSignatures[] = {
      {"\xff\xd8\xff", 3, 0, "a JPEG image"},
      {"\x89PNG\r\n\x1a\n", 8, 0, "a PNG image"},
      {"GIF8", 4, 0, "a GIF image"},
      {"WEBP", 4, 8, "a WebP image"},
      {"II*\0", 4, 0, "a TIFF image"},
      {"MM\0*", 4, 0, "a TIFF image"},
      {"BM", 2, 0, "a BMP image"},
      {"PK\x03\x04", 4, 0, "a zip archive, as torch.save writes .pt/.pth files: save the state_dict with "
                            "safetensors.torch.save_file"},
      {"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46", 8, 0, "a legacy torch.save file: save the state_dict with "
                                                   "safetensors.torch.save_file"},
      {"\x89HDF\r\n\x1a\n", 8, 0, "an HDF5 file"},
      {"\x1f\x8b", 2, 0, "a gzip file"},
      {"EMBERREC", 8, 0, "an ember record file (.erec): record files are --data-train / --data-val"},
      {"\x0a\x23\xd7\xce", 4, 0, "an MXNet RecordIO file"},
      {"\x12\x01\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16, 0, "an MXNet .params file"},
  };
  for (const Signature& s : kSignatures)
    if (n >= s.offset + s.length && std::memcmp(head + s.offset, s.bytes, s.length) == 0) return s.kind;
  return nullptr;
}

// Where the bytes come from: a file (pread) or memory. read() is only called
// with ranges already checked against size.
struct Source {
  std::string name;
  uint64_t size = 0;
  std::function<void(uint64_t offset, void* dst, size_t n)> read;
};

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> dims;
  uint64_t begin = 0, end = 0;
};

class Reader {
 public:
  explicit Reader(const Source& src) : src_(src) {}

  SafetensorsFile read() {
    head_size_ = size_t(std::min<uint64_t>(src_.size, sizeof head_));
    if (head_size_ > 0) src_.read(0, head_, head_size_);
    if (src_.size < 8) not_safetensors(cat("file is ", src_.size, " bytes, too short for the 8-byte header length"));
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(head_[i]) << (8 * i);
    if (n > kSafetensorsMaxHeader)
      not_safetensors(cat("header length ", n, " exceeds the limit of ", kSafetensorsMaxHeader,
                          " bytes (is this a safetensors file?)"));
    if (n > src_.size - 8)
      not_safetensors(cat("header length ", n, " points past the end of the file (", src_.size,
                          " bytes): truncated, or not a safetensors file"));
    std::string text(size_t(n), '\0');
    src_.read(8, text.data(), text.size());
    data_start_ = 8 + n;
    data_size_ = src_.size - data_start_;

    json::Value root;
    try {
      // Bound the memory a hostile header can make the parser use (about
      // 40 bytes per value); a real header needs ~14 values per tensor.
      json::ParseLimits limits;
      limits.max_values = 4'000'000;
      root = json::parse(text, limits);
    } catch (const Error& e) {
      not_safetensors(cat("header is not valid JSON: ", e.what()));
    }
    if (!root.is_object()) not_safetensors(cat("header is a JSON ", json::type_name(root.type()), ", not an object"));

    SafetensorsFile out;
    std::vector<Entry> entries;
    for (const auto& [key, value] : root.as_object()) {
      if (key == "__metadata__")
        read_metadata(value, out.metadata);
      else
        entries.push_back(read_entry(key, value));
    }
    check_coverage(entries);

    for (const Entry& e : entries) {
      Tensor t;
      try {
        t = Tensor::empty(Shape(e.dims), e.dtype);
      } catch (const std::bad_alloc&) {
        error(cat("tensor ", shown(e.name), ": cannot allocate ", e.end - e.begin, " bytes"));
      }
      if (e.end > e.begin) {
        src_.read(data_start_ + e.begin, t.raw_data(), size_t(e.end - e.begin));
      }
      out.tensors.emplace_back(e.name, std::move(t));
    }
    return out;
  }

 private:
  [[noreturn]] void error(const std::string& what) const { fail(cat(src_.name, ": ", what)); }
  // The file's start is not a safetensors header: "X is not a safetensors
  // checkpoint (it looks like a JPEG image)" when its first bytes say what it
  // is, else error(what).
  [[noreturn]] void not_safetensors(const std::string& what) const {
    if (const char* kind = foreign_file_kind(head_, head_size_))
      fail(cat(src_.name, " is not a safetensors checkpoint (it looks like ", kind, ")"));
    error(what);
  }
  [[noreturn]] void tensor_error(const std::string& name, const std::string& what) const {
    error(cat("tensor ", shown(name), ": ", what));
  }

  void read_metadata(const json::Value& value, std::map<std::string, std::string>& metadata) const {
    if (value.is_null()) return;
    if (!value.is_object())
      error(cat("\"__metadata__\" is a JSON ", json::type_name(value.type()), ", not an object"));
    for (const auto& [k, v] : value.as_object()) {
      if (!v.is_string())
        error(cat("\"__metadata__\" value of ", shown(k), " is a JSON ", json::type_name(v.type()),
                  ", not a string"));
      metadata.emplace(k, v.as_string());
    }
  }

  const json::Value& field(const std::string& name, const json::Value& entry, const char* key) const {
    const json::Value* v = entry.find(key);
    if (!v) tensor_error(name, cat("missing \"", key, "\""));
    return *v;
  }

  Entry read_entry(const std::string& name, const json::Value& value) const {
    if (!value.is_object()) tensor_error(name, cat("entry is a JSON ", json::type_name(value.type()), ", not an object"));
    Entry e;
    e.name = name;

    const json::Value& dtype = field(name, value, "dtype");
    if (!dtype.is_string())
      tensor_error(name, cat("\"dtype\" is a JSON ", json::type_name(dtype.type()), ", not a string"));
    const DTypeInfo* info = nullptr;
    for (const DTypeInfo& d : kDTypes)
      if (dtype.as_string() == d.name) info = &d;
    if (!info)
      tensor_error(name, cat("dtype ", shown(dtype.as_string()),
                             " is not supported (ember reads F32, F64, F16, BF16, I32, I64, U8)"));
    e.dtype = info->dtype;
    const char* stored = e.dtype == DType::bf16 ? "BF16" : dtype_name(e.dtype);  // as the messages always said
    const uint64_t element_bytes = uint64_t(dtype_size(e.dtype));

    const json::Value& shape = field(name, value, "shape");
    if (!shape.is_array()) tensor_error(name, cat("\"shape\" is a JSON ", json::type_name(shape.type()), ", not an array"));
    for (const json::Value& d : shape.as_array())
      if (!d.is_int()) tensor_error(name, cat("\"shape\" holds a JSON ", json::type_name(d.type()), ", not an integer"));
    if (shape.as_array().size() > size_t(Shape::kMaxDims))
      tensor_error(name, cat("shape has ", shape.as_array().size(), " dimensions, ember supports at most ",
                             Shape::kMaxDims));
    for (const json::Value& d : shape.as_array()) e.dims.push_back(d.as_int());
    for (int64_t d : e.dims)
      if (d < 0) tensor_error(name, cat("shape ", dims_str(e.dims), " has a negative dimension"));
    uint64_t numel = 1;
    for (int64_t d : e.dims)
      if (__builtin_mul_overflow(numel, uint64_t(d), &numel) || numel > uint64_t(INT64_MAX))
        tensor_error(name, cat("shape ", dims_str(e.dims), " has too many elements (more than 2^63 - 1)"));
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, element_bytes, &nbytes))
      tensor_error(name, cat("shape ", dims_str(e.dims), " ", stored, " needs more bytes than fit in 64 bits"));

    const json::Value& offsets = field(name, value, "data_offsets");
    const bool pair = offsets.is_array() && offsets.as_array().size() == 2 && offsets.as_array()[0].is_int() &&
                      offsets.as_array()[1].is_int();
    if (!pair) tensor_error(name, "\"data_offsets\" is not an array [begin, end] of two integers");
    const int64_t b = offsets.as_array()[0].as_int(), en = offsets.as_array()[1].as_int();
    const std::string shown = cat("data_offsets [", b, ", ", en, "]");
    if (b < 0 || en < 0) tensor_error(name, cat(shown, " are negative"));
    if (b > en) tensor_error(name, cat(shown, " have begin > end"));
    e.begin = uint64_t(b);
    e.end = uint64_t(en);
    if (e.end > data_size_)
      tensor_error(name, cat(shown, " go past the end of the data section (", data_size_, " bytes)"));
    if (e.end - e.begin != nbytes)
      tensor_error(name, cat(shown, " hold ", e.end - e.begin, " bytes, shape ", dims_str(e.dims), " ",
                             stored, " needs ", nbytes));
    return e;
  }

  // The tensors must tile the data section exactly, as the reference reader requires.
  void check_coverage(const std::vector<Entry>& entries) const {
    std::vector<const Entry*> sorted;
    for (const Entry& e : entries) sorted.push_back(&e);
    std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t cursor = 0;
    const Entry* prev = nullptr;
    for (const Entry* e : sorted) {
      if (e->begin < cursor)
        tensor_error(e->name, cat("data_offsets [", e->begin, ", ", e->end, "] overlap tensor ", shown(prev->name),
                                  " [", prev->begin, ", ", prev->end, "]"));
      if (e->begin > cursor)
        error(cat("bytes [", cursor, ", ", e->begin, ") of the data section belong to no tensor (before tensor ",
                  shown(e->name), ")"));
      cursor = e->end;
      prev = e;
    }
    if (cursor != data_size_)
      error(cat("bytes [", cursor, ", ", data_size_, ") at the end of the data section belong to no tensor"));
  }

  const Source& src_;
  uint8_t head_[16] = {};  // the file's first bytes (fewer in a shorter file), for not_safetensors
  size_t head_size_ = 0;
  uint64_t data_start_ = 0;
  uint64_t data_size_ = 0;
};

}  // namespace

const char* safetensors_dtype_name(DType t) { return info_of(t).name; }

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

std::vector<uint8_t> serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  std::vector<uint8_t> out;
  write_safetensors(tensors, metadata, [&](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, [&](FileWriter& w) {
    write_safetensors(tensors, metadata, [&](const void* p, size_t n) { w.write(p, n); });
  });
}

SafetensorsFile load_safetensors(const std::string& path) {
  FileReader file(path);
  Source src{path, file.size(), [&](uint64_t off, void* dst, size_t n) { file.read_at(off, dst, n); }};
  return Reader(src).read();
}

SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& name) {
  Source src{name, size, [&](uint64_t off, void* dst, size_t n) {
               // Ranges are checked by the reader; check again so a bug cannot read out of bounds.
               EMBER_CHECK(off <= size && n <= size - off, name, ": internal error: read past the buffer");
               if (n) std::memcpy(dst, data + off, n);
             }};
  return Reader(src).read();
}

}  // namespace ember
