// Element types: sizes, names, and host conversions (IEEE half and bfloat16, round to nearest even).
#include "kf/dtype.hpp"

#include <cmath>
#include <cstring>

#include "kf/error.hpp"

namespace kf {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f64: return 8;
    case DType::i32: return 4;
  }
  return 0;
}

const char* to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
  }
  return "?";
}

DType dtype_from_string(const std::string& name) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i32})
    if (name == to_string(t)) return t;
  throw Error(ErrorCode::DType, "unknown dtype '" + name + "' (expected f32, f16, bf16, f64 or i32)");
}

bool is_float(DType t) { return t != DType::i32; }

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t man = x & 0x7fffffu;
  if (exp == 0xff) return uint16_t(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));  // inf / NaN
  int e = int(exp) - 127 + 15;
  if (e >= 0x1f) return uint16_t(sign | 0x7c00u);  // overflow to infinity
  if (e <= 0) {                                     // subnormal or zero
    if (e < -10) return uint16_t(sign);
    man |= 0x800000u;
    const int shift = 14 - e;
    uint32_t h = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = (uint32_t(e) << 10) | (man >> 13);
  const uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // may carry into the exponent: correct
  return uint16_t(sign | h);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (man == 0) {
      x = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp(float(man), -24);
      std::memcpy(&x, &f, 4);
      x |= sign;
    }
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000u | (man << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return uint16_t((x + rounding) >> 16);
}

float bf16_to_float(uint16_t b) {
  const uint32_t x = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

void store_element(DType t, void* dst, double v) {
  switch (t) {
    case DType::f32: { float f = float(v); std::memcpy(dst, &f, 4); break; }
    case DType::f16: { uint16_t h = float_to_half(float(v)); std::memcpy(dst, &h, 2); break; }
    case DType::bf16: { uint16_t b = float_to_bf16(float(v)); std::memcpy(dst, &b, 2); break; }
    case DType::f64: std::memcpy(dst, &v, 8); break;
    case DType::i32: { int32_t i = int32_t(v); std::memcpy(dst, &i, 4); break; }
  }
}

double load_element(DType t, const void* src) {
  switch (t) {
    case DType::f32: { float f; std::memcpy(&f, src, 4); return f; }
    case DType::f16: { uint16_t h; std::memcpy(&h, src, 2); return half_to_float(h); }
    case DType::bf16: { uint16_t b; std::memcpy(&b, src, 2); return bf16_to_float(b); }
    case DType::f64: { double d; std::memcpy(&d, src, 8); return d; }
    case DType::i32: { int32_t i; std::memcpy(&i, src, 4); return i; }
  }
  return 0;
}

}  // namespace kf
