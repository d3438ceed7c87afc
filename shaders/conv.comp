#version 450
// 2-D convolution (NCHW, as torch.nn.Conv2d: any stride, zero padding, dilation, groups) as an implicit
// GEMM on mm.comp's portable tiling: per group g, C[m, o] = sum_k A[m, k] B[k, o] with m the output
// pixel (n, oh, ow), o the group's output channel and k = (c, kh, kw) over the group's input channels;
// A is never materialized: its tile loads compute the im2col address (zero outside the image). A
// workgroup of 256 invocations computes 64 pixels x 64 channels from 16-deep slices in shared memory,
// each invocation a 4 x 4 register block; accumulation in f32. Epilogue: + bias, or the batch norm
// folded to a per-channel scale and shift (FOLD_BN below writes them), activation, dropout (element
// index = the output's linear index), stored in pairs of pixels (whole 32-bit words for 16-bit dtypes)
// when an image plane has an even number of pixels.
// FOLD_BN: the batch-norm fold of conv2d_bn_relu, one invocation per output channel:
// scale = w / sqrt(var + eps), shift = (conv_bias - mean) scale + b, in f32, into the workspace.
#include "common.glsl"
#include "activations.glsl"
#include "philox.glsl"

layout(local_size_x = 256) in;

#ifdef FOLD_BN
layout(constant_id = 1) const bool HAS_BIAS = false;
DECLARE_BUFFER(0, BIAS, readonly)
DECLARE_BUFFER(1, BNW, readonly)
DECLARE_BUFFER(2, BNB, readonly)
DECLARE_BUFFER(3, MEAN, readonly)
DECLARE_BUFFER(4, VAR, readonly)
layout(std430, binding = 5) writeonly buffer SS { float ss[]; };
layout(push_constant) uniform PC {
  uint O;
  float eps;
} pc;

void main() {
  const uint o = gl_GlobalInvocationID.x;
  if (o >= pc.O) return;
  const float s = float(LOAD_ELEM(BNW, o)) / sqrt(float(LOAD_ELEM(VAR, o)) + pc.eps);
  const float bias = HAS_BIAS ? float(LOAD_ELEM(BIAS, o)) : 0.0;
  ss[o] = s;
  ss[pc.O + o] = (bias - float(LOAD_ELEM(MEAN, o))) * s + float(LOAD_ELEM(BNB, o));
}

#elif defined(IM2COL)
// The column matrix of the tensor-core path (hal/vulkan/conv.cpp; one group, 16-bit dtypes,
// K a multiple of 8): col[m, k] = the input under kernel tap k = (c, kh, kw) of output pixel
// m = (n, oh, ow), zero outside the image; one 16-byte pack of 8 taps per invocation. mm_coopmat.comp
// then computes W col^T per image.
DECLARE_BUFFER(0, X, readonly)
DECLARE_BUFFER(4, Y, )
layout(push_constant) uniform PC {
  uint N, C, H, W, O, groups;
  uint khw, strides, pads, dils;  // {height | width << 16}
} pc;

void main() {
  const uint KH = pc.khw & 0xffffu, KW = pc.khw >> 16;
  const uint SH = pc.strides & 0xffffu, SW = pc.strides >> 16;
  const uint PH = pc.pads & 0xffffu, PW = pc.pads >> 16;
  const uint DH = pc.dils & 0xffffu, DW = pc.dils >> 16;
  const uint OH = (pc.H + 2u * PH - DH * (KH - 1u) - 1u) / SH + 1u;
  const uint OW = (pc.W + 2u * PW - DW * (KW - 1u) - 1u) / SW + 1u;
  const uint P = OH * OW, M = pc.N * P, KHW = KH * KW, KP = pc.C * KHW / 8u;
  // One invocation per 16-byte pack of col, packs in memory order: neighbouring invocations write
  // neighbouring packs of a row (whole lines), and read the input under neighbouring taps of one pixel
  // (scattered, but each input element is read by KH * KW taps close in time: the caches serve them).
  // (Pixels fastest, one pack or one whole row per invocation, wrote 16-byte pieces a row apart and
  // took 0.34 ms for ResNet-50's 3 x 3 64 -> 64 layer on an H100, 3x its product.)
  const uint total = M * KP;
  for (uint e = gl_GlobalInvocationID.x; e < total; e += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
    const uint gm = e / KP, kp = e % KP;
    const uint n = gm / P, pix = gm % P, oh = pix / OW, ow = pix % OW;
    const int ih0 = int(oh * SH) - int(PH), iw0 = int(ow * SW) - int(PW);
    const uint t0 = kp * 8u, r = t0 % KHW;
    uint c = t0 / KHW, kh = r / KW, kw = r % KW;  // the first tap, then stepped
    // The 16-bit values' bits as they are (zero is 0 in f16 and bf16): a copy, no conversion to round.
    uint v[8];
    [[unroll]] for (uint q = 0; q < 8u; ++q) {
      const int ih = ih0 + int(kh * DH), iw = iw0 + int(kw * DW);
      v[q] = 0u;
      if (ih >= 0 && ih < int(pc.H) && iw >= 0 && iw < int(pc.W)) {
        const uint i = ((n * pc.C + c) * pc.H + uint(ih)) * pc.W + uint(iw);
        v[q] = (X_w.w[i >> 1] >> (16u * (i & 1u))) & 0xffffu;
      }
      if (++kw == KW) {
        kw = 0u;
        if (++kh == KH) {
          kh = 0u;
          ++c;
        }
      }
    }
    Y_v.v[e] = uvec4(v[0] | (v[1] << 16), v[2] | (v[3] << 16), v[4] | (v[5] << 16), v[6] | (v[7] << 16));
  }
}

#else
#include "conv_common.glsl"

const uint BM = 64, BN_ = 64, BK = 16;
shared float As[BK][BM];
shared float Bs[BK][BN_];
shared float Cs[BN_][BM + 1];

void main() {
  const uint KH = pc.khw & 0xffffu, KW = pc.khw >> 16;
  const uint SH = pc.strides & 0xffffu, SW = pc.strides >> 16;
  const uint PH = pc.pads & 0xffffu, PW = pc.pads >> 16;
  const uint DH = pc.dils & 0xffffu, DW = pc.dils >> 16;
  const uint OH = (pc.H + 2u * PH - DH * (KH - 1u) - 1u) / SH + 1u;
  const uint OW = (pc.W + 2u * PW - DW * (KW - 1u) - 1u) / SW + 1u;
  const uint P = OH * OW, M = pc.N * P;
  const uint Cg = pc.C / pc.groups, Og = pc.O / pc.groups, KHW = KH * KW, K = Cg * KHW;
  const uint lid = gl_LocalInvocationID.x, tx = lid % 16u, ty = lid / 16u;
  const uint g = gl_WorkGroupID.z, o0 = gl_WorkGroupID.y * BN_;
#if defined(DT_F16) || defined(DT_BF16)
  const bool pairs = (P % 2u) == 0u;
#else
  const bool pairs = false;
#endif

  for (uint mt = gl_WorkGroupID.x; mt * BM < M; mt += gl_NumWorkGroups.x) {
    const uint m0 = mt * BM;
    float acc[4][4];
    [[unroll]] for (uint i = 0; i < 4u; ++i) [[unroll]] for (uint j = 0; j < 4u; ++j) acc[i][j] = 0.0;

    for (uint k0 = 0; k0 < K; k0 += BK) {
      [[unroll]] for (uint q = 0; q < 4u; ++q) {
        const uint e = lid + 256u * q;
        {  // A: 64 pixels x 16 k, pixels fastest (neighbouring invocations read neighbouring pixels)
          const uint m = e % BM, k = e / BM, gm = m0 + m, gk = k0 + k;
          float v = 0.0;
          if (gm < M && gk < K) {
            const uint n = gm / P, pix = gm % P, oh = pix / OW, ow = pix % OW;
            const uint c = gk / KHW, r = gk % KHW, kh = r / KW, kw = r % KW;
            const int ih = int(oh * SH + kh * DH) - int(PH), iw = int(ow * SW + kw * DW) - int(PW);
            if (ih >= 0 && ih < int(pc.H) && iw >= 0 && iw < int(pc.W))
              v = float(LOAD_ELEM(X, ((n * pc.C + g * Cg + c) * pc.H + uint(ih)) * pc.W + uint(iw)));
          }
          As[k][m] = v;
        }
        {  // B = W [O, Cg, KH, KW]: the group's rows, k fastest
          const uint o = e / BK, k = e % BK, go = o0 + o, gk = k0 + k;
          Bs[k][o] = (go < Og && gk < K) ? float(LOAD_ELEM(WT, (g * Og + go) * K + gk)) : 0.0;
        }
      }
      barrier();
      [[unroll]] for (uint k = 0; k < BK; ++k) {
        float a[4], b[4];
        [[unroll]] for (uint i = 0; i < 4u; ++i) a[i] = As[k][ty + 16u * i];
        [[unroll]] for (uint j = 0; j < 4u; ++j) b[j] = Bs[k][tx + 16u * j];
        [[unroll]] for (uint i = 0; i < 4u; ++i) [[unroll]] for (uint j = 0; j < 4u; ++j) acc[i][j] += a[i] * b[j];
      }
      barrier();
    }

    // acc[i][j]: pixel ty + 16 i, channel tx + 16 j; through shared memory so that stores run along pixels.
    [[unroll]] for (uint i = 0; i < 4u; ++i) [[unroll]] for (uint j = 0; j < 4u; ++j) Cs[tx + 16u * j][ty + 16u * i] = acc[i][j];
    barrier();
    for (uint e = lid; e < BM * BN_ / 2u; e += 256u) {
      const uint ol = e / (BM / 2u), ml = 2u * (e % (BM / 2u)), go = o0 + ol;
      if (go >= Og) continue;
      const uint o = g * Og + go;
      float v[2];
      uint idx[2];
      [[unroll]] for (uint h = 0; h < 2u; ++h) {
        const uint gm = m0 + ml + h, n = gm / P, pix = gm % P;
        idx[h] = (n * pc.O + o) * P + pix;
        v[h] = gm < M ? epilogue(Cs[ol][ml + h], o, idx[h]) : 0.0;
      }
      if (pairs) {  // P even: pixels ml, ml + 1 share a plane and a 32-bit word (M is even too)
        if (m0 + ml < M) {
#if defined(DT_F16)
          Y_w.w[idx[0] >> 1] = packHalf2x16(vec2(v[0], v[1]));
#elif defined(DT_BF16)
          Y_w.w[idx[0] >> 1] = pack_bf16x2(v[0], v[1]);
#endif
        }
      } else {
        [[unroll]] for (uint h = 0; h < 2u; ++h)
          if (m0 + ml + h < M) STORE_ELEM(Y, idx[h], FT(v[h]));
      }
    }
    barrier();
  }
}
#endif
