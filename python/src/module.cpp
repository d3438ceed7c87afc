// kernelfusion._kf: the nanobind module under the Python package (python/kernelfusion). It exposes the
// context, tensors, the op registry (iterated, never listed by hand), the float64 references and the
// conformance comparison; kernelfusion/ops.py builds one Python function per registry op from it.
// Arrays cross through DLPack (nanobind's ndarray): on the CPU backend without a copy (Context::wrap_host,
// Tensor::host_data), GPU arrays on the CUDA / HIP backends without a copy (Context::wrap_device,
// Tensor::device_data), elsewhere through a host copy.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <functional>

#include "check/conformance.hpp"
#include "kf/kf.hpp"
#include "module.hpp"
#include "ops/registry.hpp"

namespace kf::py {
namespace {

// ---- Attrs: each field of kf::Attrs by its name (C++ has no reflection; this table is the one place) ----

struct Field {
  const char* name;
  std::function<void(Attrs&, nb::handle)> set;
  std::function<nb::object(const Attrs&)> get;
};

std::array<int64_t, 2> pair_of(nb::handle v) {
  if (nb::isinstance<nb::int_>(v)) {
    const auto x = nb::cast<int64_t>(v);
    return {x, x};
  }
  auto s = nb::cast<std::vector<int64_t>>(v);
  if (s.size() != 2) throw nb::value_error("expected an int or a pair of ints");
  return {s[0], s[1]};
}

DType dtype_arg(nb::handle v) { return dtype_from_string(nb::cast<std::string>(nb::str(v))); }

#define KF_FIELD(f, T) \
  Field { #f, [](Attrs& a, nb::handle v) { a.f = nb::cast<T>(v); }, [](const Attrs& a) { return nb::cast(a.f); } }
#define KF_PAIR(f) \
  Field { #f, [](Attrs& a, nb::handle v) { a.f = pair_of(v); }, \
          [](const Attrs& a) { return nb::object(nb::make_tuple(a.f[0], a.f[1])); } }

const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      KF_FIELD(p, double), KF_FIELD(seed, uint64_t), KF_FIELD(offset, uint64_t), KF_FIELD(scale, double),
      KF_FIELD(eps, double), KF_FIELD(act, int64_t),
      Field{"out_dtype",
            [](Attrs& a, nb::handle v) {
              if (v.is_none()) a.out_dtype.reset(); else a.out_dtype = dtype_arg(v);
            },
            [](const Attrs& a) {
              return a.out_dtype ? nb::object(nb::str(to_string(*a.out_dtype))) : nb::none();
            }},
      KF_FIELD(groups, int64_t), KF_PAIR(stride), KF_PAIR(padding), KF_PAIR(dilation),
      KF_FIELD(ignore_index, int64_t), KF_FIELD(label_smoothing, double), KF_FIELD(lr, double),
      KF_FIELD(beta1, double), KF_FIELD(beta2, double), KF_FIELD(weight_decay, double), KF_FIELD(momentum, double),
      KF_FIELD(dampening, double), KF_FIELD(nesterov, bool), KF_FIELD(step, int64_t), KF_FIELD(z_loss, double),
      KF_FIELD(softcap, double), KF_FIELD(attn_scale, double), KF_FIELD(causal, bool), KF_FIELD(window, int64_t),
      KF_FIELD(alibi, bool), KF_FIELD(rope, int64_t), KF_FIELD(rope_base, double), KF_FIELD(return_lse, bool),
      KF_FIELD(block_size, int64_t), KF_FIELD(score_mod, std::string),
  };
  return f;
}

}  // namespace

Attrs attrs_from(const std::string& op, nb::handle kw) {
  Attrs a;
  if (kw.is_none()) return a;
  for (auto [k, v] : nb::borrow<nb::dict>(kw)) {
    const std::string key = nb::cast<std::string>(k);
    const Field* f = nullptr;
    for (const auto& x : fields())
      if (key == x.name) f = &x;
    if (!f) throw nb::type_error((op + ": unexpected keyword argument '" + key + "'").c_str());
    try {
      f->set(a, v);
    } catch (const nb::python_error&) {
      throw;
    } catch (const Error&) {
      throw;
    } catch (const std::exception&) {
      throw nb::type_error((op + ": keyword argument '" + key + "' got " +
                            nb::cast<std::string>(nb::repr(v.type())) + " " + nb::cast<std::string>(nb::repr(v)))
                               .c_str());
    }
  }
  return a;
}

namespace {

// The fields that differ from Attrs' defaults (a test case's attributes), by name.
nb::dict attrs_to(const Attrs& a) {
  static const Attrs defaults{};
  nb::dict d;
  for (const auto& f : fields()) {
    nb::object v = f.get(a);
    if (!v.equal(f.get(defaults))) d[f.name] = v;
  }
  return d;
}

}  // namespace

// ---- dtypes across DLPack ----

std::optional<DType> from_dlpack(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes != 1) return std::nullopt;
  if (t.code == uint8_t(C::Float) && t.bits == 32) return DType::f32;
  if (t.code == uint8_t(C::Float) && t.bits == 16) return DType::f16;
  if (t.code == uint8_t(C::Float) && t.bits == 64) return DType::f64;
  if (t.code == uint8_t(C::Bfloat) && t.bits == 16) return DType::bf16;
  if (t.code == uint8_t(C::Int) && t.bits == 32) return DType::i32;
  return std::nullopt;
}

namespace {

nb::dlpack::dtype to_dlpack(DType t) {
  using C = nb::dlpack::dtype_code;
  switch (t) {
    case DType::f32: return {uint8_t(C::Float), 32, 1};
    case DType::f16: return {uint8_t(C::Float), 16, 1};
    case DType::f64: return {uint8_t(C::Float), 64, 1};
    case DType::bf16: return {uint8_t(C::Bfloat), 16, 1};
    case DType::i32: return {uint8_t(C::Int), 32, 1};
  }
  return {};
}

template <class A>
std::shared_ptr<void> keep_alive(const A& a) {
  // Tensors may die on a thread without the GIL (the ops run with it released).
  return std::shared_ptr<void>(new A(a), [](void* p) {
    if (!Py_IsInitialized()) return;
    nb::gil_scoped_acquire g;
    delete static_cast<A*>(p);
  });
}

template <class A>
Shape shape_and_check(const A& a, const char* what) {
  Shape s(a.ndim());
  int64_t expect = 1;
  for (size_t d = a.ndim(); d-- > 0;) {
    s[d] = a.shape(d);
    if (a.shape(d) > 1 && a.stride(d) != expect)
      throw nb::value_error((std::string(what) + ": the array is not C-contiguous").c_str());
    expect *= a.shape(d);
  }
  return s;
}

using HostArray = nb::ndarray<nb::device::cpu>;
using ReadOnlyArray = nb::ndarray<nb::ro, nb::device::cpu>;

// A tensor over an array: in place on the CPU backend, else a device copy of it.
template <class A>
Tensor tensor_of(Context& ctx, const A& a, const char* what) {
  const auto dt = from_dlpack(a.dtype());
  if (!dt) throw Error(ErrorCode::DType, std::string(what) + ": the array's dtype has no kf dtype");
  const Shape s = shape_and_check(a, what);
  if (ctx.backend() == "cpu") return ctx.wrap_host(const_cast<void*>(static_cast<const void*>(a.data())), s, *dt, keep_alive(a));
  Tensor t = ctx.empty(s, *dt);
  t.upload(a.data(), t.nbytes());
  return t;
}

// A device UUID as 32 hex digits, and back (InvalidArgument for anything else).
std::string uuid_text(const std::array<uint8_t, 16>& u) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : u) (s += hex[b >> 4]) += hex[b & 15];
  return s;
}
std::array<uint8_t, 16> uuid_bytes(const std::string& s) {
  std::array<uint8_t, 16> u{};
  const auto digit = [&](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw Error(ErrorCode::InvalidArgument, "Context.import_memory: device_uuid '" + s + "' is not 32 hex digits");
  };
  if (s.size() != 32) digit('x');
  for (size_t i = 0; i < 16; ++i) u[i] = static_cast<uint8_t>(digit(s[2 * i]) << 4 | digit(s[2 * i + 1]));
  return u;
}

// An array over a tensor: a view of kf's memory on the CPU backend (the view keeps the tensor alive), a
// host copy elsewhere.
template <class Framework>
nb::object array_of(const Tensor& t) {
  if (!t.defined()) throw Error(ErrorCode::InvalidArgument, "to_numpy: the tensor is undefined");
  if (std::is_same_v<Framework, nb::numpy> && t.dtype() == DType::bf16)
    throw Error(ErrorCode::DType, "to_numpy: NumPy has no bf16 (use to_torch)");
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  if (std::is_same_v<Framework, nb::pytorch> && !t.host_data() && t.device_data()) {
    // CUDA / HIP: a torch tensor over kf's device memory, no copy (the capsule keeps the tensor alive)
    nb::capsule owner(new Tensor(t), [](void* p) noexcept { delete static_cast<Tensor*>(p); });
    const Context c = Context::of(t);
    const int type = c.backend() == "hip" ? nb::device::rocm::value : nb::device::cuda::value;
    return nb::cast(nb::ndarray<Framework>(t.device_data(), shape.size(), shape.data(), owner, nullptr,
                                           to_dlpack(t.dtype()), type, c.device().index),
                    nb::rv_policy::reference);
  }
  void* data = t.host_data();
  nb::capsule owner;
  if (data) {
    owner = nb::capsule(new Tensor(t), [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  } else {
    auto* bytes = new std::vector<unsigned char>(t.nbytes());
    {
      nb::gil_scoped_release r;
      t.download(bytes->data(), bytes->size());
    }
    data = bytes->data();
    owner = nb::capsule(bytes, [](void* p) noexcept { delete static_cast<std::vector<unsigned char>*>(p); });
  }
  return nb::cast(nb::ndarray<Framework>(data, shape.size(), shape.data(), owner, nullptr, to_dlpack(t.dtype())),
                  nb::rv_policy::reference);
}

std::vector<Tensor> tensor_list(nb::handle seq) {
  std::vector<Tensor> v;
  for (nb::handle h : seq) v.push_back(h.is_none() ? Tensor() : nb::cast<Tensor>(h));
  return v;
}

std::vector<Shape> shapes_of(const OpDef& op, const std::vector<Shape>& given) {
  std::vector<Shape> s = given;
  s.resize(op.inputs.size());
  return s;
}

nb::dict describe(const OpDef& op) {
  static const char* families[] = {"elementwise", "reduction", "matmul", "normalization", "loss", "optimizer", "attention"};
  nb::dict d;
  d["name"] = op.name;
  d["id"] = static_cast<int>(op.id);  // kf::OpId: what fast_call takes
  d["family"] = families[static_cast<int>(op.family)];
  d["inputs"] = op.inputs;
  d["required_inputs"] = op.required_inputs;
  d["outputs"] = op.outputs;
  nb::list dts, pinned;
  for (DType t : op.dtypes) dts.append(to_string(t));
  for (size_t k = 0; k < op.inputs.size(); ++k)
    pinned.append(k < op.input_dtypes.size() && op.input_dtypes[k] ? nb::object(nb::str(to_string(*op.input_dtypes[k]))) : nb::none());
  d["dtypes"] = dts;
  d["input_dtypes"] = pinned;
  d["random"] = op.random;
  d["primitive"] = op.primitive;
  d["takes_out_dtype"] = op.takes_out_dtype;
  nb::list in_place;
  for (auto [o, i] : op.in_place) in_place.append(nb::make_tuple(o, i));
  d["in_place"] = in_place;
  nb::list tests;
  for (const auto& tc : op.tests) {
    nb::dict c;
    c["label"] = tc.label;
    c["inputs"] = tc.inputs;
    c["attrs"] = attrs_to(tc.attrs);
    c["range"] = tc.range;
    tests.append(c);
  }
  d["tests"] = tests;
  return d;
}

using F64 = nb::ndarray<double, nb::c_contig, nb::device::cpu>;

nb::object f64_array(const Shape& shape, std::vector<double> values) {
  auto* v = new std::vector<double>(std::move(values));
  nb::capsule owner(v, [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
  std::vector<size_t> s(shape.begin(), shape.end());
  return nb::cast(nb::ndarray<nb::numpy, double>(v->data(), s.size(), s.data(), owner), nb::rv_policy::reference);
}

const char* code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::InvalidArgument: return "InvalidArgument";
    case ErrorCode::Shape: return "Shape";
    case ErrorCode::DType: return "DType";
    case ErrorCode::Device: return "Device";
    case ErrorCode::OutOfMemory: return "OutOfMemory";
    case ErrorCode::DeviceLost: return "DeviceLost";
    case ErrorCode::Unsupported: return "Unsupported";
    case ErrorCode::Timeout: return "Timeout";
    case ErrorCode::Internal: return "Internal";
  }
  return "Internal";
}

}  // namespace
}  // namespace kf::py

NB_MODULE(_kf, m) {
  using namespace kf;
  using namespace kf::py;
  m.doc() = "KernelFusion's C++ core (the kernelfusion package wraps it; use kernelfusion, not this module)";
  // torch.library keeps the operators' Python closures (and through them the default context) until the
  // interpreter ends, after nanobind's leak check: its warnings would be noise at every exit.
  nb::set_leak_warnings(false);

  // kf::Error -> kernelfusion.Error and its subclasses (kernelfusion/errors.py), same message.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      PyObject* cls = PyExc_RuntimeError;
      nb::object found;
      try {
        found = nb::module_::import_("kernelfusion.errors").attr("class_for")(code_name(e.code()));
        cls = found.ptr();
      } catch (const nb::python_error&) {
      }
      PyErr_SetString(cls, e.what());
    }
  });

  nb::class_<Tensor>(m, "Tensor", "A kf tensor: row-major, owned by a context's device (or wrapping host memory)")
      .def_prop_ro("shape", [](const Tensor& t) { return nb::tuple(nb::cast(t.shape())); })
      .def_prop_ro("dtype", [](const Tensor& t) { return std::string(to_string(t.dtype())); })
      .def_prop_ro("numel", &Tensor::numel)
      .def_prop_ro("nbytes", &Tensor::nbytes)
      .def_prop_ro("defined", &Tensor::defined)
      .def_prop_ro("backend", [](const Tensor& t) { return Context::of(t).backend(); })
      .def_prop_ro("context", [](const Tensor& t) { return Context::of(t); })
      .def_prop_ro("host_pointer", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.host_data()); },
                   "The address of the tensor's host memory (CPU backend), else 0")
      .def_prop_ro("device_pointer", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.device_data()); },
                   "The address of the tensor's device memory (CUDA / HIP), else 0")
      .def("to_numpy", &array_of<nb::numpy>,
           "A NumPy array of the tensor: a view of its memory on the CPU backend, a host copy elsewhere")
      .def("to_torch", &array_of<nb::pytorch>,
           "A torch tensor of the tensor: a view of its memory on the CPU, CUDA and HIP backends (a CUDA tensor "
           "there), a host copy elsewhere")
      .def("reshape", &Tensor::reshape, "shape"_a,
           "The same memory under another shape with as many elements (a view)")
      .def("fill", &Tensor::fill)
      .def("upload",
           [](Tensor& t, ReadOnlyArray a) {
             const auto dt = from_dlpack(a.dtype());
             if (!dt || *dt != t.dtype())
               throw Error(ErrorCode::DType, "Tensor.upload: the array's dtype is not the tensor's (" +
                                                 std::string(to_string(t.dtype())) + ")");
             if (a.nbytes() != t.nbytes())
               throw Error(ErrorCode::Shape, "Tensor.upload: the array has " + std::to_string(a.nbytes()) +
                                                 " bytes, the tensor " + std::to_string(t.nbytes()));
             if (t.host_data() == a.data()) return;  // a CPU tensor over this very array
             nb::gil_scoped_release r;
             t.upload(a.data(), t.nbytes());
           },
           "array"_a, "Writes a C-contiguous array of the tensor's dtype and size into it (new inputs for a Graph)")
      .def("__repr__", [](const Tensor& t) {
        return "kernelfusion.Tensor(shape=" + to_string(t.shape()) + ", dtype=" + to_string(t.dtype()) + ")";
      });

  nb::class_<Context>(m, "Context")
      .def("__init__",
           [](Context* self, const std::string& backend, const std::string& device, bool validation,
              bool allow_cpu_fallback, double timeout_s, const std::string& tuning, uintptr_t stream) {
             ContextOptions o;
             o.backend = backend;
             o.device = device;
             o.validation = validation;
             o.allow_cpu_fallback = allow_cpu_fallback;
             o.timeout_s = timeout_s;
             o.tuning = tuning;
             o.stream = reinterpret_cast<void*>(stream);
             new (self) Context(Context::create(o));
           },
           "backend"_a = "", "device"_a = "", "validation"_a = false, "allow_cpu_fallback"_a = false,
           "timeout_s"_a = 120.0, "tuning"_a = "", "stream"_a = 0,
           "A context: backend 'cpu', 'vulkan', 'cuda', 'hip' or '' (the best device); stream: the address of "
           "a caller's CUDA / HIP stream to run on (torch.cuda.current_stream().cuda_stream), 0 for its own")
      .def_prop_ro("backend", &Context::backend)
      .def_prop_ro("device_name", [](const Context& c) { return c.device().name; })
      .def_prop_ro("device_type", [](const Context& c) { return c.device().type; })
      .def_prop_ro("device_index", [](const Context& c) { return c.device().index; })
      .def("empty", [](Context& c, const Shape& s, const std::string& dt) { return c.empty(s, dtype_from_string(dt)); },
           "shape"_a, "dtype"_a = "f32")
      .def("wrap", [](Context& c, ReadOnlyArray a) { return tensor_of(c, a, "Context.wrap"); }, "array"_a,
           "A tensor of an input array: in place on the CPU backend, a device copy elsewhere")
      .def("wrap_output", [](Context& c, HostArray a) { return tensor_of(c, a, "Context.wrap_output"); }, "array"_a,
           "A tensor over a writable array (CPU backend: ops write it in place)")
      .def("wrap_device",
           [](Context& c, nb::ndarray<> a) {
             if (a.device_type() == nb::device::cpu::value)
               throw Error(ErrorCode::InvalidArgument, "Context.wrap_device: the array is in host memory (use wrap)");
             if (a.device_id() != c.device().index)
               throw Error(ErrorCode::Device, "Context.wrap_device: the array is on device " +
                                                  std::to_string(a.device_id()) + ", the context on " + c.backend() +
                                                  " device " + std::to_string(c.device().index));
             const auto dt = from_dlpack(a.dtype());
             if (!dt) throw Error(ErrorCode::DType, "Context.wrap_device: the array's dtype has no kf dtype");
             const Shape s = shape_and_check(a, "Context.wrap_device");
             return c.wrap_device(a.data(), s, *dt, keep_alive(a));
           },
           "array"_a,
           "A tensor over a GPU array's memory (DLPack: a torch CUDA tensor), in place: no copy, read and written "
           "by the context's work on its stream")
      // Memory shared between backends of one GPU (kf::Context::export_memory; docs/python.md "Vulkan and CUDA").
      .def_prop_ro("device_uuid", [](const Context& c) { return uuid_text(c.device().uuid); },
                   "The GPU's UUID as Vulkan and CUDA report it (hex; all zeros: unknown)")
      .def_prop_ro("key", [](const Context& c) { return reinterpret_cast<uintptr_t>(c.impl()); },
                   "An identity of the context's device, the same for every handle of it")
      .def("can_export",
           [](const Context& c) {
             std::string why;
             const bool ok = c.can_export(&why);
             return std::make_pair(ok, why);
           },
           "(True, '') where empty_exportable works (Vulkan with VK_KHR_external_memory_fd), else (False, why)")
      .def("empty_exportable",
           [](Context& c, const Shape& s, const std::string& dt) { return c.empty_exportable(s, dtype_from_string(dt)); },
           "shape"_a, "dtype"_a = "f32", "Like empty(), in memory another API of the GPU imports (export_memory)")
      .def("export_memory",
           [](Context& c, const Tensor& t) {
             const ExportedMemory m = c.export_memory(t);
             nb::dict d;
             d["fd"] = m.fd;
             d["size"] = m.size;
             d["offset"] = m.offset;
             d["dedicated"] = m.dedicated;
             d["device_uuid"] = uuid_text(m.device_uuid);
             return d;
           },
           "tensor"_a,
           "A new opaque file descriptor of an exportable tensor's memory, as a dict (fd, size, offset, dedicated, "
           "device_uuid): pass it to import_memory, which consumes the fd, or os.close it")
      .def("import_memory",
           [](Context& c, nb::dict d, const Shape& s, const std::string& dt) {
             ExportedMemory m;
             m.fd = nb::cast<int>(d["fd"]);
             m.size = nb::cast<uint64_t>(d["size"]);
             m.offset = nb::cast<uint64_t>(d["offset"]);
             m.dedicated = nb::cast<bool>(d["dedicated"]);
             m.device_uuid = uuid_bytes(nb::cast<std::string>(d["device_uuid"]));
             const DType t = dtype_from_string(dt);
             nb::gil_scoped_release r;
             return c.import_memory(m, s, t);
           },
           "memory"_a, "shape"_a, "dtype"_a = "f32",
           "A tensor of this (CUDA) context over export_memory's memory, in place; consumes the fd")
      .def("share", &Context::share, "tensor"_a, nb::call_guard<nb::gil_scoped_release>(),
           "A tensor of this (CUDA) context over the memory of an exportable tensor of another context, kept alive")
      .def("download_into",
           [](Context&, const Tensor& t, HostArray a) {
             if (a.nbytes() != t.nbytes()) throw nb::value_error("download_into: sizes differ");
             nb::gil_scoped_release r;
             t.download(a.data(), t.nbytes());
           })
      .def("run",
           [](Context& c, const std::string& op, nb::handle inputs, nb::handle outputs, nb::handle attrs) {
             const Attrs a = attrs_from(op, attrs);
             auto in = tensor_list(inputs), out = tensor_list(outputs);
             nb::gil_scoped_release r;
             c.run(op, in, out, a);
           },
           "op"_a, "inputs"_a, "outputs"_a, "attrs"_a = nb::none())
      .def("call",
           [](Context& c, const std::string& op, nb::handle inputs, nb::handle attrs) {
             const Attrs a = attrs_from(op, attrs);
             auto in = tensor_list(inputs);
             nb::gil_scoped_release r;
             return c.call(op, in, a);
           },
           "op"_a, "inputs"_a, "attrs"_a = nb::none())
      .def("supports",
           [](const Context& c, const std::string& op, const std::string& dt) {
             std::string why;
             const bool ok = c.supports(op, dtype_from_string(dt), &why);
             return std::make_pair(ok, why);
           })
      .def("synchronize", &Context::synchronize, nb::call_guard<nb::gil_scoped_release>())
      .def("capture",
           [](Context& c, nb::callable body) { return c.capture([&] { body(); }); },
           "body"_a, "Captures the ops body() calls on this context into a Graph (kf::Context::capture)")
      .def("begin_capture", &Context::begin_capture)
      .def("end_capture", &Context::end_capture)
      .def("abort_capture", &Context::abort_capture)
      .def("last_variant", &Context::last_variant)
      .def("__repr__", [](const Context& c) { return "kernelfusion.Context(" + c.backend() + ": " + c.device().name + ")"; });

  nb::class_<Timeline>(m, "Timeline",
                       "A Vulkan timeline semaphore imported by a CUDA context of the same GPU (kf::Timeline): orders "
                       "the two contexts' work on the device, without host waits")
      .def_static("supported",
                  [](const Context& vulkan, const Context& cuda) {
                    std::string why;
                    const bool ok = Timeline::supported(vulkan, cuda, &why);
                    return std::make_pair(ok, why);
                  },
                  "vulkan"_a, "cuda"_a, "(True, '') where create() works for these contexts, else (False, why)")
      .def_static("create", &Timeline::create, "vulkan"_a, "cuda"_a)
      .def("vulkan_after_cuda", &Timeline::vulkan_after_cuda, nb::call_guard<nb::gil_scoped_release>(),
           "The CUDA context's work so far (its stream) runs before the Vulkan context's next work")
      .def("cuda_after_vulkan", &Timeline::cuda_after_vulkan, nb::call_guard<nb::gil_scoped_release>(),
           "The Vulkan context's work so far is submitted and runs before the CUDA context's work from now on");

  nb::class_<Graph>(m, "Graph", "Op calls captured once and replayed (kf::Graph, docs/architecture.md)")
      .def("replay", &Graph::replay, nb::call_guard<nb::gil_scoped_release>(),
           "Runs the captured calls again; the results land in the tensors they wrote")
      .def("__call__", &Graph::replay, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("ops", &Graph::ops)
      .def_prop_ro("native", &Graph::native);

  nb::class_<GraphCache>(m, "GraphCache",
                         "Graphs kept per bucket of a changing size (kf::GraphCache, docs/architecture.md)")
      .def(nb::init<std::vector<int64_t>>(), "buckets"_a, "The bucket sizes, ascending and positive")
      .def("bucket", &GraphCache::bucket, "n"_a, "The smallest bucket >= n")
      .def("get",
           [](GraphCache& c, int64_t n, nb::callable capture) -> Graph& {
             return c.get(n, [&](int64_t b) { return nb::cast<Graph>(capture(b)); });
           },
           "n"_a, "capture"_a, nb::rv_policy::reference_internal,
           "The graph of n's bucket; capture(bucket) makes it the first time that bucket is asked for")
      .def("__len__", &GraphCache::size);

  // The optimizers over lists (kf/training.hpp): every tensor checked before any is updated, one submission.
  m.def("adamw_step",
        [](const std::vector<Tensor>& p, const std::vector<Tensor>& g, const std::vector<Tensor>& mm,
           const std::vector<Tensor>& v, double lr, double beta1, double beta2, double eps, double wd, int64_t step) {
          AdamWOptions o;
          o.lr = lr, o.beta1 = beta1, o.beta2 = beta2, o.eps = eps, o.weight_decay = wd;
          nb::gil_scoped_release r;
          adamw_step(p, g, mm, v, o, step);
        },
        "params"_a, "grads"_a, "m"_a, "v"_a, "lr"_a, "beta1"_a, "beta2"_a, "eps"_a, "weight_decay"_a, "step"_a);
  m.def("sgd_step",
        [](const std::vector<Tensor>& p, const std::vector<Tensor>& g, const std::vector<Tensor>& b, double lr,
           double momentum, double dampening, double wd, bool nesterov, int64_t step) {
          SgdOptions o;
          o.lr = lr, o.momentum = momentum, o.dampening = dampening, o.weight_decay = wd, o.nesterov = nesterov;
          nb::gil_scoped_release r;
          sgd_step(p, g, b, o, step);
        },
        "params"_a, "grads"_a, "momentum_buffers"_a, "lr"_a, "momentum"_a, "dampening"_a, "weight_decay"_a,
        "nesterov"_a, "step"_a);
  bind_fast_call(m);
  m.def("backends", &Context::backends);
  m.def("op_defs", [] {
    nb::list l;
    for (const auto& op : registry()) l.append(describe(op));
    return l;
  }, "The registry's ops: names, inputs, outputs, dtypes and test cases (src/ops/registry.hpp)");
  m.def("attr_names", [] {
    std::vector<std::string> v;
    for (const auto& f : fields()) v.push_back(f.name);
    return v;
  });
  m.def("attr_defaults", [] {
    nb::list l;
    static const Attrs defaults{};
    for (const auto& f : fields()) l.append(nb::make_tuple(f.name, f.get(defaults)));
    return l;
  }, "(name, default) of every kf::Attrs field, in declaration order");
  m.def("infer", [](const std::string& name, const std::vector<Shape>& shapes, nb::handle attrs) {
    const OpDef& op = get_op(name);
    const Attrs a = attrs_from(name, attrs);
    const auto s = op.infer(op, shapes_of(op, shapes), a);
    return s;
  }, "The output shapes of an op for its input shapes (an absent optional input: an empty shape)");
  m.def("output_dtype", [](const std::string& name, const std::string& op_dtype, nb::handle attrs) {
    return std::string(to_string(get_op(name).output_dtype(dtype_from_string(op_dtype), attrs_from(name, attrs))));
  });
  m.def("input_dtype", [](const std::string& name, size_t k, const std::string& op_dtype, nb::handle attrs) {
    return std::string(to_string(get_op(name).input_dtype(k, dtype_from_string(op_dtype), attrs_from(name, attrs))));
  }, "The dtype input k of an op takes in a call of op dtype op_dtype (pinned, out_dtype, else op_dtype)");
  m.def("case_inputs", [](const std::string& name, size_t index, uint64_t seed) {
    const OpDef& op = get_op(name);
    if (index >= op.tests.size()) throw nb::index_error("no such test case");
    const TestCase& tc = op.tests[index];
    auto values = check::random_inputs(tc.inputs, tc.range, seed);
    if (op.prepare_inputs) op.prepare_inputs(tc.inputs, tc.attrs, values);
    nb::list out;
    for (size_t k = 0; k < values.size(); ++k)
      out.append(tc.inputs[k].empty() ? nb::none() : f64_array(tc.inputs[k], values[k]));
    return out;
  }, "The inputs of a registry test case as the C++ tests draw them (uniform, then OpDef::prepare_inputs)");
  m.def("reference", [](const std::string& name, nb::handle inputs, nb::handle attrs) {
    const OpDef& op = get_op(name);
    const Attrs a = attrs_from(name, attrs);
    std::vector<HostTensor> in(op.inputs.size());
    std::vector<Shape> shapes(op.inputs.size());
    size_t k = 0;
    for (nb::handle h : inputs) {
      if (k >= in.size()) throw Error(ErrorCode::InvalidArgument, name + ": too many inputs");
      if (!h.is_none()) {
        auto arr = nb::cast<F64>(h);
        in[k].shape = shapes[k] = Shape(arr.shape_ptr(), arr.shape_ptr() + arr.ndim());
        in[k].data.assign(arr.data(), arr.data() + arr.size());
      }
      ++k;
    }
    const auto out_shapes = op.infer(op, shapes, a);
    std::vector<HostTensor> out(out_shapes.size());
    for (size_t j = 0; j < out.size(); ++j) {
      out[j].shape = out_shapes[j];
      out[j].data.assign(static_cast<size_t>(numel(out_shapes[j])), 0.0);
    }
    {
      nb::gil_scoped_release r;
      op.reference(in, out, a);
    }
    nb::list l;
    for (auto& o : out) l.append(f64_array(o.shape, std::move(o.data)));
    return l;
  }, "The registry's float64 reference of an op on float64 arrays (None for an absent optional input)");
  m.def("terms", [](const std::string& name, const std::vector<Shape>& shapes) {
    const OpDef& op = get_op(name);
    return op.terms(shapes_of(op, shapes));
  });
  m.def("compare", [](F64 out, F64 ref, const std::string& dt, double terms) {
    std::vector<double> o(out.data(), out.data() + out.size()), r(ref.data(), ref.data() + ref.size());
    return check::compare(o, r, dtype_from_string(dt), terms).message;
  }, "docs/ops.md's comparison with the float64 reference: '' when the output passes, else why not");
}
