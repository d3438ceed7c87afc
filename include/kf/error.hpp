// kf::Error: the one exception type of the library (docs/architecture.md principle 6).
#pragma once
#include <stdexcept>
#include <string>

namespace kf {

enum class ErrorCode {
  InvalidArgument,  // a value out of range (p outside [0,1), eps <= 0, a bad option)
  Shape,            // shapes that do not match or an empty required tensor
  DType,            // dtypes that do not match or that the op does not take
  Device,           // a tensor of another device, no usable device, a device failure
  OutOfMemory,      // host or device memory exhausted
  DeviceLost,       // the GPU was lost (driver reset, watchdog)
  Unsupported,      // the device lacks a capability the op needs (named in the message)
  Timeout,          // a bounded wait ran out
  Internal,         // a bug in kf itself
};

const char* to_string(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(std::string(to_string(code)) + ": " + message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace kf
