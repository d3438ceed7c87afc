// Elementwise fusions (docs/ops.md section 1) in CUDA/HIP: the counterpart of shaders/eltwise.comp.
// A thread owns whole 16-byte packs of the output. A block handles tiles of kEltwiseThreads *
// kEltwiseItems packs, each thread issuing the loads of its kEltwiseItems packs before computing any, so
// that enough bytes are in flight to saturate memory; blocks stride over the tiles. Operands of the
// output's shape, and broadcast or packed operands whose features are a multiple of the pack, are read
// as aligned 16-byte packs; others are gathered per element. The last, partial pack is read and written
// element by element (the tail path), so nothing outside a tensor is touched.
#include "hal/cuda/common.cuh"

namespace kf::hal::cuda {
namespace {

template <EltOp OP>
constexpr bool kRandom = OP == EltOp::dropout || OP == EltOp::gelu_dropout || OP == EltOp::bias_gelu_dropout ||
                         OP == EltOp::add_dropout_residual;

// Ops whose operand 1 is a bias of the features shape (the bias ops), and the gated ops, whose packed
// form reads x and the gate from input 0 [.., 2F]: the kernel loads these packs with the others, before
// any store (below). Other ops keep the plain loads: the extra paths cost registers where the broadcast
// is not the common case (relu f16: 32 to 48; f32 add spilled 16 bytes; prelu_bias's bias, operand 2,
// 24-60 bytes at 80 registers).
template <EltOp OP>
constexpr bool kBias1 = OP == EltOp::bias_relu || OP == EltOp::bias_gelu || OP == EltOp::bias_gelu_tanh ||
                        OP == EltOp::bias_silu || OP == EltOp::bias_gelu_dropout;
template <EltOp OP> constexpr bool kGated = OP == EltOp::swiglu || OP == EltOp::geglu;

// The fused function of one element: x (input 0), b (input 1 or the gate), c (input 2). M: Math<C, FAST>.
template <EltOp OP, class M, class C>
KF_DEV C apply(C x, C b, C c) {
  if constexpr (OP == EltOp::add_relu || OP == EltOp::bias_relu) return relu_f<M>(x + b);
  else if constexpr (OP == EltOp::mul_relu) return relu_f<M>(x * b);
  else if constexpr (OP == EltOp::add_sigmoid) return sigmoid_f<M>(x + b);
  else if constexpr (OP == EltOp::mul_tanh) return tanh_f<M>(x * b);
  else if constexpr (OP == EltOp::bias_gelu || OP == EltOp::bias_gelu_dropout) return gelu_f<M>(x + b);
  else if constexpr (OP == EltOp::bias_gelu_tanh) return gelu_tanh_f<M>(x + b);
  else if constexpr (OP == EltOp::bias_silu) return silu_f<M>(x + b);
  else if constexpr (OP == EltOp::swiglu) return silu_f<M>(b) * x;
  else if constexpr (OP == EltOp::geglu) return gelu_f<M>(b) * x;
  else if constexpr (OP == EltOp::mish_scale) return mish_f<M>(x) * b;
  else if constexpr (OP == EltOp::prelu_bias) {
    const C s = x + c;
    return s >= C(0) ? s : b * s;
  } else if constexpr (OP == EltOp::gelu_dropout || OP == EltOp::gelu) return gelu_f<M>(x);
  else if constexpr (OP == EltOp::dropout || OP == EltOp::add_dropout_residual || OP == EltOp::copy ||
                     OP == EltOp::mse_backward)
    return x;  // (mse_backward: finish() applies 2 (a - b) / n)
  else if constexpr (OP == EltOp::add) return x + b;
  else if constexpr (OP == EltOp::mul) return x * b;
  else if constexpr (OP == EltOp::prelu) return x >= C(0) ? x : b * x;
  else if constexpr (OP == EltOp::relu) return relu_f<M>(x);
  else if constexpr (OP == EltOp::sigmoid) return sigmoid_f<M>(x);
  else if constexpr (OP == EltOp::tanh) return tanh_f<M>(x);
  else if constexpr (OP == EltOp::gelu_tanh) return gelu_tanh_f<M>(x);
  else if constexpr (OP == EltOp::silu) return silu_f<M>(x);
  else if constexpr (OP == EltOp::mish) return mish_f<M>(x);
  // Backward ops: x is dy (or a), b is x (or b).
  else if constexpr (OP == EltOp::relu_backward) return b > C(0) ? x : C(0);  // torch: passes where x > 0
  else if constexpr (OP == EltOp::sigmoid_backward) return x * d_sigmoid_g(b);
  else if constexpr (OP == EltOp::tanh_backward) return x * d_tanh_g(b);
  else if constexpr (OP == EltOp::gelu_backward || OP == EltOp::gelu_tanh_backward || OP == EltOp::silu_backward ||
                     OP == EltOp::mish_backward) {
    if constexpr (M::kFast) {  // 16-bit dtypes: common.cuh's approximate forms, without the root series
      if constexpr (OP == EltOp::gelu_backward) return x * d_gelu_fast(b);
      else if constexpr (OP == EltOp::gelu_tanh_backward) return x * d_gelu_tanh_fast(b);
      else if constexpr (OP == EltOp::silu_backward) return x * d_silu_fast(b);
      else return x * d_mish_fast(b);
    } else {
      if constexpr (OP == EltOp::gelu_backward) return x * d_gelu_g(b);
      else if constexpr (OP == EltOp::gelu_tanh_backward) return x * d_gelu_tanh_g(b);
      else if constexpr (OP == EltOp::silu_backward) return x * d_silu_g(b);
      else return x * d_mish_g(b);
    }
  }
  else static_assert(OP == EltOp::count, "eltwise.cu: an EltOp without a formula");
}

// i mod feat (and i / feat), in 32 bits when both fit: 64-bit division is slow on GPUs.
KF_DEV int64_t mod_feat(int64_t i, int64_t feat) {
  if (((i | feat) >> 32) == 0) return static_cast<uint32_t>(i) % static_cast<uint32_t>(feat);
  return i % feat;
}
KF_DEV int64_t div_feat(int64_t i, int64_t feat) {
  if (((i | feat) >> 32) == 0) return static_cast<uint32_t>(i) / static_cast<uint32_t>(feat);
  return i / feat;
}

// Operand 1 or 2 (pointer q, layout mode) for the VW elements from i0 (a whole pack): raw is its pack
// as the kernel loaded it for kFull, and for kFeatures without gather where BIAS (load_raw).
template <class T, bool BIAS>
KF_DEV void load_operand(const void* q, uint32_t mode, const EltwiseParams& p, int64_t i0, const uint4& raw,
                         typename T::C (&dst)[T::VW]) {
  using C = typename T::C;
  constexpr int VW = T::VW;
  if (mode == kFull || (BIAS && mode == kFeatures && !p.gather)) {
    T::unpack(raw, dst);
  } else if (mode == kFeatures && !p.gather) {
    T::unpack(load_pack(q, mod_feat(i0, p.feat) / VW), dst);
  } else if (mode == kFeatures) {
    int64_t f = mod_feat(i0, p.feat);
#pragma unroll
    for (int k = 0; k < VW; ++k) {
      dst[k] = T::load(q, f);
      if (++f == p.feat) f = 0;
    }
  } else if (mode == kScalar) {
    const C s = T::load(q, 0);
#pragma unroll
    for (int k = 0; k < VW; ++k) dst[k] = s;
  } else {
#pragma unroll
    for (int k = 0; k < VW; ++k) dst[k] = C(0);
  }
}

// The raw pack of operand 1 for output pack pk where it is read as a pack (the kernel's loads, all
// issued before any store: a broadcast operand's pack loaded in process_pack, after the previous pack's
// store, waited a round trip each, as the compiler must assume the store may alias it).
template <class T>
KF_DEV uint4 load_raw(const void* q, uint32_t mode, const EltwiseParams& p, int64_t pk) {
  if (mode == kFull) return load_pack(q, pk);
  if (mode == kFeatures && !p.gather) return load_pack(q, mod_feat(pk * T::VW, p.feat) / T::VW);
  return make_uint4(0, 0, 0, 0);
}

// Operand 1 or 2 at element i alone (the tail path).
template <class T>
KF_DEV typename T::C load_operand_elem(const void* q, uint32_t mode, const EltwiseParams& p, int64_t i) {
  using C = typename T::C;
  if (mode == kFull) return T::load(q, i);
  if (mode == kFeatures) return T::load(q, mod_feat(i, p.feat));
  if (mode == kScalar) return T::load(q, 0);
  return C(0);
}

// Dropout of value v at element i given its Philox word; then the residual of add_dropout_residual.
// keep(i) = (word >> 8) >= thr (docs/ops.md), compared as word > thr 256 - 1 (thr in [1, 2^24]: in 32
// bits 255 .. 2^32 - 1, the product wrapping to 0 for 2^24): one instruction a value fewer.
template <EltOp OP, class C>
KF_DEV C finish(C v, C b, unsigned word, const EltwiseParams& p) {
  if constexpr (kRandom<OP>) {
    if (p.thr != 0u) {
      C keep;
      if constexpr (sizeof(C) == 8) keep = p.keep_d;
      else keep = p.keep_f;
      v = word > p.thr * 256u - 1u ? v * keep : C(0);
    }
    if constexpr (OP == EltOp::add_dropout_residual) v += b;
  }
  if constexpr (OP == EltOp::mse_backward) {  // d mean((a - b)^2) / d a = 2 (a - b) / n
    if constexpr (sizeof(C) == 8) v = C(2) * (v - b) / p.n_d;
    else v = C(2) * (v - b) / p.n_f;
  }
  (void)b, (void)word, (void)p;
  return v;
}

// One whole output pack pk (elements i0 .. i0 + VW - 1), given the raw packs of the full-size operands.
template <EltOp OP, class T>
KF_DEV void process_pack(const EltwiseParams& p, int64_t pk, const uint4& r0, const uint4& r1, const uint4& r2) {
  using C = typename T::C;
  constexpr int VW = T::VW;
  const int64_t i0 = pk * VW;
  C x[VW], b[VW], c[VW];
  if (!p.packed) {
    T::unpack(r0, x);
    load_operand<T, kBias1<OP>>(p.in1, p.mode1, p, i0, r1, b);
  } else if (kGated<OP> && !p.gather) {  // x and gate of [.., 2F] as aligned packs (loaded by the kernel)
    T::unpack(r0, x);
    T::unpack(r1, b);
  } else {
    int64_t r = div_feat(i0, p.feat), f = i0 - r * p.feat;
#pragma unroll
    for (int k = 0; k < VW; ++k) {
      const int64_t base = r * 2 * p.feat + f;
      x[k] = T::load(p.in0, base);
      b[k] = T::load(p.in0, base + p.feat);
      if (++f == p.feat) f = 0, ++r;
    }
  }
  load_operand<T, false>(p.in2, p.mode2, p, i0, r2, c);

  C y[VW];
  uint4 words = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int k = 0; k < VW; ++k) {
    const int64_t i = i0 + k;
    if constexpr (kRandom<OP>) {
      if (p.thr != 0u && (k == 0 || (i & 3) == 0)) words = philox_block(i, p);
    }
    y[k] = finish<OP>(apply<OP, Math<C, T::FAST>>(x[k], b[k], c[k]), b[k], word_of(words, i), p);
  }
  store_pack(p.out, pk, T::pack(y));
}

// Element i alone (the last, partial pack).
template <EltOp OP, class T>
KF_DEV void process_elem(const EltwiseParams& p, int64_t i) {
  using C = typename T::C;
  C x, b;
  if (!p.packed) {
    x = T::load(p.in0, i);
    b = load_operand_elem<T>(p.in1, p.mode1, p, i);
  } else {
    const int64_t r = div_feat(i, p.feat), f = i - r * p.feat, base = r * 2 * p.feat + f;
    x = T::load(p.in0, base);
    b = T::load(p.in0, base + p.feat);
  }
  const C c = load_operand_elem<T>(p.in2, p.mode2, p, i);
  unsigned word = 0;
  if constexpr (kRandom<OP>) {
    if (p.thr != 0u) word = word_of(philox_block(i, p), i);
  }
  T::store(p.out, i, finish<OP>(apply<OP, Math<C, T::FAST>>(x, b, c), b, word, p));
}

template <EltOp OP, class T>
__global__ void __launch_bounds__(kEltwiseThreads) eltwise_kernel(const EltwiseParams p) {
  constexpr int VW = T::VW, ITEMS = kEltwiseItems, WG = kEltwiseThreads;
  const int64_t whole = p.n / VW;                  // packs entirely inside the tensor
  const int64_t npacks = (p.n + VW - 1) / VW;
  const int64_t tile = int64_t(WG) * ITEMS;
  const int64_t ntiles = (npacks + tile - 1) / tile;
  const bool full1 = p.mode1 == kFull && !p.packed, full2 = p.mode2 == kFull;
  const bool packs_packed = kGated<OP> && p.packed && !p.gather;
  // A bias over the features as whole packs: its element offset (pk VW) mod feat is found once a tile
  // and stepped by WG VW from item to item (a remainder by the run-time feat is some 25 instructions; one
  // a pack took 8 % of 16-bit bias_gelu_dropout's issue slots, Nsight Compute on an H100).
  // (32-bit offsets: 64-bit ones cost the 16-bit bias ops 2 registers, over 64: 3 blocks an SM, not 4.)
  const bool feat_packs = kBias1<OP> && p.mode1 == kFeatures && !p.gather && !p.packed && p.feat < (int64_t(1) << 31);
  const uint32_t feat = static_cast<uint32_t>(p.feat);
  const uint32_t feat_step = feat_packs ? static_cast<uint32_t>(mod_feat(int64_t(WG) * VW, p.feat)) : 0u;
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
    const int64_t p0 = t * tile + threadIdx.x;
    uint32_t f = feat_packs ? static_cast<uint32_t>(mod_feat(p0 * VW, p.feat)) : 0u;
    uint4 r0[ITEMS], r1[ITEMS], r2[ITEMS];
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int64_t pk = p0 + int64_t(it) * WG;
      const bool in = pk < whole;
      if (kGated<OP> && packs_packed) {  // x and gate of row r, features f .. f + VW - 1 of [.., 2F]
        r0[it] = r1[it] = make_uint4(0, 0, 0, 0);
        if (in) {
          const int64_t i0 = pk * VW, r = div_feat(i0, p.feat), f = i0 - r * p.feat, base = r * 2 * p.feat + f;
          r0[it] = load_pack(p.in0, base / VW);
          r1[it] = load_pack(p.in0, (base + p.feat) / VW);
        }
      } else {
        r0[it] = in && !p.packed ? load_pack(p.in0, pk) : make_uint4(0, 0, 0, 0);
        if constexpr (kBias1<OP>) {
          if (feat_packs) {
            r1[it] = in ? load_pack(p.in1, f / VW) : make_uint4(0, 0, 0, 0);
            f += feat_step;  // both below feat < 2^31: one subtraction brings the sum back
            if (f >= feat) f -= feat;
          } else {
            r1[it] = in && !p.packed ? load_raw<T>(p.in1, p.mode1, p, pk) : make_uint4(0, 0, 0, 0);
          }
        } else {
          r1[it] = in && full1 ? load_pack(p.in1, pk) : make_uint4(0, 0, 0, 0);
        }
      }
      r2[it] = in && full2 ? load_pack(p.in2, pk) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int64_t pk = p0 + int64_t(it) * WG;
      if (pk < whole) {
        process_pack<OP, T>(p, pk, r0[it], r1[it], r2[it]);
      } else if (pk < npacks) {
        for (int64_t i = pk * VW; i < p.n; ++i) process_elem<OP, T>(p, i);
      }
    }
  }
}

template <EltOp OP>
int launch_op(Dt dt, const EltwiseParams& p, uint32_t blocks, gpuStream_t s) {
  switch (dt) {
    case Dt::f32: eltwise_kernel<OP, F32><<<blocks, kEltwiseThreads, 0, s>>>(p); break;
    case Dt::f16: eltwise_kernel<OP, F16><<<blocks, kEltwiseThreads, 0, s>>>(p); break;
    case Dt::bf16: eltwise_kernel<OP, BF16><<<blocks, kEltwiseThreads, 0, s>>>(p); break;
    case Dt::f64: eltwise_kernel<OP, F64><<<blocks, kEltwiseThreads, 0, s>>>(p); break;
  }
  return static_cast<int>(gpuGetLastError());
}

}  // namespace

int launch_eltwise(EltOp op, Dt dt, const EltwiseParams& p, uint32_t blocks, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (op) {
#define KF_CUDA_CASE(name) \
  case EltOp::name: return launch_op<EltOp::name>(dt, p, blocks, s);
    KF_CUDA_ELTWISE_OPS(KF_CUDA_CASE)
#undef KF_CUDA_CASE
    case EltOp::count: break;
  }
  return -1;
}

// Whether this binary holds code the current device runs: the runtime looks for an image of a kernel
// (SASS of the device's architecture, or PTX it can compile) without launching it.
// The fault tests' kernel that runs long and ends by itself (CudaDevice::record_long_kernel, which declares
// it: one thread doing rounds x 65,536 dependent multiply-adds on out[0]).
int launch_long_kernel(float* out, uint32_t rounds, void* stream);

namespace {
struct LongKernelParams {
  float* out;
  uint32_t rounds;
};

__global__ void long_kernel(LongKernelParams p) {
  float x = p.out[0];
  for (uint32_t r = 0; r < p.rounds; ++r)
    for (uint32_t i = 0; i < 65536u; ++i) x = x * 0.9999999f + 1e-7f;
  p.out[0] = x;
}
}  // namespace

// One argument, as every launch here (tools/cuda-emu rewrites launches of that form).
int launch_long_kernel(float* out, uint32_t rounds, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  const LongKernelParams p{out, rounds};
  long_kernel<<<1, 1, 0, s>>>(p);
  return static_cast<int>(gpuGetLastError());
}

int check_kernels_load() {
  gpuFuncAttributes a;
  return static_cast<int>(
      gpuFuncGetAttributes(&a, reinterpret_cast<const void*>(&eltwise_kernel<EltOp::copy, F32>)));
}

}  // namespace kf::hal::cuda
