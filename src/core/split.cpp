// Calls past the device's largest storage binding, run in parts (split.hpp; docs/backends.md, "Limits").
//
// A tensor larger than Caps::max_storage_range (4 GiB on an H100 under Vulkan) cannot be bound whole. An
// op whose rows are independent (OpDef::split) runs instead as several dispatches, each over a range of
// rows (or, for element-wise ops without a row-broadcast operand, of elements) whose bindings start at an
// offset inside the tensors' buffers (hal::TensorArg::offset). Part boundaries are multiples of the
// device's binding-offset alignment in every tensor, and of 16 bytes: the kernels move 16-byte packs,
// which then never cross into the next part. The operands that broadcast over rows ([F], [1]) go whole.
#include "core/split.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "kf/error.hpp"
#include "ops/registry.hpp"

namespace kf::detail {
namespace {

// One tensor of the call: split over the part's rows (or elements), or passed whole to every part.
struct Piece {
  const Tensor* t = nullptr;
  bool whole = false;
  uint64_t unit_bytes = 0;  // bytes of one row (or element) of it
  int64_t unit_len = 1;     // elements of one row (1 for elements)
  bool per_row = false;     // one value per row (a reduction's output)
};

std::string describe(const OpDef& op, bool input, size_t k, const Tensor& t) {
  return std::string(input ? "input '" : "output '") + (input ? op.inputs[k] : op.outputs[k]) + "' " +
         to_string(t.shape()) + " " + to_string(t.dtype()) + " of " + std::to_string(t.nbytes()) + " bytes";
}

[[noreturn]] void refuse(const OpDef& op, const std::string& what, uint64_t limit, const std::string& why) {
  throw Error(ErrorCode::Unsupported, op.name + ": " + what + " exceeds the device's largest storage binding (" +
                                          std::to_string(limit) + " bytes); " + why + " (docs/backends.md, \"Limits\")");
}

}  // namespace

bool run_in_parts(ContextImpl& impl, const OpDef& op, const std::vector<Tensor>& inputs,
                  const std::vector<Tensor>& outputs, const Attrs& attrs) {
  const Caps& caps = impl.device->info().caps;
  const uint64_t limit = caps.max_storage_range;
  // Served without the backend (a zero-sized tensor) or as parts that are calls of their own (compose);
  // or only a buffer's padding is past the limit.
  bool exceeds = false;
  for (const auto* list : {&inputs, &outputs})
    for (const auto& t : *list) {
      if (t.defined() && t.numel() == 0) return false;
      exceeds |= t.defined() && t.nbytes() > limit;
    }
  if (!exceeds) return false;
  if (op.compose) return false;

  // The largest tensor, for the messages.
  bool big_input = true;
  size_t big = 0;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].defined() && inputs[k].nbytes() > inputs[big].nbytes()) big = k;
  for (size_t k = 0; k < outputs.size(); ++k)
    if (outputs[k].nbytes() > (big_input ? inputs[big].nbytes() : outputs[big].nbytes())) big = k, big_input = false;
  const Tensor& largest = big_input ? inputs[big] : outputs[big];
  const std::string what = describe(op, big_input, big, largest);
  if (op.split == Split::none)
    refuse(op, what, limit, op.name + " does not run in parts (only element-wise and row-wise ops do)");

  // Which tensors follow input 0's rows: its shape, or its leading dimensions with a last of their own
  // (swiglu's packed x and its y), or for an output its leading dimensions alone (a reduction's value per
  // row); rank 1 only as input 0's shape. The rest broadcast and go whole.
  const Tensor& x = inputs[0];
  const Shape& xs = x.shape();
  const int64_t rows = xs.size() <= 1 ? 1 : numel(Shape(xs.begin(), xs.end() - 1));
  std::vector<Piece> pieces;
  bool row_broadcast = false, same_shapes = true;
  const auto classify = [&](const Tensor& t, bool input, size_t k) {
    Piece p;
    p.t = &t;
    const Shape& s = t.shape();
    const bool per_row = !input && xs.size() >= 2 && s.size() + 1 == xs.size() && std::equal(s.begin(), s.end(), xs.begin());
    const bool follows = s == xs || per_row ||
                         (xs.size() >= 2 && s.size() == xs.size() && std::equal(s.begin(), s.end() - 1, xs.begin()));
    p.whole = !follows;
    p.per_row = per_row && s != xs;
    if (p.whole) {
      if (t.nbytes() > limit)
        refuse(op, describe(op, input, k, t), limit, "it broadcasts over the rows of '" + op.inputs[0] + "' and goes whole");
      row_broadcast |= t.numel() > 1;
    } else {
      same_shapes &= s == xs;
      p.unit_len = per_row || s.empty() ? 1 : s.back();
    }
    pieces.push_back(p);
  };
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].defined()) classify(inputs[k], true, k);
  for (size_t k = 0; k < outputs.size(); ++k) classify(outputs[k], false, k);

  // Parts over elements where nothing broadcasts over rows, else over rows.
  const bool by_elements = op.split == Split::elements && same_shapes && !row_broadcast;
  const int64_t units = by_elements ? x.numel() : rows;
  const uint64_t align = std::max<uint64_t>(16, caps.storage_offset_alignment);
  uint64_t step = 1, widest = 0;  // units a part's size is a multiple of; the largest unit in bytes
  for (Piece& p : pieces) {
    if (p.whole) continue;
    if (by_elements) p.unit_len = 1;
    p.unit_bytes = static_cast<uint64_t>(p.unit_len) * dtype_size(p.t->dtype());
    step = std::lcm(step, align / std::gcd(p.unit_bytes, align));
    widest = std::max(widest, p.unit_bytes);
  }
  const uint64_t per = limit / widest / step * step;  // units per part
  if (per == 0 || units <= 1)
    refuse(op, what, limit,
           std::string("a part holds whole ") + (by_elements ? "elements" : "rows") + " (" + std::to_string(widest) +
               " bytes each" +
               (step > 1 ? ", " + std::to_string(step) + " at a time for parts to start at multiples of " +
                               std::to_string(align) + " bytes"
                         : std::string()) +
               "), more than one binding holds");

  // The parts, each checked by the backend before any is recorded.
  const DType dtype = op_dtype(op, inputs);
  const int64_t n_parts = static_cast<int64_t>((static_cast<uint64_t>(units) + per - 1) / per);
  std::vector<hal::OpCall> calls(static_cast<size_t>(n_parts));
  for (int64_t part = 0; part < n_parts; ++part) {
    const int64_t u0 = part * static_cast<int64_t>(per);
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(per), units - u0);
    hal::OpCall& call = calls[static_cast<size_t>(part)];
    describe_call(op, dtype, attrs, call);
    call.inputs.resize(op.inputs.size());
    call.outputs.resize(outputs.size());
    size_t at = 0;
    const auto arg = [&](const Tensor& t, hal::TensorArg& a) {
      const Piece& p = pieces[at++];
      a.buffer = t.buffer_ref();
      if (p.whole) {
        a.shape = t.shape();
        a.numel = t.numel();
        return;
      }
      a.shape = by_elements || p.per_row ? Shape{n} : Shape{n, p.unit_len};
      a.numel = n * p.unit_len;
      a.offset = static_cast<uint64_t>(u0) * p.unit_bytes;
    };
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k].defined()) arg(inputs[k], call.inputs[k]);
    for (size_t k = 0; k < outputs.size(); ++k) arg(outputs[k], call.outputs[k]);
    std::string why;
    if (!impl.device->supports(call, &why))
      throw Error(ErrorCode::Unsupported, op.name + " (" + to_string(dtype) + ") cannot run on " +
                                              impl.device->info().name + " in parts (" + what + "): " + why);
  }
  if (op.check_values && !impl.capturing && !impl.device->stream_captured()) op.check_values(op, inputs);
  // A capture on a device without graphs of its own keeps the call and runs it at replay (graph.cpp).
  if (impl.capturing && !impl.capture_native) {
    impl.last_variant = "captured";
    return true;
  }
  std::string variant;
  for (const hal::OpCall& call : calls) variant.assign(impl.device->dispatch(call).str());
  impl.last_variant = variant + " (in " + std::to_string(n_parts) + " parts: " + what + ")";
  return true;
}

}  // namespace kf::detail
