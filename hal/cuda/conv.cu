// KERNELS.md section 4's convolutions in CUDA/HIP (conv2d, conv2d_bn_relu, conv2d_gelu_dropout; the
// composed depthwise_pointwise runs conv2d twice): the counterparts of shaders/conv.comp, with exactly
// the semantics of src/ops/conv.cpp's reference (NCHW as torch.nn.Conv2d: stride, zero padding,
// dilation, groups).
//
// conv_direct, the portable kernel (every case, every dtype the registry lists): an implicit GEMM as
// conv.comp's. Per group g, out[m, o] = sum_k A[m, k] B[k, o] with m the output pixel (n, oh, ow), o the
// group's output channel, k = (c, kh, kw) over the group's input channels; A (the input window of each
// pixel) is never materialized: its tile loads compute the im2col address, zero outside the image. A
// block of 256 threads computes a BM x BN tile (pixels x channels) from BK = 16-deep slices of A and of
// the weights staged in shared memory; each thread a TM x TN block of the tile, pixels tm + RM i and
// channels tn + RN j (RM = BM / TM threads along the pixels: neighbouring threads hold neighbouring
// pixels, so that the loads of A and the stores of y run along an image row). Accumulation in the
// compute type (float; double for f64), k in increasing order: the same bits every run. Then the
// epilogue of common.cuh (bias, batch norm, activation, dropout at the output's NCHW linear index) and
// one store per element.
//
// conv_im2col: the column matrix of the cuBLASLt path (kernels.cpp dispatch_conv; matmul.cpp conv_gemm):
// col[i][k][pix] = the input under tap k = (c, kh, kw) of output pixel pix of image n0 + i, zero outside
// the image, so that each image's product is y_n [O, P] = W [O, K] col_n [K, P] (row-major) and y comes
// out NCHW as it stands. One block per row (i, k), its threads along the pixels (coalesced stores).
#include "hal/cuda/common.cuh"

namespace kf::hal::cuda {
namespace {

constexpr int kConvThreads = 256;
constexpr int kConvBK = 16;

template <class T, int BM, int BN, int TM, int TN>
__global__ void __launch_bounds__(256) conv_direct(const ConvParams p) {
  using C = typename T::C;
  constexpr int NT = kConvThreads, BK = kConvBK, RM = BM / TM, RN = BN / TN;
  static_assert(RM * RN == NT, "one TM x TN block of the tile per thread");
  static_assert(NT % BM == 0 && (BK * BM) % NT == 0, "A's loads: one pixel per thread, whole slices");
  constexpr int AQ = BK * BM / NT;  // elements of A a thread loads per slice
  constexpr int AK = NT / BM;       // the k rows between them
  __shared__ C As[BK][BM];
  __shared__ C Bs[BK][BN + 1];  // + 1: the weight loads (k fastest) spread over the banks
  const int tid = static_cast<int>(threadIdx.x);
  const int tm = tid % RM, tn = tid / RM;  // this thread's output block
  const int am = tid % BM, ak = tid / BM;  // this thread's pixel of A and its first k row
  const int64_t P = p.OH * p.OW, M = p.N * P, HW = p.H * p.W;
  const int64_t Cg = p.C / p.groups, Og = p.O / p.groups, K = Cg * p.KH * p.KW;
  const int KW = static_cast<int>(p.KW), KHW = static_cast<int>(p.KH * p.KW);
  const int64_t otiles = (Og + BN - 1) / BN, mtiles = (M + BM - 1) / BM;

  // Block-uniform loops (their bounds depend on the block's indices only): every thread of the block
  // reaches each __syncthreads.
  for (int64_t gy = blockIdx.y; gy < p.groups * otiles; gy += gridDim.y) {
    const int64_t g = gy / otiles, o0 = (gy % otiles) * BN;
    for (int64_t mt = blockIdx.x; mt < mtiles; mt += gridDim.x) {
      const int64_t m0 = mt * BM;
      // The pixel this thread loads A for: its group's first input plane and its window's origin.
      const int64_t lm = m0 + am;
      const bool lm_ok = lm < M;
      int64_t xbase = 0, ih0 = 0, iw0 = 0;
      if (lm_ok) {
        const int64_t n = lm / P, pix = lm % P;
        xbase = (n * p.C + g * Cg) * HW;
        ih0 = (pix / p.OW) * p.sh - p.ph;
        iw0 = (pix % p.OW) * p.sw - p.pw;
      }
      C acc[TM][TN];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = C(0);

      for (int64_t k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int q = 0; q < AQ; ++q) {  // A: BK x BM, this thread's pixel, rows ak, ak + AK, ...
          const int k = ak + AK * q;
          const int64_t gk = k0 + k;
          C v = C(0);
          if (lm_ok && gk < K) {  // K < 2^31 (checked by the host): the tap in 32 bits
            const int t = static_cast<int>(gk), c = t / KHW, r = t % KHW;
            const int64_t ih = ih0 + int64_t(r / KW) * p.dh, iw = iw0 + int64_t(r % KW) * p.dw;
            if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W) v = T::load(p.x, xbase + c * HW + ih * p.W + iw);
          }
          As[k][am] = v;
        }
        for (int e = tid; e < BK * BN; e += NT) {  // B = W [O, Cg, KH, KW]: the group's rows o0.., k fastest
          const int k = e % BK, o = e / BK;
          const int64_t go = o0 + o, gk = k0 + k;
          Bs[k][o] = (go < Og && gk < K) ? T::load(p.w, (g * Og + go) * K + gk) : C(0);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
          C a[TM], b[TN];
#pragma unroll
          for (int i = 0; i < TM; ++i) a[i] = As[k][tm + RM * i];
#pragma unroll
          for (int j = 0; j < TN; ++j) b[j] = Bs[k][tn + RN * j];
#pragma unroll
          for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();  // the slices are overwritten next
      }

#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int64_t go = o0 + tn + RN * j;
        if (go >= Og) continue;
        const int64_t o = g * Og + go;
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          const int64_t m = m0 + tm + RM * i;
          if (m >= M) continue;
          const int64_t idx = ((m / P) * p.O + o) * P + m % P;  // NCHW: (n, o, pix)
          T::store(p.y, idx, epilogue_value<T>(acc[i][j], idx, o, p.ep));
        }
      }
    }
  }
}

struct Im2colParams {
  ConvParams c;
  int64_t n0 = 0, images = 0;
  void* col = nullptr;
};

template <class T>
__global__ void __launch_bounds__(256) conv_im2col(const Im2colParams ip) {
  using C = typename T::C;
  const ConvParams& p = ip.c;
  const int64_t n0 = ip.n0, images = ip.images;
  void* col = ip.col;
  const int P = static_cast<int>(p.OH * p.OW), OW = static_cast<int>(p.OW);  // < 2^31 (checked by the host)
  const int KW = static_cast<int>(p.KW), KHW = static_cast<int>(p.KH * p.KW);
  const int64_t K = p.C * KHW, rows = images * K, HW = p.H * p.W;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t n = n0 + row / K;
    const int k = static_cast<int>(row % K), c = k / KHW, r = k % KHW;
    const int64_t dy = int64_t(r / KW) * p.dh - p.ph, dx = int64_t(r % KW) * p.dw - p.pw;
    const int64_t plane = (n * p.C + c) * HW;
    for (int pix = static_cast<int>(threadIdx.x); pix < P; pix += static_cast<int>(blockDim.x)) {
      const int64_t ih = int64_t(pix / OW) * p.sh + dy, iw = int64_t(pix % OW) * p.sw + dx;
      C v = C(0);
      if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W) v = T::load(p.x, plane + ih * p.W + iw);
      T::store(col, row * P + pix, v);
    }
  }
}

template <class T>
int conv_direct_launch(const ConvParams& p, ConvTile tile, dim3 grid, gpuStream_t s) {
  switch (tile) {
    case ConvTile::t64x64: conv_direct<T, 64, 64, 4, 4><<<grid, kConvThreads, 0, s>>>(p); break;
    case ConvTile::t128x16: conv_direct<T, 128, 16, 4, 2><<<grid, kConvThreads, 0, s>>>(p); break;
    case ConvTile::t256x4: conv_direct<T, 256, 4, 4, 1><<<grid, kConvThreads, 0, s>>>(p); break;
  }
  return static_cast<int>(gpuGetLastError());
}

}  // namespace

// The registry lists f32, f16 and bf16 for the convolutions: no f64 kernels (-1: not built).
int launch_conv_direct(Dt dt, const ConvParams& p, ConvTile tile, uint32_t grid_x, uint32_t grid_y, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  const dim3 grid(grid_x, grid_y, 1);
  switch (dt) {
    case Dt::f32: return conv_direct_launch<F32>(p, tile, grid, s);
    case Dt::f16: return conv_direct_launch<F16>(p, tile, grid, s);
    case Dt::bf16: return conv_direct_launch<BF16>(p, tile, grid, s);
    default: break;
  }
  return -1;
}

int launch_im2col(Dt dt, const ConvParams& p, int64_t n0, int64_t images, void* col, uint32_t blocks, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  Im2colParams ip;
  ip.c = p, ip.n0 = n0, ip.images = images, ip.col = col;
  switch (dt) {
    case Dt::f32: conv_im2col<F32><<<blocks, kConvThreads, 0, s>>>(ip); break;
    case Dt::f16: conv_im2col<F16><<<blocks, kConvThreads, 0, s>>>(ip); break;
    case Dt::bf16: conv_im2col<BF16><<<blocks, kConvThreads, 0, s>>>(ip); break;
    default: return -1;
  }
  return static_cast<int>(gpuGetLastError());
}

}  // namespace kf::hal::cuda
