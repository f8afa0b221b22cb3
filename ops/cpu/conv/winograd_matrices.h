// ops/cpu/conv/winograd_matrices.h — the filter-side matrix G of Winograd's
// F(2x2, 3x3) and F(4x4, 3x3) (Lavin & Gray 2015), and the two per-call
// filter transforms built on it (internal to conv_winograd.cpp): U = G g G^T
// for the forward and dL/dg = G^T (dL/dU) G for the filter gradient. They
// run once per (output, input) channel pair per call. The
// per-tile transforms with B^T and A^T are the vector kernels of
// winograd_micro.h (M = 2) and winograd4_micro.h (M = 4).
#pragma once

namespace ember::cpu {

template <int M>
struct WinogradMatrices;

// F(2x2, 3x3): points 0, 1, -1 and infinity.
template <>
struct WinogradMatrices<2> {
  static constexpr int points = 4;  // input points a side (M + 2)
  static constexpr double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
};

// F(4x4, 3x3): points 0, 1, -1, 2, -2 and infinity.
template <>
struct WinogradMatrices<4> {
  static constexpr int points = 6;
  static constexpr double G[6][3] = {{1.0 / 4, 0, 0},
                                     {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                     {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                     {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                     {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                     {0, 0, 1}};
};

// u[p] = G f[p] G^T for B filters at once (the filters along the last
// index, so that the loops over them run on vectors), in V (the compute
// type: G's fractions round once more in f32, ~1 ulp of U)
//   f: [3 * 3, B]   u: [A * A, B]
template <int M, int B, typename V, int A = WinogradMatrices<M>::points>
void winograd_filter_transform(const V (&f)[9][B], V (&u)[A * A][B]) {
  constexpr auto& G = WinogradMatrices<M>::G;
  V t[A][3][B];  // G f
  for (int i = 0; i < A; ++i)
    for (int s = 0; s < 3; ++s)
      for (int p = 0; p < B; ++p) {
        t[i][s][p] = V(0);
        for (int r = 0; r < 3; ++r)
          if (G[i][r] != 0) t[i][s][p] += V(G[i][r]) * f[3 * r + s][p];  // (G's zeros: no product)
      }
  for (int i = 0; i < A; ++i)
    for (int j = 0; j < A; ++j)
      for (int p = 0; p < B; ++p) {
        u[i * A + j][p] = V(0);
        for (int s = 0; s < 3; ++s)
          if (G[j][s] != 0) u[i * A + j][p] += t[i][s][p] * V(G[j][s]);
      }
}

// g = G^T m G   m: [A, A]   g: [3, 3]
template <int M, int A = WinogradMatrices<M>::points>
void winograd_filter_gradient_transform(const double (&m)[A][A], double (&g)[3][3]) {
  constexpr auto& G = WinogradMatrices<M>::G;
  double t[3][A] = {};  // G^T m
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < A; ++j)
      for (int i = 0; i < A; ++i)
        if (G[i][r] != 0) t[r][j] += G[i][r] * m[i][j];
  for (int r = 0; r < 3; ++r)
    for (int s = 0; s < 3; ++s) {
      g[r][s] = 0;
      for (int j = 0; j < A; ++j)
        if (G[j][s] != 0) g[r][s] += t[r][j] * G[j][s];
    }
}

}  // namespace ember::cpu
