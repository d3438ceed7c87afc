// Element types and host-side conversions between them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kf {

enum class DType : uint8_t { f32, f16, bf16, f64, i32 };

size_t dtype_size(DType t);
const char* to_string(DType t);
DType dtype_from_string(const std::string& name);  // throws kf::Error on an unknown name
bool is_float(DType t);

// IEEE binary16 and bfloat16 conversions, round to nearest even, NaN and infinity kept.
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t b);

// Store a double as one element of dtype t at dst (rounding once: f64 -> f16 goes through float,
// which can double-round only in cases far below every tolerance of docs/ops.md).
void store_element(DType t, void* dst, double v);
double load_element(DType t, const void* src);

}  // namespace kf
