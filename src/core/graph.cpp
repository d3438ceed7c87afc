// Captured graphs: Context::capture and Graph (include/kf/graph.hpp). A device with graphs of its own
// (hal::Device::begin_capture) records the dispatches into one; otherwise the calls are kept and run
// again one by one. Either way the graph keeps the calls' tensors, so their buffers live as long as it.
#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "core/context_impl.hpp"
#include "kf/error.hpp"

namespace kf {

struct GraphImpl {
  struct Call {
    std::string op;
    std::vector<Tensor> inputs, outputs;
    Attrs attrs;
  };
  std::shared_ptr<ContextImpl> ctx;
  std::shared_ptr<hal::Graph> device_graph;  // null: the core runs `calls` again
  std::vector<Call> calls;

  ~GraphImpl() {
    // The device's graph is released under the context's lock: its command buffer comes from a pool
    // the recording thread uses.
    if (device_graph) {
      std::lock_guard<std::recursive_mutex> lock(ctx->mu);
      device_graph.reset();
    }
  }
};

void ContextImpl::not_in_capture(const char* what) const {
  if (capturing)
    throw Error(ErrorCode::Unsupported, std::string(what) +
                                            " cannot be captured: it needs the host while Context::capture "
                                            "records (call it before or after the capture)");
}

void detail_record_captured(ContextImpl& c, const std::string& op, const std::vector<Tensor>& inputs,
                            const std::vector<Tensor>& outputs, const Attrs& attrs) {
  c.capturing->calls.push_back({op, inputs, outputs, attrs});
}

void Context::begin_capture() {
  impl_->mu.lock();  // held until end_capture or abort_capture
  if (impl_->capturing) {
    impl_->mu.unlock();
    throw Error(ErrorCode::InvalidArgument, "Context::capture: a capture is already open on this context "
                                            "(captures do not nest)");
  }
  auto g = std::make_shared<GraphImpl>();
  g->ctx = impl_;
  bool native = false;
  try {
    native = impl_->device_call("Context::capture", [&] { return impl_->device->begin_capture(); });
  } catch (...) {
    impl_->mu.unlock();
    throw;
  }
  impl_->capture_graph = std::move(g);
  impl_->capturing = impl_->capture_graph.get();
  impl_->capture_native = native;
}

// Both take the lock once more before looking: a thread that did not open the capture waits for it to
// end (and then finds none open) instead of releasing a lock it does not hold.
Graph Context::end_capture() {
  impl_->mu.lock();
  if (!impl_->capturing) {
    impl_->mu.unlock();
    throw Error(ErrorCode::InvalidArgument, "Context::end_capture: no capture is open on this context");
  }
  impl_->mu.unlock();  // this thread holds it still, from begin_capture
  std::shared_ptr<GraphImpl> g = std::move(impl_->capture_graph);
  impl_->capturing = nullptr;
  try {
    if (impl_->capture_native)
      g->device_graph = impl_->device_call("Context::end_capture", [&] { return impl_->device->end_capture(); });
  } catch (...) {
    impl_->mu.unlock();
    throw;
  }
  impl_->mu.unlock();
  Graph out;
  out.impl_ = std::move(g);
  return out;
}

void Context::abort_capture() {
  impl_->mu.lock();
  const bool open = impl_->capturing != nullptr;
  impl_->mu.unlock();
  if (!open) return;
  impl_->capturing = nullptr;
  impl_->capture_graph.reset();
  if (impl_->capture_native) impl_->device->abort_capture();
  impl_->mu.unlock();
}

Graph Context::capture(const std::function<void()>& body) {
  begin_capture();
  try {
    body();
  } catch (...) {
    abort_capture();
    throw;
  }
  return end_capture();
}

void Graph::replay() {
  if (!impl_) throw Error(ErrorCode::InvalidArgument, "Graph::replay: the graph is empty (default-constructed)");
  ContextImpl& c = *impl_->ctx;
  std::lock_guard<std::recursive_mutex> lock(c.mu);
  if (c.capturing)
    throw Error(ErrorCode::Unsupported, "Graph::replay cannot be captured: a capture is open on its context");
  if (impl_->device_graph) {
    c.device_call("Graph::replay", [&] { c.device->replay(impl_->device_graph); });
    c.last_variant = "graph (" + std::to_string(impl_->calls.size()) + " ops)";
    return;
  }
  Context ctx;
  ctx.impl_ = impl_->ctx;
  for (const auto& call : impl_->calls) ctx.run(call.op, call.inputs, call.outputs, call.attrs);
}

GraphCache::GraphCache(std::vector<int64_t> buckets) : buckets_(std::move(buckets)) {
  if (buckets_.empty()) throw Error(ErrorCode::InvalidArgument, "GraphCache: no buckets given");
  for (size_t i = 0; i < buckets_.size(); ++i)
    if (buckets_[i] < 1 || (i && buckets_[i] <= buckets_[i - 1]))
      throw Error(ErrorCode::InvalidArgument, "GraphCache: bucket " + std::to_string(i) + " is " +
                                                  std::to_string(buckets_[i]) +
                                                  "; the buckets must be positive and ascending");
}

int64_t GraphCache::bucket(int64_t n) const {
  if (n < 1 || n > buckets_.back())
    throw Error(ErrorCode::InvalidArgument, "GraphCache: size " + std::to_string(n) + " is outside the buckets (1 to " +
                                                std::to_string(buckets_.back()) + ")");
  return *std::lower_bound(buckets_.begin(), buckets_.end(), n);
}

Graph& GraphCache::get(int64_t n, const std::function<Graph(int64_t bucket)>& capture) {
  const int64_t b = bucket(n);
  auto it = graphs_.find(b);
  if (it == graphs_.end()) it = graphs_.emplace(b, capture(b)).first;
  return it->second;
}

size_t Graph::ops() const { return impl_ ? impl_->calls.size() : 0; }
bool Graph::native() const { return impl_ && impl_->device_graph != nullptr; }

}  // namespace kf
