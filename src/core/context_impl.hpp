// The context's insides, shared by the core's files (never by backends).
#pragma once
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "hal/hal.hpp"
#include "kf/error.hpp"
#include "kf/context.hpp"

namespace kf {

struct GraphImpl;

struct ContextImpl {
  // Serializes every use of the device (docs/architecture.md, "Threads"): recording, transfers,
  // synchronize, timestamps and queries. Recursive: a composed op runs its parts through Context::run,
  // and Context::call allocates and runs under one hold.
  mutable std::recursive_mutex mu;
  ContextOptions options;
  std::unique_ptr<hal::Backend> backend;
  std::unique_ptr<hal::Device> device;
  std::string backend_name;
  std::string last_variant;
  std::shared_ptr<ContextImpl> cpu_fallback;  // opened on first use when allow_cpu_fallback is set
  std::weak_ptr<ContextImpl> self;
  // The call Context::run hands the device, kept between calls so that its vectors and shapes keep their
  // storage (a small op's dispatch then allocates none of it); its buffers are released after each call.
  hal::OpCall call;
  // The inputs' addresses check_call takes, one list per nesting depth of Context::run (kept, as `call`).
  std::deque<std::vector<const Tensor*>> checked_inputs;
  // An open Context::capture (graph.cpp), and how deep Context::run is nested (a composed op's parts run
  // inside it): the graph records the outermost calls.
  GraphImpl* capturing = nullptr;
  std::shared_ptr<GraphImpl> capture_graph;  // owns *capturing while the capture is open
  bool capture_native = false;  // the device records the capture (hal::Device::begin_capture)
  int run_depth = 0;
  // Throws Unsupported naming `what` while a capture is open: the call needs the host now.
  void not_in_capture(const char* what) const;

  // Faults (docs/architecture.md, "Errors"): the first wait for the device that ran out (Timeout) or found
  // it lost (DeviceLost), as its message. Work recorded before it may still run on the device, so from then
  // on every call that needs the device raises DeviceLost naming it; the queries that do not (supports,
  // device, memory_usage, validation_messages, last_variant) still answer, and the context closes cleanly.
  std::string failed;
  // Throws DeviceLost naming `what` once the context has failed.
  void check_usable(std::string_view what) const;
  // Keeps a Timeout or DeviceLost error as the context's failure (the first one only).
  void note_failure(const Error& e);
  // Runs `f`, a call into the device, for the entry point `what`: refused once the context has failed, and
  // a Timeout or DeviceLost it throws marks the context failed.
  template <class F>
  decltype(auto) device_call(std::string_view what, F&& f) {
    check_usable(what);
    try {
      return f();
    } catch (const Error& e) {
      note_failure(e);
      throw;
    }
  }

  Tensor make_tensor(const Shape& shape, DType dtype);
  // Context::wrap_device; `known`: hal::Device::wrap_device's (the memory is this device's, by its owner).
  Tensor wrap_device(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keep_alive, bool known);
  ~ContextImpl();
};

// Keeps a call that Context::run completed in the open capture (graph.cpp).
void detail_record_captured(ContextImpl& c, const std::string& op, const std::vector<Tensor>& inputs,
                            const std::vector<Tensor>& outputs, const Attrs& attrs);

struct OpDef;
// Fills the op's properties a backend reads from a call (hal::OpCall), so that backends need no registry:
// Context::run's calls and the parts of a split call (split.cpp).
void describe_call(const OpDef& op, DType dtype, const Attrs& attrs, hal::OpCall& call);

// Backend factories compiled into this build, in order of preference.
std::vector<std::unique_ptr<hal::Backend>> compiled_backends();

}  // namespace kf
