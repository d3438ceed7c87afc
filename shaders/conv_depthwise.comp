#version 450
// Depthwise 2-D convolution (groups == C: output channel o = c * mult + m reads input plane c alone; NCHW,
// any kernel size, stride, zero padding, dilation), the counterpart of hal/cuda/conv.cu conv_depthwise;
// conv.comp's implicit GEMM serves every other case. A workgroup of 256 invocations takes a tile of
// output pixels (TOW columns x TOH rows; whole rows where they fit, PB planes a workgroup for small
// images) of PB input planes (image n, channel c) and every output channel of those planes: it stages
// the tile's input window with its halo in shared memory as float (16-byte packs along the rows where W
// is a multiple of the pack: VEC_LOAD; zero outside the image), then each invocation computes VW
// neighbouring outputs of one row (the 16-byte pack: 4 for f32, 8 for f16 / bf16) with the taps kh, kw
// in increasing order in float (KWT = 3 or 5: KW with unit stride and dilation along W, each tap row
// read once into registers), and stores them through conv_common.glsl's epilogue (bias, or the batch norm
// folded to a per-channel scale and shift, activation, dropout at the output's NCHW linear index) as
// one 16-byte pack where OW is a multiple of the pack (VEC_STORE), else element by element.
// The host (hal/vulkan/conv.cpp) plans the tile so that PB * IHT * IWT <= SMEM floats.
#include "common.glsl"
#include "activations.glsl"
#include "philox.glsl"

layout(local_size_x = 256) in;

layout(constant_id = 5) const bool VEC_LOAD = false;
layout(constant_id = 6) const bool VEC_STORE = false;
layout(constant_id = 7) const uint KWT = 0;          // 0: any KW, stride, dilation; 3 or 5 (see above)

// The tile (src/ops/depthwise_tiles.hpp): output columns, rows, planes; the staged window of a plane.
#define CONV_PUSH_EXTRA uint tow, toh, pb, iwt, iht; uint wtiles, htiles, tiles;
#include "conv_common.glsl"

const uint SMEM = 4096;  // 16 KiB, the least every Vulkan device offers
shared float s[SMEM];

int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

void main() {
  const uint KH = pc.khw & 0xffffu, KW = pc.khw >> 16;
  const uint SH = pc.strides & 0xffffu, SW = pc.strides >> 16;
  const uint PH = pc.pads & 0xffffu, PW = pc.pads >> 16;
  const uint DH = pc.dils & 0xffffu, DW = pc.dils >> 16;
  const uint OH = (pc.H + 2u * PH - DH * (KH - 1u) - 1u) / SH + 1u;
  const uint OW = (pc.W + 2u * PW - DW * (KW - 1u) - 1u) / SW + 1u;
  const uint planes = pc.N * pc.C, HW = pc.H * pc.W, mult = pc.O / pc.C, KHW = KH * KW;
  const uint lid = gl_LocalInvocationID.x;
  const uint gx = (pc.tow + VW - 1u) / VW;  // VW-wide pieces along a tile row
  const uint items = pc.pb * pc.toh * gx, iwt = pc.iwt, iht = pc.iht;

  for (uint t = gl_WorkGroupID.x; t < pc.tiles; t += gl_NumWorkGroups.x) {  // uniform: every invocation reaches the barriers
    const uint wt = t % pc.wtiles, ht = (t / pc.wtiles) % pc.htiles, q0 = (t / (pc.wtiles * pc.htiles)) * pc.pb;
    const uint oh0 = ht * pc.toh, ow0 = wt * pc.tow;
    const int ih0 = int(oh0 * SH) - int(PH), iw0 = int(ow0 * SW) - int(PW);
    barrier();  // the previous tile's reads of s are done
    if (VEC_LOAD) {  // packs aligned to the image's column 0 (W % VW == 0): each wholly inside or outside it
      const int pk0 = floor_div(iw0, int(VW));
      const uint npk = uint(floor_div(iw0 + int(iwt) - 1, int(VW)) - pk0 + 1);
      const int wpk = int(pc.W / VW);
      for (uint e = lid; e < pc.pb * iht * npk; e += 256u) {
        const uint k = e % npk, r = (e / npk) % iht, j = e / (npk * iht);
        const uint q = q0 + j;
        const int ih = ih0 + int(r), pk = pk0 + int(k);
        FT v[VW];
        if (q < planes && ih >= 0 && ih < int(pc.H) && pk >= 0 && pk < wpk) {
          unpack(X_v.v[(q * HW + uint(ih) * pc.W) / VW + uint(pk)], v);
        } else {
          [[unroll]] for (uint u = 0; u < VW; ++u) v[u] = FT(0);
        }
        const uint row = (j * iht + r) * iwt;
        const int col0 = pk * int(VW) - iw0;
        [[unroll]] for (uint u = 0; u < VW; ++u) {
          const int col = col0 + int(u);
          if (col >= 0 && col < int(iwt)) s[row + uint(col)] = float(v[u]);
        }
      }
    } else {
      for (uint e = lid; e < pc.pb * iht * iwt; e += 256u) {
        const uint col = e % iwt, r = (e / iwt) % iht, j = e / (iwt * iht);
        const uint q = q0 + j;
        const int ih = ih0 + int(r), iw = iw0 + int(col);
        float v = 0.0;
        if (q < planes && ih >= 0 && ih < int(pc.H) && iw >= 0 && iw < int(pc.W))
          v = float(LOAD_ELEM(X, q * HW + uint(ih) * pc.W + uint(iw)));
        s[e] = v;
      }
    }
    barrier();
    for (uint e = lid; e < items; e += 256u) {
      const uint g = e % gx, r = (e / gx) % pc.toh, j = e / (gx * pc.toh);
      const uint q = q0 + j, oh = oh0 + r, owb = ow0 + g * VW;
      if (q >= planes || oh >= OH || owb >= OW) continue;
      // The valid outputs of this piece (the rest read staged zeros or other columns and are not stored).
      const uint nv = min(min(VW, OW - owb), pc.tow - g * VW);
      const uint n = q / pc.C, c = q % pc.C;
      const uint base = (j * iht + r * SH) * iwt + g * VW * SW;
      for (uint m = 0; m < mult; ++m) {
        const uint o = c * mult + m, wb = o * KHW;
        float acc[VW];
        [[unroll]] for (uint v = 0; v < VW; ++v) acc[v] = 0.0;
        for (uint kh = 0; kh < KH; ++kh) {
          const uint sr = base + kh * DH * iwt;
          if (KWT != 0u) {  // unit stride and dilation along W: the tap row once into registers
            float win[VW + 4u];
            [[unroll]] for (uint i = 0; i < VW + KWT - 1u; ++i) win[i] = s[sr + i];
            [[unroll]] for (uint kw = 0; kw < KWT; ++kw) {
              const float wv = float(LOAD_ELEM(WT, wb + kh * KWT + kw));
              [[unroll]] for (uint v = 0; v < VW; ++v) acc[v] += wv * win[v + kw];
            }
          } else {
            for (uint kw = 0; kw < KW; ++kw) {
              const float wv = float(LOAD_ELEM(WT, wb + kh * KW + kw));
              const uint sc = sr + kw * DW;
              [[unroll]] for (uint v = 0; v < VW; ++v) acc[v] += wv * s[sc + v * SW];
            }
          }
        }
        const uint yb = ((n * pc.O + o) * OH + oh) * OW + owb;  // NCHW
        if (VEC_STORE && nv == VW) {  // OW % VW == 0: yb is a whole pack
          FT outv[VW];
          [[unroll]] for (uint v = 0; v < VW; ++v) outv[v] = FT(epilogue(acc[v], o, yb + v));
          Y_v.v[yb / VW] = pack(outv);
        } else {
          [[unroll]] for (uint v = 0; v < VW; ++v)
            if (v < nv) STORE_ELEM(Y, yb + v, FT(epilogue(acc[v], o, yb + v)));
        }
      }
    }
  }
}
