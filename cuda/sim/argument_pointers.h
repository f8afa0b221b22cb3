// cuda/sim/argument_pointers.h — every pointer a kernel argument holds, for
// the stream-order checker (stream_order.cpp): a pointer argument itself,
// and the pointers inside a struct argument, however deep (ember's GEMM and
// convolution kernels take their operands as functors: MatrixA{a, ld},
// PhaseStore{gx, ...}). A pointer to const reads the block it points into,
// any other pointer writes it.
//
// Structs are read without annotations, as aggregates: the number of fields
// is the longest brace initialiser the type accepts from values that convert
// to anything (AnyField), and structured bindings then name the fields.
// Types that are not aggregates (classes with constructors or private
// members, lambdas' closures, unions) are opaque: their pointers are not
// seen (a race through them is missed, never invented). An aggregate with
// base classes or array members does not decompose this way and fails to
// compile here, so no kernel argument is skipped silently; one whose arrays
// hold no pointers says so (`using argument_has_no_pointers = void;`).
#pragma once
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/sim/touch.h"

namespace cudasim::detail {

struct AnyField {
  template <typename T>
  operator T() const;  // only in unevaluated contexts
};
template <size_t>
using AnyFieldAt = AnyField;

template <typename T, size_t... I>
constexpr bool braces_from(std::index_sequence<I...>) {
  return requires { T{AnyFieldAt<I>{}...}; };
}

constexpr size_t kMaxFields = 32;

// The number of fields of aggregate T (at most kMaxFields).
template <typename T, size_t N = 0>
constexpr size_t field_count() {
  if constexpr (N < kMaxFields && braces_from<T>(std::make_index_sequence<N + 1>{}))
    return field_count<T, N + 1>();
  else
    return N;
}

// A struct with array members says it holds no pointers
// (`using argument_has_no_pointers = void;`), as it cannot be decomposed.
template <typename T>
concept declares_no_pointers = requires { typename T::argument_has_no_pointers; };

template <typename T>
constexpr bool decomposable =
    std::is_class_v<T> && std::is_aggregate_v<T> && !std::is_union_v<T> && !declares_no_pointers<T>;

// Calls f on each field of aggregate v (one structured binding per field count).
template <typename T, typename F>
void for_each_field(const T& v, F&& f) {
  constexpr size_t n = field_count<T>();
  static_assert(n < kMaxFields, "cudasim: a kernel argument struct with 32 or more fields");
  if constexpr (n == 1) {
    const auto& [m0] = v;
    f(m0);
  } else if constexpr (n == 2) {
    const auto& [m0, m1] = v;
    f(m0), f(m1);
  } else if constexpr (n == 3) {
    const auto& [m0, m1, m2] = v;
    f(m0), f(m1), f(m2);
  } else if constexpr (n == 4) {
    const auto& [m0, m1, m2, m3] = v;
    f(m0), f(m1), f(m2), f(m3);
  } else if constexpr (n == 5) {
    const auto& [m0, m1, m2, m3, m4] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4);
  } else if constexpr (n == 6) {
    const auto& [m0, m1, m2, m3, m4, m5] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5);
  } else if constexpr (n == 7) {
    const auto& [m0, m1, m2, m3, m4, m5, m6] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6);
  } else if constexpr (n == 8) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7);
  } else if constexpr (n == 9) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8);
  } else if constexpr (n == 10) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9);
  } else if constexpr (n == 11) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10);
  } else if constexpr (n == 12) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11);
  } else if constexpr (n == 13) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12);
  } else if constexpr (n == 14) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13);
  } else if constexpr (n == 15) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14);
  } else if constexpr (n == 16) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15);
  } else if constexpr (n == 17) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16);
  } else if constexpr (n == 18) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17);
  } else if constexpr (n == 19) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17), f(m18);
  } else if constexpr (n == 20) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17), f(m18), f(m19);
  } else if constexpr (n == 21) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17), f(m18), f(m19), f(m20);
  } else if constexpr (n == 22) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20, m21] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17), f(m18), f(m19), f(m20), f(m21);
  } else if constexpr (n == 23) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20, m21, m22] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17), f(m18), f(m19), f(m20), f(m21), f(m22);
  } else if constexpr (n == 24) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20, m21, m22, m23] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17), f(m18), f(m19), f(m20), f(m21), f(m22), f(m23);
  } else if constexpr (n == 25) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20, m21, m22, m23, m24] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17), f(m18), f(m19), f(m20), f(m21), f(m22), f(m23), f(m24);
  } else if constexpr (n == 26) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20, m21, m22, m23, m24, m25] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17), f(m18), f(m19), f(m20), f(m21), f(m22), f(m23), f(m24), f(m25);
  } else if constexpr (n == 27) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20, m21, m22, m23, m24, m25, m26] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17), f(m18), f(m19), f(m20), f(m21), f(m22), f(m23), f(m24), f(m25), f(m26);
  } else if constexpr (n == 28) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20, m21, m22, m23, m24, m25, m26, m27] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17), f(m18), f(m19), f(m20), f(m21), f(m22), f(m23), f(m24), f(m25), f(m26), f(m27);
  } else if constexpr (n == 29) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20, m21, m22, m23, m24, m25, m26, m27, m28] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17), f(m18), f(m19), f(m20), f(m21), f(m22), f(m23), f(m24), f(m25), f(m26), f(m27), f(m28);
  } else if constexpr (n == 30) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20, m21, m22, m23, m24, m25, m26, m27, m28, m29] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17), f(m18), f(m19), f(m20), f(m21), f(m22), f(m23), f(m24), f(m25), f(m26), f(m27), f(m28), f(m29);
  } else if constexpr (n == 31) {
    const auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20, m21, m22, m23, m24, m25, m26, m27, m28, m29, m30] = v;
    f(m0), f(m1), f(m2), f(m3), f(m4), f(m5), f(m6), f(m7), f(m8), f(m9), f(m10), f(m11), f(m12), f(m13), f(m14), f(m15), f(m16), f(m17), f(m18), f(m19), f(m20), f(m21), f(m22), f(m23), f(m24), f(m25), f(m26), f(m27), f(m28), f(m29), f(m30);
  }
}

// Appends the blocks argument v touches.
template <typename T>
void add_touches(const T& v, std::vector<Touch>& out) {
  if constexpr (std::is_pointer_v<T>) {
    if constexpr (!std::is_function_v<std::remove_pointer_t<T>>)
      out.push_back(Touch{static_cast<const void*>(v), !std::is_const_v<std::remove_pointer_t<T>>});
  } else if constexpr (decomposable<T>) {
    for_each_field(v, [&out](const auto& field) { add_touches(field, out); });
  }
}

}  // namespace cudasim::detail
