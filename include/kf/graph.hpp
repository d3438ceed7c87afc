// Captured graphs (docs/architecture.md, "Graphs"): op calls recorded once by Context::capture and run
// again by Graph::replay, with new values written into the captured tensors between replays. Small ops
// are bound by the host's cost per call; a replay pays it once for the whole sequence.
#pragma once
#include <cstddef>
#include <memory>

namespace kf {

struct GraphImpl;

class Graph {
 public:
  Graph() = default;  // no calls: replay() throws
  // Runs the captured calls again, in order, after everything recorded on the context before; like an
  // op it returns once the work is recorded (Context::synchronize waits for it). The results land in
  // the tensors the calls wrote when they were captured (the graph holds those tensors alive).
  void replay();
  size_t ops() const;   // op calls captured
  // Whether the device replays the calls as one unit (a Vulkan command buffer submitted once, a CUDA
  // graph launched once) rather than the core running them one by one (the CPU backend).
  bool native() const;
  bool defined() const { return impl_ != nullptr; }

 private:
  friend class Context;
  std::shared_ptr<GraphImpl> impl_;
};

}  // namespace kf
