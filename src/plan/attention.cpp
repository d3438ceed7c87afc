#include "plan/attention.hpp"

#include <algorithm>

namespace kf::plan {

AttnGeometry attn_geometry(const std::vector<Shape>& in) {
  AttnGeometry g;
  g.B = in[0][0];
  g.Hq = in[0][1];
  g.SqT = in[0][2];
  g.D = in[0][3];
  g.Hkv = in[1][1];
  g.SkT = in[1][2];
  g.varlen = in.size() > 5 && !in[5].empty();
  g.nseq = g.varlen ? in[5][0] - 1 : g.B;
  return g;
}

std::string decode_refusal(const AttnGeometry& g, const Attrs& a, bool block_mask) {
  if (g.varlen) return "it does not take packed sequences (cu_seqlens)";
  if (g.SqT != 1) return "it takes one query row per sequence (Sq = " + std::to_string(g.SqT) + ")";
  if (a.p > 0) return "it does not apply dropout";
  if (block_mask) return "it does not take a block mask";
  return "";
}

std::string decode_head_dim_refusal(int64_t D, int64_t multiple) {
  if (D % multiple != 0 || D > 256)
    return "it takes head dimensions that are multiples of " + std::to_string(multiple) + " up to 256 (D = " +
           std::to_string(D) + ")";
  return "";
}

DecodeShape decode_shape(int64_t D, int64_t pack, int64_t G, int64_t max_heads, int64_t max_lanes) {
  DecodeShape s;
  const int64_t npk = D / pack;
  while (s.lanes < npk && s.lanes < 32 && s.lanes < max_lanes) s.lanes *= 2;
  s.packs_per_lane = static_cast<int>((npk + s.lanes - 1) / s.lanes);
  s.nchunk = static_cast<int>((G + max_heads - 1) / max_heads);
  s.heads = static_cast<int>((G + s.nchunk - 1) / s.nchunk);
  return s;
}

KeySplit decode_split(int64_t Sk, int64_t base, int64_t slots, int64_t step, int64_t forced) {
  int64_t n = forced;
  if (n == 0) n = std::clamp<int64_t>(slots / std::max<int64_t>(base, 1), 1, std::max<int64_t>(Sk / 256, 1));
  n = std::clamp<int64_t>(n, 1, std::min<int64_t>(256, std::max<int64_t>(Sk, 1)));
  int64_t len = std::max<int64_t>((Sk + n - 1) / n, 1);
  if (forced == 0) len = (len + step - 1) / step * step;
  return {n, len};
}

KeySplit flash_split(int64_t Sk, int64_t base, int64_t target, int64_t bk, int64_t forced) {
  int64_t n = 1;
  if (forced >= 1) n = forced;
  else if (base < target / 2 && Sk >= 512) n = std::min<int64_t>({(target + base - 1) / base, Sk / 256, 64});
  n = std::max<int64_t>(1, n);
  if (n == 1) return {1, Sk};
  const int64_t per = (Sk + n - 1) / n;
  return {n, (per + bk - 1) / bk * bk};
}

RopePositions rope_positions(const AttnGeometry& g) {
  RopePositions r;
  r.pmin = g.varlen ? -g.SqT : std::min<int64_t>(0, g.SkT - g.SqT);
  r.npos = std::max<int64_t>(g.SkT - 1, 0) - r.pmin + 1;
  return r;
}

RopeTable rope_table_for(const RopeTable& have, const RopeTable& want) {
  const bool same = have.npos > 0 && have.D == want.D && have.base == want.base && have.f64 == want.f64;
  if (same && have.pmin <= want.pmin && want.pmin + want.npos <= have.pmin + have.npos) return have;
  RopeTable t = want;
  int64_t end = want.pmin + want.npos;
  if (same) {
    t.pmin = std::min(have.pmin, want.pmin);
    end = std::max(end, have.pmin + have.npos);
  }
  end += std::clamp<int64_t>((end - t.pmin) / 4, 256, 16384);
  t.npos = end - t.pmin;
  return t;
}

}  // namespace kf::plan
