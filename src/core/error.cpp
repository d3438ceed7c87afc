#include "kf/error.hpp"

namespace kf {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument: return "invalid argument";
    case ErrorCode::Shape: return "shape";
    case ErrorCode::DType: return "dtype";
    case ErrorCode::Device: return "device";
    case ErrorCode::OutOfMemory: return "out of memory";
    case ErrorCode::DeviceLost: return "device lost";
    case ErrorCode::Unsupported: return "unsupported";
    case ErrorCode::Timeout: return "time-out";
    case ErrorCode::Internal: return "internal";
  }
  return "unknown";
}

}  // namespace kf
