// The tile plan of the depthwise convolution kernels (groups == C), shared by the CUDA kernel
// (hal/cuda/conv.cu conv_depthwise) and the Vulkan shader (shaders/conv_depthwise.comp), which stage a
// tile's input window the same way: pieces of vw outputs along a row, up to 32 a tile row; rows for about
// `items` pieces a workgroup, the same number in every row tile; several whole planes (image, channel) a
// workgroup when they are small; halved (planes, then rows, then columns) until the staged window fits
// `window_floats` floats. ok false: one row of outputs' window does not fit.
#pragma once
#include <algorithm>
#include <cstdint>

namespace kf {

struct DepthwiseTiles {
  bool ok = false;
  int64_t tow = 0, toh = 0, pb = 1;  // output columns and rows of a tile, planes a workgroup
  int64_t iwt = 0, iht = 0;          // the staged window of one plane
  int64_t wtiles = 0, htiles = 0, ptiles = 0, tiles = 0;
};

inline DepthwiseTiles plan_depthwise_tiles(int64_t vw, int64_t planes, int64_t OH, int64_t OW, int64_t KH, int64_t KW,
                                           int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t window_floats,
                                           int64_t items = 256) {
  DepthwiseTiles d;
  if (vw < 1 || planes < 1 || OH < 1 || OW < 1) return d;
  items = std::max<int64_t>(items, 1);
  const int64_t gx_full = (OW + vw - 1) / vw;
  int64_t gx = std::min<int64_t>(gx_full, 32);
  int64_t toh = std::clamp<int64_t>(items / gx, 1, OH), pb = 1;
  const auto balance = [&] {  // the same rows in every row tile
    const int64_t ht = (OH + toh - 1) / toh;
    toh = (OH + ht - 1) / ht;
  };
  balance();
  if (toh == OH && gx == gx_full) pb = std::clamp<int64_t>(items / (gx * OH), 1, planes);
  for (;;) {
    d.iwt = (gx * vw - 1) * sw + (KW - 1) * dw + 1;
    d.iht = (toh - 1) * sh + (KH - 1) * dh + 1;
    if (pb * d.iwt * d.iht <= window_floats) break;
    if (pb > 1) pb /= 2;
    else if (toh > 1) toh = (toh + 1) / 2, balance();
    else if (gx > 1) gx = (gx + 1) / 2;
    else return DepthwiseTiles{};
  }
  d.tow = gx == gx_full ? OW : gx * vw;
  d.toh = toh, d.pb = pb;
  d.wtiles = (OW + d.tow - 1) / d.tow, d.htiles = (OH + toh - 1) / toh, d.ptiles = (planes + pb - 1) / pb;
  d.tiles = d.wtiles * d.htiles * d.ptiles;
  d.ok = true;
  return d;
}

}  // namespace kf
