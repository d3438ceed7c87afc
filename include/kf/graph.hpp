// Captured graphs (docs/architecture.md, "Graphs"): op calls recorded once by Context::capture and run
// again by Graph::replay, with new values written into the captured tensors between replays. Small ops
// are bound by the host's cost per call; a replay pays it once for the whole sequence.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

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

// Shape buckets: graphs kept per bucket of a size that changes from call to call (a sequence length, a
// batch), so that a few captures serve every size. The caller captures each bucket's graph on tensors
// padded to the bucket and makes the padding exact with the ops' own masks (attention's key_lengths, a
// loss's ignore_index, ...): the bucketed call then returns what the unpadded call would (tests/test_graph.cpp).
class GraphCache {
 public:
  // The bucket sizes, ascending and positive (kf::Error InvalidArgument otherwise).
  explicit GraphCache(std::vector<int64_t> buckets);
  // The smallest bucket >= n; InvalidArgument when n is not positive or exceeds the largest bucket.
  int64_t bucket(int64_t n) const;
  // The graph of n's bucket: `capture(bucket)` makes it the first time that bucket is asked for.
  Graph& get(int64_t n, const std::function<Graph(int64_t bucket)>& capture);
  size_t size() const { return graphs_.size(); }  // buckets captured so far

 private:
  std::vector<int64_t> buckets_;
  std::map<int64_t, Graph> graphs_;
};

}  // namespace kf
