// Context: device selection, tensor creation, and the one checked path every op call takes.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>

#include "core/context_impl.hpp"
#include "core/internal.hpp"
#include "core/options.hpp"
#include "core/split.hpp"
#include "kf/error.hpp"
#include "ops/registry.hpp"

namespace kf {
namespace {

// All environment options are read here, once per context (docs/architecture.md: no scattered getenv).
ContextOptions apply_environment(ContextOptions o) {
  if (const char* v = std::getenv("KF_BACKEND"); v && *v) o.backend = v;
  if (const char* v = std::getenv("KF_DEVICE"); v && *v) o.device = v;
  if (const char* v = std::getenv("KF_VALIDATION"); v && *v) o.validation = std::string(v) != "0";
  if (const char* v = std::getenv("KF_CPU_FALLBACK"); v && *v) o.allow_cpu_fallback = std::string(v) != "0";
  if (const char* v = std::getenv("KF_TIMEOUT_S"); v && *v) o.timeout_s = std::atof(v);
  // KF_TUNE only where the options give no knobs: knobs a program or a test sets itself replace the
  // environment's (ContextOptions::tuning).
  if (const char* v = std::getenv("KF_TUNE"); v && *v && o.tuning.empty()) o.tuning = v;
  if (o.pipeline_cache_dir.empty()) {
    if (const char* v = std::getenv("KF_CACHE_DIR"); v && *v) {
      o.pipeline_cache_dir = v;
    } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
      o.pipeline_cache_dir = std::string(x) + "/kf";
    } else if (const char* h = std::getenv("HOME"); h && *h) {
      o.pipeline_cache_dir = std::string(h) + "/.cache/kf";
    }
  }
  return o;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

// The backends' options: the knobs parsed once here (so that a bad one is the same error on every
// backend), and the developer switches and library search paths of the environment (docs/tuning.md),
// which the backends do not read themselves.
DeviceOptions device_options(const ContextOptions& o) {
  DeviceOptions d;
  d.validation = o.validation;
  d.pipeline_cache_dir = o.pipeline_cache_dir;
  d.timeout_s = o.timeout_s;
  d.tuning = parse_tuning(o.tuning);
  const std::string stats = env("KF_PIPELINE_STATS");
  d.pipeline_stats = !stats.empty() && stats[0] != '0';
  d.coopmat_layout = env("KF_COOPMAT_LAYOUT");
  d.vk_cuda_context = env("KF_VK_CUDA_CONTEXT") != "0";
  d.cublaslt = env("KF_CUBLASLT");
  for (const char* v : {"CUDA_HOME", "CUDA_PATH"})
    if (std::string e = env(v); !e.empty()) d.cuda_roots.push_back(e);
  for (const char* v : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (std::string e = env(v); !e.empty()) d.python_prefixes.push_back(e);
  d.home = env("HOME");
  d.stream = o.stream;
  return d;
}

namespace {

int rank(const DeviceInfo& d) {
  if (d.backend == "cpu") return 4;
  if (d.type == "discrete") return 0;
  if (d.type == "integrated") return 1;
  if (d.type == "virtual" || d.type == "other") return 2;
  return 3;  // a CPU Vulkan driver (lavapipe)
}

bool is_number(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

void describe_call(const OpDef& op, DType dtype, const Attrs& attrs, hal::OpCall& call) {
  call.id = op.id;
  call.op = &op;
  call.dtype = dtype;
  call.attrs = attrs;
  call.family = op.family;
  call.out_dtype = op.output_dtype(dtype, attrs);
  call.eps = op.eps_of(attrs);
  call.attrs.eps = call.eps;  // the default resolved here too, for kernels that read it from the attributes
  call.transcendental = op.transcendental;
  call.in_place = &op.in_place;
}

bool& hal::exiting() {
  static bool exiting = false;
  return exiting;
}

ContextImpl::~ContextImpl() {
  if (hal::exiting()) {  // the drivers may be gone (hal::exiting): the device is left to the process
    static auto* left = new std::vector<std::unique_ptr<hal::Device>>;
    left->push_back(std::move(device));
    (void)backend.release();
    return;
  }
  // Tensors hold the context alive, so by now no buffer is left; the device goes before the backend.
  device.reset();
  backend.reset();
}

void ContextImpl::check_usable(std::string_view what) const {
  if (failed.empty()) return;
  throw Error(ErrorCode::DeviceLost,
              std::string(what) + ": this context no longer uses its device, since an earlier wait failed (" + failed +
                  "); work recorded before it may still be running. Open a new Context: this one still answers "
                  "supports(), device() and memory_usage(), and its tensors and the context close normally");
}

void ContextImpl::note_failure(const Error& e) {
  if ((e.code() == ErrorCode::Timeout || e.code() == ErrorCode::DeviceLost) && failed.empty()) failed = e.what();
}

Tensor ContextImpl::make_tensor(const Shape& shape, DType dtype) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw Error(ErrorCode::Shape, "Context::empty: shape " + to_string(shape) + " has more than 8 dimensions");
  for (int64_t d : shape)
    if (d < 0) throw Error(ErrorCode::Shape, "Context::empty: shape " + to_string(shape) + " has a negative size");
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  // Padded to 16 bytes: the shaders move 16-byte packs and may write the padding of the last one.
  const size_t bytes = std::max<size_t>(16, (t.nbytes() + 15) / 16 * 16);
  t.buffer_ = device_call("Context::empty", [&] { return device->allocate(bytes); });
  t.owner_ = self.lock();
  return t;
}

std::vector<std::string> Context::backends() {
  std::vector<std::string> v;
  for (auto& b : compiled_backends()) v.push_back(b->name());
  return v;
}

std::vector<DeviceEntry> Context::list_devices(const ContextOptions& options) {
  const ContextOptions o = apply_environment(options);
  std::vector<DeviceEntry> all;
  for (auto& b : compiled_backends()) {
    auto v = b->enumerate(o);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

Context Context::create(const ContextOptions& options) {
  const ContextOptions o = apply_environment(options);
  const DeviceOptions device_opts = device_options(o);
  struct Candidate {
    hal::Backend* backend;
    DeviceEntry entry;
  };
  auto backends = compiled_backends();
  std::vector<Candidate> candidates;
  std::string reasons;
  bool backend_found = o.backend.empty();
  for (auto& b : backends) {
    if (!o.backend.empty() && b->name() != o.backend) continue;
    backend_found = true;
    for (auto& e : b->enumerate(o)) {
      if (!e.usable) {
        reasons += "\n  " + b->name() + " " + e.info.name + ": " + e.why_not;
        continue;
      }
      candidates.push_back({b.get(), e});
    }
  }
  if (!backend_found) {
    std::string names;
    for (auto& b : backends) names += (names.empty() ? "" : ", ") + b->name();
    throw Error(ErrorCode::Device, "backend '" + o.backend + "' is not compiled in (available: " + names + ")");
  }
  if (!o.device.empty()) {
    std::vector<Candidate> picked;
    for (auto& c : candidates) {
      const bool match = is_number(o.device) ? (c.entry.info.index == std::stoi(o.device) && c.entry.info.backend != "cpu")
                                             : lower(c.entry.info.name).find(lower(o.device)) != std::string::npos;
      if (match) picked.push_back(c);
    }
    if (picked.empty())
      throw Error(ErrorCode::Device, "no usable device matches KF_DEVICE / device '" + o.device + "'" + reasons);
    candidates = picked;
  }
  if (o.stream) {  // a caller's stream is a CUDA / HIP stream: only those backends can run on it
    std::vector<Candidate> streamed;
    for (auto& c : candidates)
      if (c.entry.info.backend == "cuda" || c.entry.info.backend == "hip") streamed.push_back(c);
    if (streamed.empty())
      throw Error(ErrorCode::InvalidArgument,
                  "ContextOptions::stream: a caller's stream is for the CUDA and HIP backends; backend '" +
                      (o.backend.empty() ? std::string("automatic") : o.backend) + "' has no usable device that takes one" +
                      reasons);
    candidates = streamed;
  }
  if (candidates.empty()) throw Error(ErrorCode::Device, "no usable device found" + reasons);
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return rank(a.entry.info) < rank(b.entry.info); });
  const Candidate& best = candidates.front();

  auto impl = std::make_shared<ContextImpl>();
  impl->options = o;
  impl->backend_name = best.backend->name();
  impl->device = best.backend->open(best.entry.info.index, device_opts);
  // Keep the backend object alive as long as its device.
  for (auto& b : backends)
    if (b.get() == best.backend) impl->backend = std::move(b);
  impl->self = impl;
  Context ctx;
  ctx.impl_ = impl;
  return ctx;
}

Context Context::of(const Tensor& t) {
  if (!t.defined()) throw Error(ErrorCode::InvalidArgument, "Context::of: the tensor is undefined");
  Context c;
  c.impl_ = t.owner()->self.lock();
  return c;
}

const DeviceInfo& Context::device() const { return impl_->device->info(); }
const std::string& Context::backend() const { return impl_->backend_name; }
Tensor Context::empty(const Shape& shape, DType dtype) { return impl_->make_tensor(shape, dtype); }

Tensor Context::from_host(const Shape& shape, DType dtype, const std::vector<double>& values) {
  Tensor t = empty(shape, dtype);
  t.upload_from(values);
  return t;
}

Tensor Context::wrap_host(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keep_alive) {
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw Error(ErrorCode::Shape, "Context::wrap_host: shape " + to_string(shape) + " has more than 8 dimensions");
  for (int64_t d : shape)
    if (d < 0) throw Error(ErrorCode::Shape, "Context::wrap_host: shape " + to_string(shape) + " has a negative size");
  if (!data && numel(shape) > 0)
    throw Error(ErrorCode::InvalidArgument, "Context::wrap_host: null data for shape " + to_string(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.buffer_ = impl_->device->wrap_host(data, t.nbytes(), std::move(keep_alive));
  if (!t.buffer_)
    throw Error(ErrorCode::Unsupported, "Context::wrap_host: the " + impl_->backend_name +
                                            " backend cannot use host memory in place (the CPU backend only)");
  t.buffer_->wrapped = true;
  t.owner_ = impl_;
  return t;
}

Tensor Context::wrap_device(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keep_alive) {
  return impl_->wrap_device(data, shape, dtype, std::move(keep_alive), false);
}

Tensor detail::wrap_known_device(Context& ctx, void* data, const Shape& shape, DType dtype,
                                 std::shared_ptr<void> keep_alive) {
  return ctx.impl()->wrap_device(data, shape, dtype, std::move(keep_alive), true);
}

Tensor ContextImpl::wrap_device(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keep_alive,
                                bool known) {
  const char* what = "Context::wrap_device";  // (a literal: this runs for every tensor of a call from Python)
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw Error(ErrorCode::Shape, std::string(what) + ": shape " + to_string(shape) + " has more than 8 dimensions");
  for (int64_t d : shape)
    if (d < 0) throw Error(ErrorCode::Shape, std::string(what) + ": shape " + to_string(shape) + " has a negative size");
  if (!data && numel(shape) > 0)
    throw Error(ErrorCode::InvalidArgument, std::string(what) + ": null data for shape " + to_string(shape));
  if (reinterpret_cast<uintptr_t>(data) % 256 != 0)
    throw Error(ErrorCode::InvalidArgument, std::string(what) + ": the address is not 256-byte aligned (a view into the middle "
                                                   "of an allocation?); pass a copy of its own (torch: .clone())");
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  {
    std::lock_guard<std::recursive_mutex> lock(mu);
    t.buffer_ = device_call(what, [&] { return device->wrap_device(data, t.nbytes(), std::move(keep_alive), known); });
  }
  if (!t.buffer_)
    throw Error(ErrorCode::Unsupported, std::string(what) + ": the " + backend_name +
                                            " backend has no device addresses (CUDA and HIP only)");
  t.buffer_->wrapped = true;
  t.owner_ = self.lock();
  return t;
}

bool Context::supports(const std::string& op, DType dtype, std::string* why) const {
  const OpDef& d = get_op(op);
  if (std::find(d.dtypes.begin(), d.dtypes.end(), dtype) == d.dtypes.end()) {
    if (why) *why = op + " does not take dtype " + to_string(dtype);
    return false;
  }
  if (d.compose) {  // a composed op runs where each of its parts runs
    for (const auto& part : d.composed_of) {
      std::string w;
      if (!supports(part, dtype, &w)) {
        if (why) *why = op + " runs as " + part + ", which is unsupported: " + w;
        return false;
      }
    }
    return true;
  }
  std::lock_guard<std::recursive_mutex> lock(impl_->mu);  // backends may fill caches of what they support
  hal::OpCall call;  // no tensors: the backend answers for the op and dtype alone
  describe_call(d, dtype, Attrs{}, call);
  return impl_->device->supports(call, why);
}

namespace {

// Runs an op on the CPU backend for a device that lacks it (only when the user asked for fallback).
void run_on_cpu_fallback(ContextImpl& impl, const OpDef& op, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& outputs, const Attrs& attrs) {
  if (!impl.cpu_fallback) {
    ContextOptions o = impl.options;
    o.backend = "cpu";
    o.device.clear();
    o.stream = nullptr;
    impl.cpu_fallback = Context::create(o).impl()->self.lock();
  }
  std::vector<Tensor> in, out;
  ContextImpl& c = *impl.cpu_fallback;
  for (const auto& t : inputs) {
    if (!t.defined()) {
      in.emplace_back();
      continue;
    }
    std::vector<unsigned char> raw(t.nbytes());
    t.download(raw.data(), raw.size());
    Tensor h = c.make_tensor(t.shape(), t.dtype());
    h.upload(raw.data(), raw.size());
    in.push_back(h);
  }
  for (const auto& t : outputs) out.push_back(c.make_tensor(t.shape(), t.dtype()));
  hal::OpCall call;
  describe_call(op, op_dtype(op, inputs), attrs, call);
  for (auto& t : in) call.inputs.push_back({t.buffer_ref(), t.shape(), t.defined() ? t.numel() : 0});
  for (auto& t : out) call.outputs.push_back({t.buffer_ref(), t.shape(), t.numel()});
  c.device->dispatch(call);
  for (size_t k = 0; k < out.size(); ++k) {
    std::vector<unsigned char> raw(out[k].nbytes());
    out[k].download(raw.data(), raw.size());
    Tensor dst = outputs[k];
    dst.upload(raw.data(), raw.size());
  }
}

bool has_empty(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  for (const auto* list : {&inputs, &outputs})
    for (const auto& t : *list)
      if (t.defined() && t.numel() == 0) return true;
  return false;
}

// The outputs of a call with an empty tensor: the reference's values for the non-empty ones, from the
// inputs' values when an output needs them (a bias added to an empty product).
void run_empty(const OpDef& op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
               const Attrs& attrs) {
  bool fill = false;
  for (const auto& t : outputs) fill |= t.numel() > 0;
  if (!fill) return;
  std::vector<HostTensor> in(op.inputs.size()), out(outputs.size());
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].defined()) in[k] = {inputs[k].shape(), inputs[k].to_double()};
  for (size_t k = 0; k < outputs.size(); ++k)
    out[k] = {outputs[k].shape(), std::vector<double>(static_cast<size_t>(outputs[k].numel()), 0.0)};
  op.reference(in, out, attrs);
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k].numel() == 0) continue;
    Tensor dst = outputs[k];
    dst.upload_from(out[k].data);
  }
}

// Whether two tensors share memory: one buffer, or the caller's memory wrapped twice (Context::wrap_host /
// wrap_device of the same array, which are two buffers over overlapping addresses).
bool share_memory(const Tensor& a, const Tensor& b) {
  if (a.buffer() == b.buffer()) return true;
  if (!a.buffer()->wrapped && !b.buffer()->wrapped) return false;  // kf's own allocations never overlap
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto* pa = static_cast<const char*>(a.host_data() ? a.host_data() : a.device_data());
  const auto* pb = static_cast<const char*>(b.host_data() ? b.host_data() : b.device_data());
  return pa && pb && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

}  // namespace

void Context::run(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                  const Attrs& attrs) {
  detail::run_op(*this, get_op(name), inputs, outputs, attrs);
}

void detail::run_op(Context& ctx, const OpDef& op, const std::vector<Tensor>& inputs,
                    const std::vector<Tensor>& outputs, const Attrs& attrs, const std::vector<Shape>* checked) {
  const std::string& name = op.name;
  ContextImpl* const impl = ctx.impl();
  // One call at a time per context: checks, recording and last_variant under one hold, so that calls of
  // several threads are recorded (and submitted) whole, one after another.
  std::lock_guard<std::recursive_mutex> lock(impl->mu);
  impl->check_usable(name);
  // Under Context::capture the outermost call that returns is kept in the graph (graph.cpp).
  struct Depth {
    ContextImpl& c;
    const std::string& name;
    const std::vector<Tensor>& inputs;
    const std::vector<Tensor>& outputs;
    const Attrs& attrs;
    int exceptions = c.capturing ? std::uncaught_exceptions() : 0;  // read only where it is used
    ~Depth() {
      if (c.capturing && c.run_depth == 1 && std::uncaught_exceptions() == exceptions)
        detail_record_captured(c, name, inputs, outputs, attrs);
      --c.run_depth;
    }
  } depth{*impl, name, inputs, outputs, attrs};
  ++impl->run_depth;
  std::vector<Shape> own;
  if (!checked) {
    if (impl->checked_inputs.size() < static_cast<size_t>(impl->run_depth)) impl->checked_inputs.resize(impl->run_depth);
    std::vector<const Tensor*>& in = impl->checked_inputs[impl->run_depth - 1];
    in.clear();
    for (const auto& t : inputs) in.push_back(&t);
    own = check_call(op, in, attrs, impl);
  }
  const std::vector<Shape>& expected = checked ? *checked : own;
  const DType dtype = op_dtype(op, inputs);
  const DType out_dtype = op.output_dtype(dtype, attrs);
  // The outputs infer returns: all of op.outputs, or the leading ones when the rest are optional and
  // not asked for (attention's lse without Attrs::return_lse).
  if (outputs.size() != expected.size())
    throw Error(ErrorCode::InvalidArgument, name + ": takes " + std::to_string(expected.size()) +
                                                " outputs with these attributes, got " + std::to_string(outputs.size()));
  // Every call takes this path: the messages are built only when a check fails.
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& t = outputs[k];
    const auto arg = [&] { return name + ": output '" + op.outputs[k] + "'"; };
    if (!t.defined()) throw Error(ErrorCode::Shape, arg() + " is undefined");
    if (t.owner() != impl)
      throw Error(ErrorCode::Device, arg() + " lives on another device or context than the one running the op");
    if (t.dtype() != out_dtype)
      throw Error(ErrorCode::DType, arg() + " has dtype " + std::string(to_string(t.dtype())) + "; expected " +
                                        to_string(out_dtype) +
                                        (out_dtype == dtype ? " (the inputs' dtype)" : " (out_dtype)"));
    if (t.shape() != expected[k])
      throw Error(ErrorCode::Shape, arg() + " has shape " + to_string(t.shape()) + "; expected " + to_string(expected[k]));
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (!inputs[j].defined() || !share_memory(inputs[j], t)) continue;
      // The one exception: the pairs an op declares in place (OpDef::in_place, the optimizers), as the same
      // memory exactly (one buffer, or the same address wrapped twice), never a partial overlap.
      const bool declared = std::find(op.in_place.begin(), op.in_place.end(),
                                      std::pair<int, int>(static_cast<int>(k), static_cast<int>(j))) != op.in_place.end();
      const bool same = inputs[j].buffer() == t.buffer() ||
                        (inputs[j].host_data() == t.host_data() && inputs[j].device_data() == t.device_data());
      if (!declared || !same)
        throw Error(ErrorCode::InvalidArgument, arg() + (inputs[j].buffer() == t.buffer() ? " is the same tensor as"
                                                                                          : " shares memory with") +
                                                    " input '" + op.inputs[j] + "'; " +
                                                    (op.in_place.empty() ? std::string("in-place calls are not supported")
                                                                         : "only the documented in-place pairs may alias"));
    }
    for (size_t j = 0; j < k; ++j)
      if (share_memory(outputs[j], t))
        throw Error(ErrorCode::InvalidArgument, arg() + " shares memory with output '" + op.outputs[j] + "'");
  }
  // A tensor past the device's largest storage binding: the call runs in parts, or is refused (split.cpp).
  if (detail::exceeds_binding(*impl, inputs, outputs) && detail::run_in_parts(*impl, op, inputs, outputs, attrs)) return;
  // Token ids in range, ...: read on the host, which a capture (kf's, or a CUDA graph captured on the
  // context's stream by someone else) cannot wait for; the kernels still never read out of bounds (an id out
  // of range gives NaN, docs/ops.md).
  if (op.check_values && !impl->capturing && !impl->device->stream_captured()) op.check_values(op, inputs);
  // A call with an empty tensor (a zero-sized dimension) is served here and never reaches the backend
  // (docs/ops.md, "Empty tensors"): the empty outputs need nothing, and the others (a reduction over an
  // empty axis, a product over an empty inner dimension) get the float64 reference's values.
  // A capture on a device without graphs of its own (graph.cpp) keeps each checked call and runs nothing now.
  const bool keep_only = impl->capturing && !impl->capture_native;
  if (has_empty(inputs, outputs)) {
    if (keep_only) return;
    run_empty(op, inputs, outputs, attrs);
    impl->last_variant = "empty";
    return;
  }
  std::string why;
  if (op.compose) {
    // A composed op (OpDef::compose): its parts run through run() on this context, each checked and
    // dispatched as any call; every part is checked for support first, so an unsupported one writes nothing.
    if (!impl->options.allow_cpu_fallback && !ctx.supports(name, dtype, &why))
      throw Error(ErrorCode::Unsupported, name + " (" + to_string(dtype) + ") cannot run on " +
                                              impl->device->info().name + ": " + why);
    Context self = ctx;
    op.compose(self, inputs, outputs, attrs);  // sets last_variant to the parts' variants
    return;
  }
  hal::OpCall& call = impl->call;
  describe_call(op, dtype, attrs, call);
  const auto set = [](hal::TensorArg& a, const Tensor& t) {
    a.buffer = t.defined() ? t.buffer_ref() : nullptr;
    a.shape.assign(t.shape().begin(), t.shape().end());  // reuses the shape's storage
    a.numel = t.defined() ? t.numel() : 0;
  };
  call.inputs.resize(op.inputs.size());
  for (size_t k = 0; k < call.inputs.size(); ++k) {
    if (k < inputs.size()) set(call.inputs[k], inputs[k]);
    else call.inputs[k] = {};
  }
  call.outputs.resize(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) set(call.outputs[k], outputs[k]);
  // The buffers go back when the call returns or throws (the device retains what it recorded).
  struct Release {
    hal::OpCall& c;
    ~Release() {
      for (auto& a : c.inputs) a.buffer.reset();
      for (auto& a : c.outputs) a.buffer.reset();
    }
  } release{call};
  // The backend sees the whole call: a shape, attribute or optional input its kernels lack is refused here.
  if (!impl->device->supports(call, &why)) {
    if (impl->options.allow_cpu_fallback && !impl->capturing) {
      run_on_cpu_fallback(*impl, op, inputs, outputs, attrs);
      impl->last_variant = "cpu-fallback (" + why + ")";
      return;
    }
    throw Error(ErrorCode::Unsupported, name + " (" + to_string(dtype) + ") cannot run on " +
                                            impl->device->info().name + ": " + why);
  }
  if (keep_only) {
    impl->last_variant = "captured";
    return;
  }
  try {
    impl->last_variant.assign(impl->device->dispatch(call).str());  // (its buffer reused: no allocation)
  } catch (const Error& e) {
    impl->note_failure(e);
    // A backend refuses an option its kernels lack (Unsupported, before recording anything): the CPU
    // fallback, when asked for, serves the call as it serves an unsupported op.
    if (e.code() != ErrorCode::Unsupported || !impl->options.allow_cpu_fallback || impl->capturing) throw;
    run_on_cpu_fallback(*impl, op, inputs, outputs, attrs);
    impl->last_variant = std::string("cpu-fallback (") + e.what() + ")";
  }
}

std::vector<Tensor> Context::call(const std::string& name, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  const OpDef& op = get_op(name);
  std::lock_guard<std::recursive_mutex> lock(impl_->mu);
  std::vector<const Tensor*> in;
  for (const auto& t : inputs) in.push_back(&t);
  const auto shapes = check_call(op, in, attrs, impl_.get());
  std::vector<Tensor> outs;
  for (const auto& s : shapes) outs.push_back(empty(s, op.output_dtype(op_dtype(op, inputs), attrs)));
  detail::run_op(*this, op, inputs, outs, attrs, &shapes);
  return outs;
}

// The remaining entry points each take the context's lock for the device call (docs/architecture.md).
#define KF_LOCKED std::lock_guard<std::recursive_mutex> lock(impl_->mu)
std::string Context::last_variant() const { KF_LOCKED; return impl_->last_variant; }
void Context::synchronize() {
  KF_LOCKED;
  impl_->not_in_capture("Context::synchronize");
  impl_->device_call("Context::synchronize", [&] { impl_->device->synchronize(); });
}
uint32_t Context::timestamp() {
  KF_LOCKED;
  impl_->not_in_capture("Context::timestamp");
  return impl_->device_call("Context::timestamp", [&] { return impl_->device->timestamp(); });
}
double Context::elapsed_ms(uint32_t b, uint32_t e) {
  KF_LOCKED;
  impl_->not_in_capture("Context::elapsed_ms");
  return impl_->device_call("Context::elapsed_ms", [&] { return impl_->device->elapsed_ms(b, e); });
}
void Context::reset_timestamps() {
  KF_LOCKED;
  impl_->not_in_capture("Context::reset_timestamps");
  impl_->device_call("Context::reset_timestamps", [&] { impl_->device->reset_timestamps(); });
}
MemoryUsage Context::memory_usage() const { KF_LOCKED; return impl_->device->memory_usage(); }
void Context::reset_peak_memory() { KF_LOCKED; impl_->device->reset_peak_memory(); }
uint64_t Context::validation_messages() const { KF_LOCKED; return impl_->device->validation_messages(); }
std::vector<std::string> Context::validation_log() const { KF_LOCKED; return impl_->device->validation_log(); }
#undef KF_LOCKED

double detail::record_matrix_peak(Context& ctx, std::string* what) {
  std::lock_guard<std::recursive_mutex> lock(ctx.impl()->mu);
  return ctx.impl()->device_call("record_matrix_peak", [&] { return ctx.impl()->device->record_matrix_peak(what); });
}
detail::PipelineStats detail::pipeline_stats(const Context& ctx) {
  std::lock_guard<std::recursive_mutex> lock(ctx.impl()->mu);
  const hal::Device::PipelineStats s = ctx.impl()->device->pipeline_stats();
  return {s.created, s.held};
}
void detail::release_scratch(Context& ctx) {
  std::lock_guard<std::recursive_mutex> lock(ctx.impl()->mu);
  ctx.impl()->not_in_capture("release_scratch");
  ctx.impl()->device_call("release_scratch", [&] { ctx.impl()->device->release_scratch(); });
}
bool detail::record_long_kernel(Context& ctx, uint64_t iterations) {
  std::lock_guard<std::recursive_mutex> lock(ctx.impl()->mu);
  ctx.impl()->not_in_capture("record_long_kernel");
  return ctx.impl()->device_call("record_long_kernel", [&] { return ctx.impl()->device->record_long_kernel(iterations); });
}
bool detail::holds_cuda_context(const Context& ctx) { return ctx.impl()->device->cuda_context_held; }

}  // namespace kf
