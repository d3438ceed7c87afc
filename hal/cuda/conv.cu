// docs/ops.md section 4's convolutions in CUDA/HIP (conv2d, conv2d_bn_relu, conv2d_gelu_dropout; the
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
//
// conv_mma (f16 / bf16, one group, K = C KH KW a multiple of 8; below): the same implicit GEMM on tensor
// cores (mma.sync.m16n8k16 through mma_ptx.cuh), the epilogue fused: no column matrix, no second pass.
//
// conv_depthwise: groups == C (one input plane per output channel, O = C * mult), memory-bound where the
// implicit GEMM above wastes its tile on K = KH KW taps. A block of 256 threads takes a tile of output
// pixels (tow columns x toh rows; whole rows where they fit, several planes a block for small images)
// of pb input planes (image n, channel c) and every output channel c * mult + m of them: it stages the
// tile's input window with its halo in shared memory as float (16-byte loads along the rows where W is
// a multiple of the pack; zero outside the image), then each thread computes vpt neighbouring outputs
// of one row (vpt = the pack: 4 for f32, 8 for f16 / bf16), the taps kh, kw in increasing order in float
// (for KW = 3 or 5 with unit stride and dilation along W each tap row is read once into a register
// window), and stores them through the epilogue of common.cuh (bias, batch norm, activation, dropout at
// the output's NCHW linear index) as one 16-byte pack where OW is a multiple of the pack. The input is
// read from memory once (halo rows of neighbouring tiles from L2), the output written once.
#include <algorithm>

#include "hal/cuda/common.cuh"
#include "hal/cuda/mma_ptx.cuh"
#include "plan/depthwise.hpp"

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

#if !defined(KF_HIP)
// ---- conv_mma: the implicit GEMM on tensor cores (f16 / bf16, one group, K = C KH KW a multiple of 8).
// out[m, o] = sum_k A[m, k] W[o, k], m the output pixel (n, oh, ow), k = (c, kh, kw) as W's rows lie. A
// block of 256 threads (8 warps, 4 along the pixels x 2 along the channels, 32 x 32 each) computes a
// 128 x 64 tile from 32-deep slices, double-buffered in shared memory: A gathered from x (the 3 x 3
// window of each pixel, zero outside the image) into registers while the previous slice computes, then
// stored [k][m] (m contiguous: coalesced loads along the image rows, ldmatrix .trans for the A
// fragments); W's rows by cp.async (16 bytes, zero-filled past K or O), [o][k]. Each k's offset in the
// image (c H W + kh dh W + kw dw) and its (kh dh, kw dw) come from a table built in shared memory once per
// block (no division in the loop). mma.sync.m16n8k16, float accumulators. The output goes through shared
// memory as float [o][m], then each thread takes 8 neighbouring pixels of one channel: the epilogue of
// common.cuh (bias, batch norm, activation, dropout at the NCHW index: one Philox block per 4 elements)
// and one 16-byte store (OH OW a multiple of 8, y aligned; else element by element).
constexpr int kMmaBM = 128, kMmaBN = 64, kMmaBK = 32;
constexpr int kMmaAS = kMmaBM + 8;  // A's row stride (elements): rows 272 bytes apart, ldmatrix conflict-free
constexpr int kMmaBS = kMmaBK + 8;  // W's row stride: 80 bytes
constexpr int kMmaCS = kMmaBM + 4;  // the output staging's row stride (floats)
constexpr int kMmaStageBytes = (kMmaBK * kMmaAS + kMmaBN * kMmaBS) * 2;
constexpr int kMmaMainBytes = std::max(2 * kMmaStageBytes, kMmaBN * kMmaCS * 4);
constexpr int kMmaInvalidDy = 0x7fff;  // a table entry past K: its row lies below any image (H + ph < 32767)
// A tap of the table: its offset in the image (c H W + dy W + dx) and (dy << 16) | dx. One 8-byte load.
struct alignas(8) MmaTap {
  int off, dydx;
};
struct alignas(16) MmaF4 {
  float v[4];
};

template <class T, bool BF16>
__global__ void __launch_bounds__(256, 2) conv_mma(const ConvParams p) {
  using C = typename T::C;
  using M = Math<C, false>;
  constexpr int BM = kMmaBM, BN = kMmaBN, BK = kMmaBK, AS = kMmaAS, BS = kMmaBS, CS = kMmaCS;
  extern __shared__ __align__(16) unsigned char cm_smem[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int wm = warp & 3, wn = warp >> 2;
  const int H = static_cast<int>(p.H), W = static_cast<int>(p.W), OW = static_cast<int>(p.OW);
  const int P = static_cast<int>(p.OH * p.OW), HW = H * W, O = static_cast<int>(p.O);
  const int KW = static_cast<int>(p.KW), KHW = static_cast<int>(p.KH * p.KW);
  const int K = static_cast<int>(p.C) * KHW, KT = (K + BK - 1) / BK;
  const int64_t Mtot = p.N * P, CHW = p.C * int64_t(HW);
  const int64_t mtiles = (Mtot + BM - 1) / BM, otiles = (O + BN - 1) / BN;
  MmaTap* tab = reinterpret_cast<MmaTap*>(cm_smem + kMmaMainBytes);
  for (int k = tid; k < KT * BK; k += 256) {
    MmaTap e{0, kMmaInvalidDy << 16};
    if (k < K) {
      const int c = k / KHW, r = k % KHW;
      const int dy = (r / KW) * static_cast<int>(p.dh), dx = (r % KW) * static_cast<int>(p.dw);
      e = MmaTap{c * HW + dy * W + dx, (dy << 16) | dx};
    }
    tab[k] = e;
  }
  __syncthreads();
  const unsigned short* x = static_cast<const unsigned short*>(p.x);
  const unsigned short* w = static_cast<const unsigned short*>(p.w);
  auto sa = [&](int st) { return reinterpret_cast<unsigned short*>(cm_smem + st * kMmaStageBytes); };
  auto sb = [&](int st) { return reinterpret_cast<unsigned short*>(cm_smem + st * kMmaStageBytes) + BK * AS; };
  const int am = tid % BM, ak = tid / BM;  // this thread's pixel of A and its first k row (warp-uniform)
  const int bo = tid >> 2, bc = (tid & 3) * 8;  // its 16 bytes of W's slice: row bo, columns bc..bc+7
  const bool vec = P % 8 == 0 && (reinterpret_cast<uintptr_t>(p.y) & 15u) == 0;

  for (int64_t t = blockIdx.x; t < mtiles * otiles; t += gridDim.x) {  // block-uniform
    const int64_t m0 = (t % mtiles) * BM;
    const int o0 = static_cast<int>((t / mtiles) * BN);
    const int64_t lm = m0 + am;
    const unsigned short* xb = x;
    int pofs = 0, ih0 = -0x40000000, iw0 = 0;
    if (lm < Mtot) {
      const int64_t n = lm / P;
      const int pix = static_cast<int>(lm % P);
      ih0 = (pix / OW) * static_cast<int>(p.sh) - static_cast<int>(p.ph);
      iw0 = (pix % OW) * static_cast<int>(p.sw) - static_cast<int>(p.pw);
      xb = x + n * CHW;
      pofs = ih0 * W + iw0;
    }
    const bool bo_ok = o0 + bo < O;
    const unsigned short* wrow = w + int64_t(bo_ok ? o0 + bo : 0) * K;
    unsigned short areg[BK / 2];
    auto gather = [&](int kt) {
#pragma unroll
      for (int q = 0; q < BK / 2; ++q) {
        const MmaTap e = tab[kt * BK + ak + 2 * q];
        const int ih = ih0 + (e.dydx >> 16), iw = iw0 + (e.dydx & 0xffff);
        unsigned short v = 0;
        if (static_cast<unsigned>(ih) < static_cast<unsigned>(H) && static_cast<unsigned>(iw) < static_cast<unsigned>(W))
          v = xb[pofs + e.off];
        areg[q] = v;
      }
    };
    auto store_a = [&](int st) {
      unsigned short* a = sa(st);
#pragma unroll
      for (int q = 0; q < BK / 2; ++q) a[(ak + 2 * q) * AS + am] = areg[q];
    };
    auto load_b = [&](int kt, int st) {
      const int k = kt * BK + bc;
      const bool ok = bo_ok && k < K;
      cp_async16(smem_u32(sb(st) + bo * BS + bc), ok ? wrow + k : w, ok ? 16 : 0);
      cp_async_commit();
    };

    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    gather(0);
    load_b(0, 0);
    store_a(0);
    cp_async_wait<0>();
    __syncthreads();
    const int li = lane >> 3, lj = lane & 7;
    for (int kt = 0; kt < KT; ++kt) {
      const int cur = kt & 1;
      if (kt + 1 < KT) {  // the next slice's loads in flight while this one computes
        gather(kt + 1);
        load_b(kt + 1, cur ^ 1);
      }
      const unsigned abase = smem_u32(sa(cur)), bbase = smem_u32(sb(cur));
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        unsigned af[2][4], bf[2][4];
#pragma unroll
        for (int i = 0; i < 2; ++i) {  // matrices (k 0-7, m 0-7), (k 0-7, m 8-15), (k 8-15, m 0-7), (k 8-15, m 8-15)
          const int k = kk + (li >> 1) * 8 + lj, m = wm * 32 + i * 16 + (li & 1) * 8;
          ldsm_x4_trans(af[i], abase + static_cast<unsigned>((k * AS + m) * 2));
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {  // matrices (o 0-7, k 0-7), (o 0-7, k 8-15), (o 8-15, k 0-7), (o 8-15, k 8-15)
          const int o = wn * 32 + j * 16 + (li >> 1) * 8 + lj, k = kk + (li & 1) * 8;
          ldsm_x4(bf[j], bbase + static_cast<unsigned>((o * BS + k) * 2));
        }
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) mma16816<BF16>(acc[i][j], af[i], bf[j >> 1][(j & 1) * 2], bf[j >> 1][(j & 1) * 2 + 1]);
      }
      if (kt + 1 < KT) {
        store_a(cur ^ 1);
        cp_async_wait<0>();
      }
      __syncthreads();
    }

    // The tile to shared memory as float [o][m] (the stages are free: the loop ended with a barrier).
    float* cs = reinterpret_cast<float*>(cm_smem);
    {
      const int g = lane >> 2, q = lane & 3;
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int m = wm * 32 + i * 16 + g, o = wn * 32 + j * 8 + 2 * q;
          cs[o * CS + m] = acc[i][j][0];
          cs[(o + 1) * CS + m] = acc[i][j][1];
          cs[o * CS + m + 8] = acc[i][j][2];
          cs[(o + 1) * CS + m + 8] = acc[i][j][3];
        }
    }
    __syncthreads();
    const EpilogueParams& ep = p.ep;
    for (int e = tid; e < BN * BM / 8; e += 256) {
      const int ol = e / (BM / 8), ml = (e % (BM / 8)) * 8;
      const int o = o0 + ol;
      const int64_t m = m0 + ml;
      if (o >= O || m >= Mtot) continue;
      const MmaF4 lo = *reinterpret_cast<const MmaF4*>(cs + ol * CS + ml);
      const MmaF4 hi = *reinterpret_cast<const MmaF4*>(cs + ol * CS + ml + 4);
      C v[8] = {lo.v[0], lo.v[1], lo.v[2], lo.v[3], hi.v[0], hi.v[1], hi.v[2], hi.v[3]};
      if (vec) {  // m % 8 == 0 and P % 8 == 0: the 8 pixels lie in one image, idx a whole pack
        const int64_t n = m / P;
        const int64_t idx = (n * O + o) * P + (m - n * P);
        // The channel's terms once (epilogue_value's formulas).
        const C bias = ep.bias ? T::load(ep.bias, o) : C(0);
        C s = C(1), mean = C(0), b = C(0);
        if (ep.bn_w) {
          s = T::load(ep.bn_w, o) / m_sqrt(T::load(ep.bn_var, o) + C(ep.eps));
          mean = T::load(ep.bn_mean, o), b = T::load(ep.bn_b, o);
        }
        uint4 wd = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          C y = v[u];
          if (ep.bias) y += bias;
          if (ep.bn_w) y = (y - mean) * s + b;
          switch (ep.act) {
            case 1: y = relu_f<M>(y); break;
            case 2: y = gelu_f<M>(y); break;
            case 3: y = gelu_tanh_f<M>(y); break;
            case 4: y = silu_f<M>(y); break;
            default: break;
          }
          if (ep.thr != 0u) {
            if ((u & 3) == 0) {
              const uint64_t blk = static_cast<uint64_t>(idx + u) >> 2;
              wd = philox4x32_10(make_uint4(static_cast<unsigned>(blk), static_cast<unsigned>(blk >> 32), ep.off_lo, ep.off_hi),
                                 ep.seed_lo, ep.seed_hi);
            }
            y = (word_of(wd, idx + u) >> 8) >= ep.thr ? y * C(ep.keep_scale) : C(0);
          }
          v[u] = y;
        }
        store_pack(p.y, idx / 8, T::pack(v));
      } else {
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const int64_t mu = m + u;
          if (mu >= Mtot) break;
          const int64_t n = mu / P;
          const int64_t idx = (n * O + o) * P + (mu - n * P);
          T::store(p.y, idx, epilogue_value<T>(v[u], idx, o, ep));
        }
      }
    }
    __syncthreads();  // cs is the next tile's stages
  }
}
#endif

// Floor division by a positive divisor.
KF_DEV int64_t dw_floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

struct DwArgs {
  ConvParams c;
  DwPlan d;
};

template <class T, int KWT>
__global__ void __launch_bounds__(256) conv_depthwise(const DwArgs args) {
  using C = typename T::C;
  constexpr int VPT = T::VW;
  extern __shared__ __align__(16) unsigned char dw_smem[];
  C* s = reinterpret_cast<C*>(dw_smem);
  const ConvParams& p = args.c;
  const DwPlan& d = args.d;
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int64_t planes = p.N * p.C, HW = p.H * p.W, mult = p.O / p.C;
  const int KH = static_cast<int>(p.KH), KW = KWT ? KWT : static_cast<int>(p.KW), KHW = KH * KW;
  const int sh = static_cast<int>(p.sh), sw = static_cast<int>(p.sw), dh = static_cast<int>(p.dh),
            dw = static_cast<int>(p.dw);
  const int gx = (d.tow + VPT - 1) / VPT;  // vpt-wide pieces along a tile row
  const int items = d.pb * d.toh * gx, iwt = d.iwt, iht = d.iht;
  const int64_t per_plane = d.wtiles * d.htiles;
  // 64-bit divisions are subroutines of about a hundred instructions: where the counts fit 32 bits (every
  // practical shape) the tile and plane indices take 32-bit ones (a block-uniform branch).
  const bool narrow = d.tiles <= INT32_MAX && planes <= INT32_MAX;
  for (int64_t t = blockIdx.x; t < d.tiles; t += gridDim.x) {  // block-uniform: every thread reaches the barriers
    int64_t wt, ht, q0;
    if (narrow) {
      const unsigned t32 = static_cast<unsigned>(t), wts = static_cast<unsigned>(d.wtiles);
      wt = t32 % wts, ht = (t32 / wts) % static_cast<unsigned>(d.htiles), q0 = int64_t(t32 / unsigned(per_plane)) * d.pb;
    } else {
      wt = t % d.wtiles, ht = (t / d.wtiles) % d.htiles, q0 = (t / per_plane) * d.pb;
    }
    const int64_t oh0 = ht * d.toh, ow0 = wt * d.tow;
    const int64_t ih0 = oh0 * p.sh - p.ph, iw0 = ow0 * p.sw - p.pw;
    __syncthreads();  // the previous tile's reads of s are done
    if (d.vec_load) {  // packs aligned to the image's column 0 (W % VW == 0): each wholly inside or outside it
      const int64_t pk0 = dw_floor_div(iw0, VPT);
      const int npk = static_cast<int>(dw_floor_div(iw0 + iwt - 1, VPT) - pk0 + 1);
      const int64_t wpk = p.W / VPT;
      for (int e = tid; e < d.pb * iht * npk; e += nt) {
        const int k = e % npk, r = (e / npk) % iht, j = e / (npk * iht);
        const int64_t q = q0 + j, ih = ih0 + r, pk = pk0 + k;
        C v[VPT];
        if (q < planes && ih >= 0 && ih < p.H && pk >= 0 && pk < wpk) {
          T::unpack(load_pack(p.x, (q * HW + ih * p.W) / VPT + pk), v);
        } else {
#pragma unroll
          for (int u = 0; u < VPT; ++u) v[u] = C(0);
        }
        C* row = s + (j * iht + r) * iwt;
        const int64_t col0 = pk * VPT - iw0;
#pragma unroll
        for (int u = 0; u < VPT; ++u)
          if (col0 + u >= 0 && col0 + u < iwt) row[col0 + u] = v[u];
      }
    } else {
      for (int e = tid; e < d.pb * iht * iwt; e += nt) {
        const int col = e % iwt, r = (e / iwt) % iht, j = e / (iwt * iht);
        const int64_t q = q0 + j, ih = ih0 + r, iw = iw0 + col;
        s[e] = (q < planes && ih >= 0 && ih < p.H && iw >= 0 && iw < p.W) ? T::load(p.x, q * HW + ih * p.W + iw) : C(0);
      }
    }
    __syncthreads();
    for (int e = tid; e < items; e += nt) {
      const int g = e % gx, r = (e / gx) % d.toh, j = e / (gx * d.toh);
      const int64_t q = q0 + j, oh = oh0 + r, owb = ow0 + int64_t(g) * VPT;
      if (q >= planes || oh >= p.OH || owb >= p.OW) continue;
      // The valid outputs of this piece (the rest read staged zeros or other columns and are not stored).
      int64_t nv64 = p.OW - owb < VPT ? p.OW - owb : int64_t(VPT);
      if (d.tow - g * VPT < nv64) nv64 = d.tow - g * VPT;
      const int nv = static_cast<int>(nv64);
      const int64_t n = narrow ? int64_t(unsigned(q) / unsigned(p.C)) : q / p.C,
                    c = narrow ? int64_t(unsigned(q) % unsigned(p.C)) : q % p.C;
      const C* base = s + (j * iht + r * sh) * iwt + g * VPT * sw;
      for (int64_t m = 0; m < mult; ++m) {
        const int64_t o = c * mult + m;
        const int64_t wb = o * KHW;
        C acc[VPT];
#pragma unroll
        for (int v = 0; v < VPT; ++v) acc[v] = C(0);
        for (int kh = 0; kh < KH; ++kh) {
          const C* sr = base + kh * dh * iwt;
          if constexpr (KWT != 0) {  // unit stride and dilation along W: the tap row once into registers
            C win[VPT + KWT - 1];
#pragma unroll
            for (int i = 0; i < VPT + KWT - 1; ++i) win[i] = sr[i];
#pragma unroll
            for (int kw = 0; kw < KWT; ++kw) {
              const C wv = T::load(p.w, wb + kh * KWT + kw);
#pragma unroll
              for (int v = 0; v < VPT; ++v) acc[v] += wv * win[v + kw];
            }
          } else {
            for (int kw = 0; kw < KW; ++kw) {
              const C wv = T::load(p.w, wb + kh * KW + kw);
              const C* sc = sr + kw * dw;
#pragma unroll
              for (int v = 0; v < VPT; ++v) acc[v] += wv * sc[v * sw];
            }
          }
        }
        const int64_t yb = ((n * p.O + o) * p.OH + oh) * p.OW + owb;  // NCHW
        if (d.vec_store && nv == VPT) {  // OW % VPT == 0: yb is a whole pack
          C out[VPT];
#pragma unroll
          for (int v = 0; v < VPT; ++v) out[v] = epilogue_value<T>(acc[v], yb + v, o, p.ep);
          store_pack(p.y, yb / VPT, T::pack(out));
        } else {
#pragma unroll
          for (int v = 0; v < VPT; ++v)
            if (v < nv) T::store(p.y, yb + v, epilogue_value<T>(acc[v], yb + v, o, p.ep));
        }
      }
    }
  }
}

template <class T>
int conv_depthwise_launch(const ConvParams& p, const DwPlan& d, uint32_t blocks, gpuStream_t s) {
  DwArgs a;
  a.c = p, a.d = d;
  const size_t smem = static_cast<size_t>(d.smem);
  switch (d.kwt) {
    case 3: conv_depthwise<T, 3><<<blocks, kConvThreads, smem, s>>>(a); break;
    case 5: conv_depthwise<T, 5><<<blocks, kConvThreads, smem, s>>>(a); break;
    default: conv_depthwise<T, 0><<<blocks, kConvThreads, smem, s>>>(a); break;
  }
  return static_cast<int>(gpuGetLastError());
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

DwPlan plan_conv_depthwise(Dt dt, const ConvParams& p, int64_t smem_limit, int items) {
  DwPlan d;
  if (dt != Dt::f32 && dt != Dt::f16 && dt != Dt::bf16) return d;
  if (p.groups != p.C || p.C < 1 || p.O % p.C != 0) return d;
  const int vpt = dt == Dt::f32 ? 4 : 8;
  const DepthwiseTiles t = plan_depthwise_tiles(vpt, p.N * p.C, p.OH, p.OW, p.KH, p.KW, p.sh, p.sw, p.dh, p.dw,
                                                smem_limit / 4, items);  // the window staged as float
  if (!t.ok) return d;
  d.vpt = vpt;
  d.tow = static_cast<int>(t.tow), d.toh = static_cast<int>(t.toh), d.pb = static_cast<int>(t.pb);
  d.iwt = static_cast<int>(t.iwt), d.iht = static_cast<int>(t.iht), d.smem = t.pb * t.iwt * t.iht * 4;
  d.wtiles = t.wtiles, d.htiles = t.htiles, d.ptiles = t.ptiles, d.tiles = t.tiles;
  d.kwt = (p.sw == 1 && p.dw == 1 && (p.KW == 3 || p.KW == 5)) ? static_cast<int>(p.KW) : 0;
  d.vec_load = p.W % vpt == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  d.vec_store = p.OW % vpt == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
  d.ok = true;
  return d;
}

int launch_conv_depthwise(Dt dt, const ConvParams& p, const DwPlan& plan, uint32_t blocks, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  if (!plan.ok) return -1;
  switch (dt) {
    case Dt::f32: return conv_depthwise_launch<F32>(p, plan, blocks, s);
    case Dt::f16: return conv_depthwise_launch<F16>(p, plan, blocks, s);
    case Dt::bf16: return conv_depthwise_launch<BF16>(p, plan, blocks, s);
    default: break;
  }
  return -1;
}

int64_t conv_mma_smem(const ConvParams& p) {
#if defined(KF_HIP)
  (void)p;
  return INT64_MAX;  // not built: never fits
#else
  const int64_t K = p.C * p.KH * p.KW;
  return kMmaMainBytes + ((K + kMmaBK - 1) / kMmaBK) * kMmaBK * int64_t(sizeof(MmaTap));
#endif
}

int launch_conv_mma(Dt dt, const ConvParams& p, uint32_t blocks, void* stream) {
#if defined(KF_HIP)
  (void)dt, (void)p, (void)blocks, (void)stream;
  return -1;
#else
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  const int smem = static_cast<int>(conv_mma_smem(p));
  const void* fn = dt == Dt::f16 ? reinterpret_cast<const void*>(&conv_mma<F16, false>)
                 : dt == Dt::bf16 ? reinterpret_cast<const void*>(&conv_mma<BF16, true>) : nullptr;
  if (!fn) return -1;
  if (smem > 48 * 1024) {
    const gpuError_t e = gpuFuncSetAttribute(fn, gpuFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != gpuSuccess) return static_cast<int>(e);
  }
  if (dt == Dt::f16) conv_mma<F16, false><<<blocks, kConvThreads, static_cast<size_t>(smem), s>>>(p);
  else conv_mma<BF16, true><<<blocks, kConvThreads, static_cast<size_t>(smem), s>>>(p);
  return static_cast<int>(gpuGetLastError());
#endif
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
