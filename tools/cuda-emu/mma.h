// Part of tools/cuda-emu (see run.sh).
// Emulated nvcuda::wmma (16x16x16): every lane holds the whole matrix; collective calls synchronize the warp.
#pragma once
namespace nvcuda::wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {};
struct row_major {}; struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class L = void>
struct fragment { static constexpr int num_elements = 256; float x[256]; };
template <class F> inline void fill_fragment(F& f, float v) { for (auto& e : f.x) e = v; }
inline float emu_elem(const __half* p) { return kf_half_to_float(p->u); }
inline float emu_elem(const __nv_bfloat16* p) { return __uint_as_float(unsigned(p->u) << 16); }
template <class Use, class T, class L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ld) {
  __syncwarp();
  const bool col = std::is_same_v<L, col_major>;
  for (int r = 0; r < 16; ++r) for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = emu_elem(col ? p + c * ld + r : p + r * ld + c);
  __syncwarp();
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float, void>& f, const float* p, unsigned ld, layout_t) {
  __syncwarp();
  for (int r = 0; r < 16; ++r) for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = p[r * ld + c];
  __syncwarp();
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float, void>& f, unsigned ld, layout_t) {
  __syncwarp();
  if (threadIdx.x % 32 == 0) for (int r = 0; r < 16; ++r) for (int c = 0; c < 16; ++c) p[r * ld + c] = f.x[r * 16 + c];
  __syncwarp();
}
template <class A, class B>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float, void>& d, const A& a, const B& b,
                     const fragment<accumulator, 16, 16, 16, float, void>& c) {
  float t[16][16];
  for (int i = 0; i < 16; ++i) for (int j = 0; j < 16; ++j) { float s = c.x[i * 16 + j]; for (int k = 0; k < 16; ++k) s += a.x[i * 16 + k] * b.x[k * 16 + j]; t[i][j] = s; }
  for (int i = 0; i < 16; ++i) for (int j = 0; j < 16; ++j) d.x[i * 16 + j] = t[i][j];
}
}  // namespace nvcuda::wmma
