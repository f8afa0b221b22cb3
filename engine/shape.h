// engine/shape.h — a tensor's dimensions (up to 8), stored inline.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/error.h"

namespace ember {

class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }

  int ndim() const { return n_; }
  int64_t operator[](int i) const { return d_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return d_[static_cast<size_t>(i)]; }
  // Size of dimension i; negative i counts from the end as in PyTorch.
  int64_t size(int i) const {
    const int j = i < 0 ? i + n_ : i;
    EMBER_CHECK(j >= 0 && j < n_, "dimension ", i, " out of range for shape ", str());
    return d_[static_cast<size_t>(j)];
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < n_; ++i) n *= d_[static_cast<size_t>(i)];
    return n;
  }
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + n_; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  bool operator==(const Shape& o) const {
    if (n_ != o.n_) return false;
    for (int i = 0; i < n_; ++i)
      if (d_[static_cast<size_t>(i)] != o.d_[static_cast<size_t>(i)]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }

  // "[128, 3, 224, 224]"
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < n_; ++i) s += (i ? ", " : "") + std::to_string(d_[static_cast<size_t>(i)]);
    return s + "]";
  }

 private:
  template <typename It>
  void assign(It b, It e) {
    n_ = 0;
    int64_t product = 1;
    for (; b != e; ++b) {
      EMBER_CHECK(n_ < kMaxDims, "a shape has at most ", kMaxDims, " dimensions");
      EMBER_CHECK(*b >= 0, "negative dimension ", *b, " in a shape");
      // numel() must fit in int64 (and its byte size in size_t for any dtype)
      EMBER_CHECK(*b == 0 || product <= (int64_t(1) << 60) / *b, "shape with more than 2^60 elements");
      product = *b == 0 ? 0 : product * *b;
      d_[static_cast<size_t>(n_++)] = *b;
    }
  }
  std::array<int64_t, kMaxDims> d_{};
  int n_ = 0;
};

}  // namespace ember
