// kernelfusion._kf.fast_call: the per-call path of kernelfusion.ops (and of torch_ops and functional, which
// call it through ops.run). One C++ call takes the op's kf::OpId, the inputs, out= and the attributes, and
// does what the generic Python path (ops.py, _cuda.py) does for the common cases in a few microseconds less:
// torch tensors are read through their own attributes (data_ptr, shape, dtype compared with torch's dtype
// objects; no DLPack capsule per call, the tensor object itself is the keep-alive), outputs are allocated by
// torch (empty_like where an input has the output's shape and dtype) or NumPy, and the CUDA context of
// (device, current stream) comes from a small cache. Anything else (kf tensors, other backends, tensor
// subclasses, arrays the fast path would have to convert in ways it does not know) returns NotImplemented
// before anything runs, and the caller takes the generic path, which keeps every behaviour and message.
#include <Python.h>
#include <structmember.h>
#include <dlfcn.h>

#include <string>
#include <utility>
#include <vector>

#include <nanobind/stl/string.h>

#include "core/internal.hpp"
#include "core/op_id.hpp"
#include "hal/hal.hpp"
#include "module.hpp"
#include "ops/registry.hpp"

namespace kf::py {
namespace {

constexpr int kDTypes = 5;  // kf::DType's values: f32, f16, bf16, f64, i32

// The objects of NumPy and torch the fast path compares with and calls: set once by kernelfusion.ops (torch's
// when it first meets torch). Never destroyed: the interpreter may be gone when static destructors run.
struct State {
  PyTypeObject* ndarray = nullptr;
  nb::object np_empty, np_contiguous, default_context;
  nb::object np_dtypes[kDTypes];  // None for bf16 (NumPy has none)
  bool torch = false;
  PyTypeObject* tensor = nullptr;
  PyTypeObject* parameter = nullptr;
  PyObject* torch_dtypes[kDTypes] = {};
  nb::object empty_like, contiguous_format;
  nb::object raw_stream;    // torch._C._cuda_getCurrentRawStream; None without kf's CUDA / HIP backend
  nb::object cuda_context;  // (device index, stream handle) -> the kernelfusion.Context of that stream
  struct Cached {
    int64_t index;
    uintptr_t stream;
    nb::object context;
  };
  std::vector<Cached> contexts;
};

State& state() {
  static State* s = new State;
  return *s;
}

// Interned attribute names, made once.
#define KF_NAME(s)                                       \
  ([] {                                                   \
    static PyObject* p = PyUnicode_InternFromString(s);   \
    return p;                                             \
  }())

nb::object get(nb::handle o, PyObject* name) {
  PyObject* r = PyObject_GetAttr(o.ptr(), name);
  if (!r) throw nb::python_error();
  return nb::steal(r);
}

nb::object call0(nb::handle o, PyObject* name) {
  PyObject* r = PyObject_CallMethodNoArgs(o.ptr(), name);
  if (!r) throw nb::python_error();
  return nb::steal(r);
}

// Outputs made in C++: at::empty_strided through the C functions torch keeps stable for compiled models
// (aoti_torch_*, libtorch_cpu), turned into a Python tensor by torch's own THPVariable_Wrap
// (libtorch_python). torch.empty_like called through Python's API cost about 1.5 us more per output on an
// H200, most of it parsing its arguments. Found when torch is imported and
// checked once on a small tensor; if anything is missing or wrong, outputs come from empty_like as before.
struct TorchAlloc {
  using Handle = void*;  // AtenTensorHandle: an at::Tensor* the caller owns
  int32_t (*empty_strided)(int64_t, const int64_t*, const int64_t*, int32_t, int32_t, int32_t, Handle*) = nullptr;
  int32_t (*data_ptr)(Handle, void**) = nullptr;
  int32_t (*destroy)(Handle) = nullptr;
  // THPVariable_Wrap(const at::TensorBase&): a reference is passed as the address, and an at::Tensor is
  // its TensorBase (one intrusive pointer, no virtual table), so the handle itself is the argument.
  PyObject* (*wrap)(Handle) = nullptr;
  int32_t dtypes[kDTypes] = {};
  int32_t cpu = 0, cuda = 0;
  bool ok = false;
  std::string why = "torch is not imported";
  // Reading: the same functions' accessors on the at::Tensor a torch.Tensor object holds right after its
  // PyObject header (THPVariable::cdata): an at::Tensor itself (kTensor), or in older torch a
  // c10::MaybeOwned<at::Tensor> (kMaybeOwned: a bool, then the tensor or a pointer to it). Which one is
  // found at set-up by comparing pointers (nothing unknown is followed); kNone reads through Python.
  enum Layout { kNone, kTensor, kMaybeOwned } layout = kNone;  // the one in use (fast_cpp_reads)
  Layout found = kNone;                                          // the one find_layout found
  int32_t (*get_dtype)(Handle, int32_t*) = nullptr;
  int32_t (*get_dim)(Handle, int64_t*) = nullptr;
  int32_t (*get_sizes)(Handle, int64_t**) = nullptr;
  int32_t (*get_strides)(Handle, int64_t**) = nullptr;
  int32_t (*get_device_type)(Handle, int32_t*) = nullptr;
  int32_t (*get_device_index)(Handle, int32_t*) = nullptr;
};

TorchAlloc& torch_alloc() {
  static TorchAlloc* a = new TorchAlloc;
  return *a;
}

// A new contiguous torch tensor of shape s and dtype dt (on CUDA device `device`, or the host), and its
// address; an invalid object when torch's functions refused (the caller then allocates through Python).
nb::object alloc_torch(const Shape& s, DType dt, bool cuda, int64_t device, void*& data) {
  const TorchAlloc& a = torch_alloc();
  if (!a.ok) return {};
  int64_t strides[16];
  const size_t n = s.size();
  if (n > 16) return {};
  int64_t step = 1;
  for (size_t d = n; d-- > 0;) {
    strides[d] = step;
    step *= s[d] > 1 ? s[d] : 1;
  }
  TorchAlloc::Handle h = nullptr;
  if (a.empty_strided(static_cast<int64_t>(n), s.data(), strides, a.dtypes[static_cast<int>(dt)], cuda ? a.cuda : a.cpu,
                      cuda ? static_cast<int32_t>(device) : 0, &h) != 0 || !h)
    return {};
  nb::object r;
  if (a.data_ptr(h, &data) == 0) r = nb::steal(a.wrap(h));
  a.destroy(h);  // the Python tensor holds its own reference
  if (!r.is_valid()) PyErr_Clear();
  return r;
}

// The at::Tensor of a torch.Tensor object (TorchAlloc::layout not kNone).
TorchAlloc::Handle tensor_handle(const TorchAlloc& a, PyObject* o) {
  char* p = reinterpret_cast<char*>(o) + sizeof(PyObject);
  if (a.layout == TorchAlloc::kTensor) return p;
  if (*reinterpret_cast<const bool*>(p)) return *reinterpret_cast<TorchAlloc::Handle*>(p + sizeof(void*));
  return p + sizeof(void*);
}

// Which layout a torch.Tensor object has: a tensor made here (its TensorImpl pointer known) is wrapped, and
// the pointer looked for where each layout keeps it; the readers are then checked against Python's
// attributes on a view with an offset and on a transposed (not contiguous) view.
void find_layout(TorchAlloc& a, nb::handle tensor_type) {
  a.layout = a.found = TorchAlloc::kNone;
  auto* type = reinterpret_cast<PyTypeObject*>(tensor_type.ptr());
  if (type->tp_basicsize < static_cast<Py_ssize_t>(sizeof(PyObject) + 2 * sizeof(void*))) return;
  const int64_t sizes[2] = {4, 6}, strides[2] = {6, 1};
  TorchAlloc::Handle h = nullptr;
  if (a.empty_strided(2, sizes, strides, a.dtypes[0], a.cpu, 0, &h) != 0 || !h) return;
  void* impl = *reinterpret_cast<void**>(h);
  const nb::object t = nb::steal(a.wrap(h));
  a.destroy(h);
  if (!t.is_valid() || Py_TYPE(t.ptr()) != type) {
    PyErr_Clear();
    return;
  }
  const char* p = reinterpret_cast<const char*>(t.ptr()) + sizeof(PyObject);
  if (*reinterpret_cast<void* const*>(p) == impl) a.layout = TorchAlloc::kTensor;
  else if (*p == 0 && *reinterpret_cast<void* const*>(p + sizeof(void*)) == impl) a.layout = TorchAlloc::kMaybeOwned;
  else return;
  // the readers against Python's own answers
  const nb::object views[2] = {get(t, KF_NAME("T")), t[nb::slice(1, 4, 1)]};
  for (const nb::object& v : views) {
    TorchAlloc::Handle vh = tensor_handle(a, v.ptr());
    int64_t dim = 0, *sz = nullptr, *st = nullptr;
    int32_t dt = -1, dev = -1;
    void* data = nullptr;
    const bool read = a.get_dim(vh, &dim) == 0 && a.get_sizes(vh, &sz) == 0 && a.get_strides(vh, &st) == 0 &&
                      a.get_dtype(vh, &dt) == 0 && a.get_device_type(vh, &dev) == 0 && a.data_ptr(vh, &data) == 0;
    const nb::tuple shape = nb::cast<nb::tuple>(get(v, KF_NAME("shape")));
    const nb::tuple stride = nb::cast<nb::tuple>(call0(v, KF_NAME("stride")));
    bool same = read && dim == 2 && shape.size() == 2 && dt == a.dtypes[0] && dev == a.cpu &&
                data == PyLong_AsVoidPtr(call0(v, KF_NAME("data_ptr")).ptr());
    for (size_t d = 0; same && d < 2; ++d)
      same = sz[d] == nb::cast<int64_t>(shape[d]) && st[d] == nb::cast<int64_t>(stride[d]);
    if (!same) {
      PyErr_Clear();
      a.layout = TorchAlloc::kNone;
      return;
    }
  }
  a.found = a.layout;
}

// Resolves torch's functions in its already loaded libraries (lib_dir: torch/lib) and checks them on a
// 2 x 3 host tensor. Returns "" when outputs are made in C++ from now on, else why not.
std::string setup_torch_alloc(const std::string& lib_dir, nb::handle tensor_type, nb::sequence dtype_codes) {
  TorchAlloc& a = torch_alloc();
  a.ok = false;
  void* cpu = dlopen((lib_dir + "/libtorch_cpu.so").c_str(), RTLD_LAZY | RTLD_NOLOAD);
  void* py = dlopen((lib_dir + "/libtorch_python.so").c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (!cpu || !py) return a.why = "torch's libtorch_cpu.so or libtorch_python.so is not loaded from " + lib_dir;
  bool missing = false;
  auto sym = [&](void* lib, const char* name) {
    void* p = dlsym(lib, name);
    if (!p && !missing) a.why = std::string("torch has no ") + name;
    missing = missing || !p;
    return p;
  };
  a.empty_strided = reinterpret_cast<decltype(a.empty_strided)>(sym(cpu, "aoti_torch_empty_strided"));
  a.data_ptr = reinterpret_cast<decltype(a.data_ptr)>(sym(cpu, "aoti_torch_get_data_ptr"));
  a.destroy = reinterpret_cast<decltype(a.destroy)>(sym(cpu, "aoti_torch_delete_tensor_object"));
  a.wrap = reinterpret_cast<decltype(a.wrap)>(sym(py, "_Z16THPVariable_WrapRKN2at10TensorBaseE"));
  auto code = [&](const char* name, int32_t& out) {
    auto f = reinterpret_cast<int32_t (*)()>(sym(cpu, name));
    if (f) out = f();
  };
  code("aoti_torch_device_type_cpu", a.cpu);
  code("aoti_torch_device_type_cuda", a.cuda);
  // kf::DType's order
  static const char* const names[kDTypes] = {"aoti_torch_dtype_float32", "aoti_torch_dtype_float16",
                                             "aoti_torch_dtype_bfloat16", "aoti_torch_dtype_float64",
                                             "aoti_torch_dtype_int32"};
  for (int k = 0; k < kDTypes; ++k) code(names[k], a.dtypes[k]);
  a.get_dtype = reinterpret_cast<decltype(a.get_dtype)>(sym(cpu, "aoti_torch_get_dtype"));
  a.get_dim = reinterpret_cast<decltype(a.get_dim)>(sym(cpu, "aoti_torch_get_dim"));
  a.get_sizes = reinterpret_cast<decltype(a.get_sizes)>(sym(cpu, "aoti_torch_get_sizes"));
  a.get_strides = reinterpret_cast<decltype(a.get_strides)>(sym(cpu, "aoti_torch_get_strides"));
  a.get_device_type = reinterpret_cast<decltype(a.get_device_type)>(sym(cpu, "aoti_torch_get_device_type"));
  a.get_device_index = reinterpret_cast<decltype(a.get_device_index)>(sym(cpu, "aoti_torch_get_device_index"));
  a.layout = a.found = TorchAlloc::kNone;
  if (missing) return a.why;
  // The check: every dtype on the host, compared with what torch itself says of the tensor.
  a.ok = true;
  int k = 0;
  for (nb::handle expected : dtype_codes) {
    if (k >= kDTypes) break;
    void* data = nullptr;
    const Shape s{2, 3};
    const nb::object t = alloc_torch(s, static_cast<DType>(k++), false, -1, data);
    const bool right = t.is_valid() && Py_TYPE(t.ptr()) == reinterpret_cast<PyTypeObject*>(tensor_type.ptr()) &&
                       get(t, KF_NAME("dtype")).ptr() == expected.ptr() && nb::cast<nb::tuple>(get(t, KF_NAME("shape"))).size() == 2 &&
                       call0(t, KF_NAME("is_contiguous")).ptr() == Py_True && data &&
                       PyLong_AsVoidPtr(call0(t, KF_NAME("data_ptr")).ptr()) == data &&
                       nb::cast<int64_t>(get(t, KF_NAME("shape"))[1]) == 3;
    if (!right) {
      a.ok = false;
      PyErr_Clear();
      return a.why = "torch's C functions made a tensor unlike the one asked for";
    }
  }
  a.why.clear();
  find_layout(a, tensor_type);
  return a.why;
}

// The keep-alive of memory kf uses in place: a reference to the Python object that owns it.
std::shared_ptr<void> hold(nb::handle h) {
  Py_INCREF(h.ptr());
  return std::shared_ptr<void>(h.ptr(), [](void* p) {
    if (!Py_IsInitialized()) return;
    if (PyGILState_Check()) {
      Py_DECREF(static_cast<PyObject*>(p));
      return;
    }
    nb::gil_scoped_acquire g;  // a tensor dropped on a thread without the GIL (the ops run with it released)
    Py_DECREF(static_cast<PyObject*>(p));
  });
}

enum class Kind { None, NumPy, TorchHost, TorchCuda };

// What the fast path reads of a torch tensor.
enum class Where { Cpu, Cuda, Other };
struct TorchView {
  DType dtype{};
  Shape shape;
  void* data = nullptr;
  bool contiguous = false;
  Where where = Where::Other;
  int64_t device = -1;  // CUDA's device index
};

bool flag(nb::handle o, PyObject* name) { return get(o, name).ptr() == Py_True; }

// Reads t's dtype, shape, address, contiguity and device: in C++ through torch's accessors where
// TorchAlloc found the layout, else through the tensor's Python attributes. False when its dtype is none
// of kf's (the generic path raises).
bool torch_view(const State& st, nb::handle t, TorchView& v) {
  const TorchAlloc& a = torch_alloc();
  if (a.layout != TorchAlloc::kNone) {
    const TorchAlloc::Handle h = tensor_handle(a, t.ptr());
    int32_t dt = -1, type = -1, index = -1;
    int64_t dim = 0, *sizes = nullptr, *strides = nullptr;
    if (a.get_dtype(h, &dt) == 0 && a.get_device_type(h, &type) == 0 && a.get_device_index(h, &index) == 0) {
      v.where = type == a.cuda ? Where::Cuda : type == a.cpu ? Where::Cpu : Where::Other;
      int k = 0;
      while (k < kDTypes && a.dtypes[k] != dt) ++k;
      if (k == kDTypes) return false;
      v.dtype = static_cast<DType>(k);
      v.device = index;
      if (v.where == Where::Other) return true;  // (no address to read: the caller leaves it)
      if (a.get_dim(h, &dim) == 0 && a.get_sizes(h, &sizes) == 0 && a.get_strides(h, &strides) == 0 &&
          a.data_ptr(h, &v.data) == 0) {
        v.shape.assign(sizes, sizes + dim);
        // torch's is_contiguous(): row-major strides, ignoring dimensions of size 1; any empty tensor is
        v.contiguous = true;
        int64_t expect = 1;
        bool empty = false;
        for (int64_t d = dim; d-- > 0;) {
          empty = empty || sizes[d] == 0;
          if (sizes[d] != 1 && strides[d] != expect) v.contiguous = false;
          expect *= sizes[d];
        }
        v.contiguous = v.contiguous || empty;
        return true;
      }
    }
    // a tensor torch's accessors refused (sparse, ...): Python's attributes, which raise what applies
  }
  const nb::object dt = get(t, KF_NAME("dtype"));
  int k = 0;
  while (k < kDTypes && st.torch_dtypes[k] != dt.ptr()) ++k;
  if (k == kDTypes) return false;
  v.dtype = static_cast<DType>(k);
  v.where = flag(t, KF_NAME("is_cuda")) ? Where::Cuda : flag(t, KF_NAME("is_cpu")) ? Where::Cpu : Where::Other;
  if (v.where == Where::Other) return true;
  if (v.where == Where::Cuda) v.device = nb::cast<int64_t>(call0(t, KF_NAME("get_device")));
  const nb::object shape = get(t, KF_NAME("shape"));
  if (!PyTuple_Check(shape.ptr())) return false;
  const Py_ssize_t n = PyTuple_GET_SIZE(shape.ptr());
  v.shape.resize(static_cast<size_t>(n));
  for (Py_ssize_t d = 0; d < n; ++d) {
    v.shape[static_cast<size_t>(d)] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), d));
    if (PyErr_Occurred()) throw nb::python_error();
  }
  v.contiguous = call0(t, KF_NAME("is_contiguous")).ptr() == Py_True;
  v.data = PyLong_AsVoidPtr(call0(t, KF_NAME("data_ptr")).ptr());
  if (PyErr_Occurred()) throw nb::python_error();
  return true;
}

nb::object shape_tuple(const Shape& s) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(s.size()));
  if (!t) throw nb::python_error();
  for (size_t d = 0; d < s.size(); ++d) PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(d), PyLong_FromLongLong(s[d]));
  return nb::steal(t);
}

using HostArray = nb::ndarray<nb::device::cpu>;
using ReadOnlyArray = nb::ndarray<nb::ro, nb::device::cpu>;

// A NumPy array's memory as kf sees it; false when its dtype has no kf dtype or it is not C-contiguous.
template <class A>
bool numpy_view(nb::handle h, A& a, DType& dt, Shape& s) {
  if (!nb::try_cast(h, a, false)) return false;
  const auto d = from_dlpack(a.dtype());
  if (!d) return false;
  dt = *d;
  s.resize(a.ndim());
  int64_t expect = 1;
  for (size_t k = a.ndim(); k-- > 0;) {
    s[k] = a.shape(k);
    if (a.shape(k) > 1 && a.stride(k) != expect) return false;
    expect *= a.shape(k);
  }
  return true;
}

bool is_torch(const State& st, PyTypeObject* tp) { return st.torch && (tp == st.tensor || tp == st.parameter); }

// The context of CUDA tensors on device `index`: kf's on torch's current stream there, made once per
// (device, stream) by kernelfusion._cuda. None without kf's CUDA / HIP backend.
nb::object cuda_context(State& st, int64_t index) {
  if (st.raw_stream.is_none()) return nb::none();
  const nb::object h = st.raw_stream(index);
  const auto stream = static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(h.ptr()));
  if (PyErr_Occurred()) throw nb::python_error();
  for (const auto& c : st.contexts)
    if (c.index == index && c.stream == stream) return c.context;
  nb::object ctx = st.cuda_context(index, stream);
  if (!ctx.is_none()) st.contexts.push_back({index, stream, ctx});
  return ctx;
}

nb::object fast_call(int id, nb::handle inputs, nb::handle out, nb::handle attrs, nb::handle context, bool grad) {
  State& st = state();
  const nb::object skip = nb::borrow(Py_NotImplemented);
  if (id < 0 || id >= kOpCount) throw nb::index_error("fast_call: no op has this id");
  const OpDef& op = get_op(static_cast<OpId>(id));
  PyObject* seq = inputs.ptr();
  if (!st.ndarray || !(PyTuple_Check(seq) || PyList_Check(seq))) return skip;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  constexpr Py_ssize_t kMax = 16;
  if (n > static_cast<Py_ssize_t>(op.inputs.size()) || n > kMax) return skip;
  PyObject** items = PySequence_Fast_ITEMS(seq);

  // Which kind each input is; the call stays on the fast path when all are NumPy / CPU torch (the CPU
  // backend) or all CUDA torch tensors (the CUDA backend).
  Kind kinds[kMax];
  TorchView views[kMax];
  bool host = false, cuda = false, torch = false;
  int first = -1;  // the first torch input: outputs are allocated like it
  for (Py_ssize_t k = 0; k < n; ++k) {
    PyObject* x = items[k];
    PyTypeObject* tp = Py_TYPE(x);
    if (x == Py_None) {
      kinds[k] = Kind::None;
    } else if (tp == st.ndarray) {
      kinds[k] = Kind::NumPy;
      host = true;
    } else if (is_torch(st, tp)) {
      // torch_ops: a tensor that records autograd takes the generic path, which records it
      if (grad && flag(x, KF_NAME("requires_grad"))) return skip;
      TorchView& v = views[k];
      if (!torch_view(st, x, v)) return skip;
      if (v.where == Where::Cuda) {
        kinds[k] = Kind::TorchCuda;
        cuda = true;
      } else if (v.where == Where::Cpu) {
        kinds[k] = Kind::TorchHost;
        host = true;
      } else {
        return skip;
      }
      torch = true;
      if (first < 0) first = static_cast<int>(k);
    } else {
      return skip;  // kf tensors, lists, tensor subclasses, ...
    }
  }
  if (host == cuda) return skip;  // no array at all, or CUDA tensors mixed with host arrays (generic raises)

  nb::object ctx_obj;
  int64_t device = -1;
  if (cuda) device = views[first].device;
  if (!context.is_none()) ctx_obj = nb::borrow(context);
  else if (cuda) ctx_obj = cuda_context(st, device);
  else ctx_obj = st.default_context();
  Context* cp = nullptr;
  if (ctx_obj.is_none() || !nb::try_cast<Context*>(ctx_obj, cp) || !cp) return skip;
  Context& ctx = *cp;
  const std::string& backend = ctx.backend();
  if (cuda ? (backend != "cuda" && backend != "hip") || ctx.device().index != device : backend != "cpu") return skip;

  const Attrs a = attrs.is_none() ? Attrs{} : attrs_from(op.name, attrs);

  // The inputs, in place: a CPU tensor or array that is not contiguous is copied first, and so is a CUDA
  // tensor that is not contiguous and 256-byte aligned (as _cuda.wrap does).
  std::vector<Tensor> in(static_cast<size_t>(n));
  int like[kMax];  // inputs whose memory is contiguous as given: output templates for empty_like
  int n_like = 0;
  for (Py_ssize_t k = 0; k < n; ++k) {
    nb::handle x(items[k]);
    Tensor& t = in[static_cast<size_t>(k)];
    if (kinds[k] == Kind::None) continue;
    if (kinds[k] == Kind::NumPy) {
      ReadOnlyArray arr;
      DType dt;
      Shape s;
      nb::object owner = nb::borrow(x);
      if (!numpy_view(owner, arr, dt, s)) {
        owner = st.np_contiguous(x);
        if (!numpy_view(owner, arr, dt, s)) return skip;
      }
      t = ctx.wrap_host(const_cast<void*>(static_cast<const void*>(arr.data())), s, dt, hold(owner));
      continue;
    }
    TorchView& v = views[k];
    nb::object owner = nb::borrow(x);
    if (kinds[k] == Kind::TorchCuda) {
      if (v.device != device) return skip;  // the generic path raises
      const bool usable = v.contiguous && reinterpret_cast<uintptr_t>(v.data) % 256 == 0;
      if (!usable) {
        PyObject* kw = PyDict_New();
        if (!kw) throw nb::python_error();
        nb::object kwargs = nb::steal(kw);
        PyDict_SetItem(kw, KF_NAME("memory_format"), st.contiguous_format.ptr());
        owner = nb::steal(PyObject_Call(get(x, KF_NAME("clone")).ptr(), nb::tuple().ptr(), kw));
        if (!owner.is_valid()) throw nb::python_error();
        if (!torch_view(st, owner, v)) return skip;
      } else {
        like[n_like++] = static_cast<int>(k);
      }
      t = detail::wrap_known_device(ctx, v.data, v.shape, v.dtype, hold(owner));  // torch named its device
    } else {
      if (!v.contiguous) {
        owner = call0(x, KF_NAME("contiguous"));
        if (!torch_view(st, owner, v)) return skip;
      } else {
        like[n_like++] = static_cast<int>(k);
      }
      t = ctx.wrap_host(v.data, v.shape, v.dtype, hold(owner));
    }
  }

  // The outputs: the caller's (out=), written in place, or new arrays of the caller's kind.
  std::vector<Tensor> outs;
  nb::object result;
  std::vector<Shape> shapes;  // the outputs' shapes, when they are made here (no out=)
  if (!out.is_none()) {
    const bool many = PyTuple_Check(out.ptr()) || PyList_Check(out.ptr());
    const Py_ssize_t m = many ? PySequence_Fast_GET_SIZE(out.ptr()) : 1;
    PyObject* single = out.ptr();
    PyObject** o = many ? PySequence_Fast_ITEMS(out.ptr()) : &single;
    outs.resize(static_cast<size_t>(m));
    for (Py_ssize_t j = 0; j < m; ++j) {
      nb::handle x(o[j]);
      PyTypeObject* tp = Py_TYPE(x.ptr());
      if (!cuda && tp == st.ndarray) {  // a writable, C-contiguous array of a kf dtype, else generic
        HostArray arr;
        DType dt;
        Shape s;
        if (!numpy_view(x, arr, dt, s)) return skip;
        outs[static_cast<size_t>(j)] = ctx.wrap_host(arr.data(), s, dt, hold(x));
        continue;
      }
      if (!is_torch(st, tp)) return skip;
      TorchView v;
      if (!torch_view(st, x, v) || !v.contiguous) return skip;  // the generic path raises or copies
      if (v.where != (cuda ? Where::Cuda : Where::Cpu)) return skip;
      if (cuda) {
        if (reinterpret_cast<uintptr_t>(v.data) % 256 != 0 || v.device != device) return skip;
        outs[static_cast<size_t>(j)] = detail::wrap_known_device(ctx, v.data, v.shape, v.dtype, hold(x));
      } else {
        outs[static_cast<size_t>(j)] = ctx.wrap_host(v.data, v.shape, v.dtype, hold(x));
      }
    }
    result = nb::borrow(out);
  } else {
    std::vector<const Tensor*> ptrs(in.size());
    for (size_t k = 0; k < in.size(); ++k) ptrs[k] = &in[k];
    shapes = check_call(op, ptrs, a, ctx.impl());  // kf::Error as Context::call raises
    const DType odt = op.output_dtype(op_dtype(op, in), a);
    if (!torch && odt == DType::bf16) return skip;  // NumPy has no bf16: the generic path raises
    PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(shapes.size()));
    if (!tuple) throw nb::python_error();
    result = nb::steal(tuple);
    outs.resize(shapes.size());
    for (size_t j = 0; j < shapes.size(); ++j) {
      const Shape& s = shapes[j];
      nb::object r;
      void* data = nullptr;
      if (torch && (r = alloc_torch(s, odt, cuda, device, data)).is_valid()) {
        outs[j] = cuda ? detail::wrap_known_device(ctx, data, s, odt, hold(r)) : ctx.wrap_host(data, s, odt, hold(r));
      } else if (torch) {
        for (int q = 0; q < n_like && !r.is_valid(); ++q)
          if (in[static_cast<size_t>(like[q])].shape() == s && in[static_cast<size_t>(like[q])].dtype() == odt)
            r = st.empty_like(nb::handle(items[like[q]]));
        if (!r.is_valid())
          r = get(nb::handle(items[first]), KF_NAME("new_empty"))(shape_tuple(s), "dtype"_a = nb::handle(st.torch_dtypes[static_cast<int>(odt)]));
        // a fresh contiguous tensor of shape s and dtype odt: its address is all there is to read
        data = PyLong_AsVoidPtr(call0(r, KF_NAME("data_ptr")).ptr());
        if (PyErr_Occurred()) throw nb::python_error();
        outs[j] = cuda ? detail::wrap_known_device(ctx, data, s, odt, hold(r)) : ctx.wrap_host(data, s, odt, hold(r));
      } else {
        r = st.np_empty(shape_tuple(s), st.np_dtypes[static_cast<int>(odt)]);
        HostArray arr;
        DType dt;
        Shape rs;
        if (!numpy_view(r, arr, dt, rs)) return skip;
        outs[j] = ctx.wrap_host(arr.data(), rs, dt, hold(r));
      }
      PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(j), r.release().ptr());
    }
    if (shapes.size() == 1) result = nb::borrow(PyTuple_GET_ITEM(tuple, 0));
  }
  {
    nb::gil_scoped_release r;
    // by the OpDef (no lookup of the name), with the shapes checked above when the outputs were made here
    detail::run_op(ctx, op, in, outs, a, out.is_none() ? &shapes : nullptr);
  }
  return result;
}

// kernelfusion.ops' functions: one callable per op, called by Python's vectorcall protocol, so that a call
// with its inputs as positional arguments and at most out= and context= goes straight to fast_call (a
// Python function's frame, *args tuple and **kwargs dict cost about 0.3 us a call on an H200's host).
// Anything else (attributes or inputs by keyword, too many arguments) goes to `generic`, the Python
// function with every rule of the call; a call fast_call leaves (NotImplemented) goes to `slow`, the
// generic path itself.
struct OpFunction {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* dict;      // __name__, __doc__, __wrapped__, ... (set by kernelfusion.ops)
  PyObject* id;        // the op's kf::OpId, a Python int
  PyObject* fast;      // _kf.fast_call as bound, whose wrapper turns kf::Error into kernelfusion's exceptions
  PyObject* generic;   // (*inputs, out=None, context=None, **attrs)
  PyObject* slow;      // (inputs, out, context)
  Py_ssize_t n_inputs;
};

PyObject* op_function_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* f = reinterpret_cast<OpFunction*>(self);
  const Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  PyObject *out = Py_None, *context = Py_None;
  bool plain = n <= f->n_inputs;
  for (Py_ssize_t i = 0; plain && kwnames && i < PyTuple_GET_SIZE(kwnames); ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);  // (keyword names are interned strings)
    if (key == KF_NAME("out") || PyUnicode_CompareWithASCIIString(key, "out") == 0) out = args[n + i];
    else if (key == KF_NAME("context") || PyUnicode_CompareWithASCIIString(key, "context") == 0) context = args[n + i];
    else plain = false;
  }
  if (!plain) return PyObject_Vectorcall(f->generic, args, nargsf, kwnames);
  PyObject* inputs = PyTuple_New(n);
  if (!inputs) return nullptr;
  for (Py_ssize_t k = 0; k < n; ++k) {
    Py_INCREF(args[k]);
    PyTuple_SET_ITEM(inputs, k, args[k]);
  }
  PyObject* argv[5] = {f->id, inputs, out, Py_None, context};
  PyObject* r = PyObject_Vectorcall(f->fast, argv, 5, nullptr);
  if (r == Py_NotImplemented) {
    Py_DECREF(r);
    PyObject* rest[3] = {inputs, out, context};
    r = PyObject_Vectorcall(f->slow, rest, 3, nullptr);
  }
  Py_DECREF(inputs);
  return r;  // the results, or null with Python's error set
}

int op_function_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* f = reinterpret_cast<OpFunction*>(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(f->dict);
  Py_VISIT(f->id);
  Py_VISIT(f->fast);
  Py_VISIT(f->generic);
  Py_VISIT(f->slow);
  return 0;
}

int op_function_clear(PyObject* self) {
  auto* f = reinterpret_cast<OpFunction*>(self);
  Py_CLEAR(f->dict);
  Py_CLEAR(f->id);
  Py_CLEAR(f->fast);
  Py_CLEAR(f->generic);
  Py_CLEAR(f->slow);
  return 0;
}

void op_function_dealloc(PyObject* self) {
  PyTypeObject* tp = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  op_function_clear(self);
  tp->tp_free(self);
  Py_DECREF(tp);
}

PyObject* op_function_repr(PyObject* self) {
  return PyObject_Repr(reinterpret_cast<OpFunction*>(self)->generic);
}

// OpFunction(id, n_inputs, fast, generic, slow)
PyObject* op_function_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *id, *fast, *generic, *slow;
  Py_ssize_t n_inputs;
  if (kwargs && PyDict_Size(kwargs) > 0) {
    PyErr_SetString(PyExc_TypeError, "OpFunction takes no keyword arguments");
    return nullptr;
  }
  if (!PyArg_ParseTuple(args, "OnOOO", &id, &n_inputs, &fast, &generic, &slow)) return nullptr;
  auto* f = reinterpret_cast<OpFunction*>(type->tp_alloc(type, 0));
  if (!f) return nullptr;
  f->vectorcall = op_function_call;
  f->n_inputs = n_inputs;
  for (auto [dst, src] : {std::pair{&f->id, id}, {&f->fast, fast}, {&f->generic, generic}, {&f->slow, slow}}) {
    Py_INCREF(src);
    *dst = src;
  }
  return reinterpret_cast<PyObject*>(f);
}

PyMemberDef op_function_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(OpFunction, vectorcall), READONLY, nullptr},
    {"__dictoffset__", T_PYSSIZET, offsetof(OpFunction, dict), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

PyType_Slot op_function_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(op_function_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(op_function_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(op_function_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(op_function_clear)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_repr, reinterpret_cast<void*>(op_function_repr)},
    {Py_tp_members, op_function_members},
    {Py_tp_doc, const_cast<char*>("A kf registry op as a function of kernelfusion.ops (python/src/fast_call.cpp).")},
    {0, nullptr}};

PyType_Spec op_function_spec = {"kernelfusion._kf.OpFunction", sizeof(OpFunction), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
                                op_function_slots};

}  // namespace

void bind_fast_call(nb::module_& m) {
  PyObject* op_function = PyType_FromSpec(&op_function_spec);
  if (!op_function) throw nb::python_error();
  m.attr("OpFunction") = nb::steal(op_function);
  m.def("fast_call", &fast_call, "op_id"_a, "inputs"_a, "out"_a = nb::none(), "attrs"_a = nb::none(),
        "context"_a = nb::none(), "grad"_a = false,
        "Runs registry op op_id (describe()['id']) on NumPy arrays, CPU torch tensors or CUDA torch tensors "
        "without copies; NotImplemented (before anything ran) for the calls it leaves to the generic path. "
        "grad: leave tensors that require grad to the generic path");
  m.def("fast_setup_numpy",
        [](nb::handle ndarray, nb::object empty, nb::object contiguous, nb::sequence dtypes, nb::object default_context) {
          State& st = state();
          st.ndarray = reinterpret_cast<PyTypeObject*>(ndarray.ptr());
          Py_INCREF(ndarray.ptr());
          st.np_empty = std::move(empty);
          st.np_contiguous = std::move(contiguous);
          int k = 0;
          for (nb::handle d : dtypes)
            if (k < kDTypes) st.np_dtypes[k++] = nb::borrow(d);
          st.default_context = std::move(default_context);
        });
  m.def("fast_setup_torch",
        [](nb::handle tensor, nb::handle parameter, nb::sequence dtypes, nb::object empty_like,
           nb::object contiguous_format, nb::object raw_stream, nb::object cuda_context) {
          State& st = state();
          Py_INCREF(tensor.ptr());
          Py_INCREF(parameter.ptr());
          st.tensor = reinterpret_cast<PyTypeObject*>(tensor.ptr());
          st.parameter = reinterpret_cast<PyTypeObject*>(parameter.ptr());
          int k = 0;
          for (nb::handle d : dtypes)
            if (k < kDTypes) {
              Py_INCREF(d.ptr());
              st.torch_dtypes[k++] = d.ptr();
            }
          st.empty_like = std::move(empty_like);
          st.contiguous_format = std::move(contiguous_format);
          st.raw_stream = std::move(raw_stream);
          st.cuda_context = std::move(cuda_context);
          st.torch = true;
        });
  m.def("fast_setup_alloc", &setup_torch_alloc, "lib_dir"_a, "tensor"_a, "dtypes"_a,
        "Makes fast_call's torch outputs in C++ (torch's aoti_torch_empty_strided and THPVariable_Wrap, found "
        "in lib_dir's already loaded libraries and checked on a small tensor of each dtype). Returns '' when "
        "it does, else why not (outputs then come from torch.empty_like).");
  m.def("fast_cpp_outputs",
        [](bool on) {
          TorchAlloc& a = torch_alloc();
          const bool was = a.ok;
          a.ok = on && a.why.empty();
          return was;
        },
        "on"_a,
        "Turns fast_call's torch outputs made in C++ off, or back on where fast_setup_alloc succeeded (for "
        "measuring the difference); returns whether they were on.");
  m.def("fast_cpp_reads",
        [](bool on) {
          TorchAlloc& a = torch_alloc();
          const bool was = a.layout != TorchAlloc::kNone;
          a.layout = on && a.ok ? a.found : TorchAlloc::kNone;
          return was;
        },
        "on"_a,
        "Turns fast_call's reading of torch tensors in C++ (torch's aoti_torch_get_* accessors, where "
        "fast_setup_alloc found the tensor object's layout) off, or back on; returns whether it was on.");
  m.def("exiting", [] { kf::hal::exiting() = true; },
        "From now on, contexts that close and memory CUDA imported from Vulkan are left to the operating system "
        "(kernelfusion's atexit handler: released after the drivers' own exit handlers, they aborted the process).");
  m.def("fast_forget_contexts", [] { state().contexts.clear(); },
        "Drops the cached CUDA contexts (at exit, while CUDA is still up)");
}

}  // namespace kf::py
