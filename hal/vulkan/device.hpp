// The Vulkan device: queue, buffers, pipelines (created once, cached on disk), the command stream
// that records many dispatches between barriers and submits them together, and timestamps.
#pragma once
#include <algorithm>
#include <array>
#include <mutex>
#include <initializer_list>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hal/vulkan/coopmat.hpp"
#include "hal/vulkan/runtime_shader.hpp"
#include "hal/vulkan/vk_common.hpp"
#include "plan/attention.hpp"

namespace kf::hal::vk {

class VulkanDevice;
struct VkGraph;

// Whether the device exports storage buffers' memory as opaque fds (VK_KHR_external_memory_fd,
// vkGetPhysicalDeviceExternalBufferProperties): "" when it does, else what is missing (external.cpp).
std::string export_support(VkPhysicalDevice pd);
// The same for timeline semaphores (VK_KHR_external_semaphore_fd, opaque fds).
std::string timeline_export_support(VkPhysicalDevice pd);
struct KernelFamily;  // families.hpp

class VkBuf final : public Buffer {
 public:
  VkBuf(VulkanDevice& dev, size_t bytes);
  // A view: `bytes` of `parent` from byte `offset` (a VkBuffer of its own bound to the parent's memory),
  // so that a kernel sees part of a tensor as a whole one (linear_cross_entropy's row chunks). It keeps
  // the parent alive and owns no memory. Throws kf::Error when the offset breaks the device's alignment.
  VkBuf(VulkanDevice& dev, std::shared_ptr<Buffer> parent, size_t offset, size_t bytes);
  // Exportable memory (external.cpp): a dedicated allocation that VulkanDevice::export_memory hands out.
  struct Exportable {};
  VkBuf(VulkanDevice& dev, size_t bytes, Exportable);
  ~VkBuf() override;
  VkBuffer handle() const { return buffer_; }
  void* mapped() const { return alloc_.mapped; }
  bool exportable() const { return exportable_; }
  const Allocation& allocation() const { return alloc_; }

 private:
  bool exportable_ = false;
  VulkanDevice& dev_;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  Allocation alloc_;
  std::shared_ptr<Buffer> parent_;  // set for a view
};

constexpr uint32_t kBindings = 7;  // storage buffers of the one descriptor-set layout all kernels share

// Specialization constants (ids 0..n-1) in a fixed array, so that recording a launch allocates nothing.
struct SpecList {
  static constexpr uint32_t kMax = 24;
  uint32_t v[kMax] = {};
  uint32_t n = 0;
  SpecList() = default;
  SpecList(std::initializer_list<uint32_t> il) { assign(il.begin(), il.end()); }
  SpecList(const std::vector<uint32_t>& s) { assign(s.begin(), s.end()); }  // NOLINT: converts implicitly
  operator std::vector<uint32_t>() const { return {v, v + n}; }
  template <class It>
  void assign(It b, It e) {
    n = 0;
    for (; b != e; ++b) push_back(*b);
  }
  void push_back(uint32_t x) {
    if (n >= kMax) throw Error(ErrorCode::Internal, "vulkan: more than 24 specialization constants");
    v[n++] = x;
  }
  void insert(const uint32_t* at, std::initializer_list<uint32_t> il) {  // at the end only
    (void)at;
    for (uint32_t x : il) push_back(x);
  }
  void resize(size_t m, uint32_t x = 0) {
    while (n > m) v[--n] = 0;
    while (n < m) push_back(x);
  }
  size_t size() const { return n; }
  const uint32_t* data() const { return v; }
  const uint32_t* begin() const { return v; }
  const uint32_t* end() const { return v + n; }
  uint32_t& operator[](size_t i) { return v[i]; }
  uint32_t operator[](size_t i) const { return v[i]; }
};

// One recorded kernel launch: a shader variant (by name, or by the identifier VulkanDevice::variant_id
// gave it, which spares hashing the name), its specialization constants, up to kBindings storage
// buffers, push constants and the workgroup grid.
struct Launch {
  std::string variant;
  int32_t variant_id = -1;
  SpecList spec;
  std::shared_ptr<Buffer> bindings[kBindings];
  // Where each binding starts in its buffer (TensorArg::offset): 0 but for the parts of a call the core
  // split (src/core/split.cpp). record() binds such a binding without the descriptor-set cache.
  uint64_t offsets[kBindings] = {};
  void bind(uint32_t i, const TensorArg& a) {
    bindings[i] = a.buffer;
    offsets[i] = a.offset;
  }
  const void* push = nullptr;
  uint32_t push_bytes = 0;
  uint32_t groups = 1;
  uint32_t groups_y = 1, groups_z = 1;
};

// The launch parameters that kf-bench sweeps (KF_TUNE="eltwise_items=4,max_groups=8192") are kf::Tuning
// (core/options.hpp: the options table, parsed by the core).

class VulkanDevice final : public Device {
 public:
  VulkanDevice(std::shared_ptr<Instance> instance, VkPhysicalDevice pd, int index, const DeviceOptions& o);
  ~VulkanDevice() override;

  const DeviceInfo& info() const override { return info_; }
  std::shared_ptr<Buffer> allocate(size_t bytes) override;
  void upload(Buffer& dst, const void* src, size_t bytes) override;
  void download(Buffer& src, void* dst, size_t bytes) override;
  void fill_bytes(Buffer& dst, uint8_t pattern, size_t bytes) override;
  bool supports(const OpCall& call, std::string* why) const override;  // through the family table (families.cpp)
  Variant dispatch(const OpCall& call) override;
  void synchronize() override;
  // Capture (graph.cpp): dispatches recorded into a command buffer of their own, submitted once per replay.
  bool begin_capture() override;
  std::shared_ptr<hal::Graph> end_capture() override;
  void abort_capture() override;
  void replay(const std::shared_ptr<hal::Graph>& graph) override;
  uint32_t timestamp() override;
  double elapsed_ms(uint32_t begin, uint32_t end) override;
  void reset_timestamps() override;
  MemoryUsage memory_usage() const override { return allocator_->usage(); }
  void reset_peak_memory() override { allocator_->reset_peak(); }
  uint64_t validation_messages() const override { return instance_->messages(); }
  std::vector<std::string> validation_log() const override { return instance_->log(); }
  double record_matrix_peak(std::string* what) override;
  // Exportable memory (external.cpp): VK_KHR_external_memory_fd's opaque fds, where the device has them.
  bool exportable(std::string* why) const override;
  std::shared_ptr<Buffer> allocate_exportable(size_t bytes) override;
  ExportedMemory export_memory(Buffer& buffer) override;
  // Timeline semaphores another API imports (external.cpp): waits and a signal ride on the next submission.
  bool timeline_exportable(std::string* why) const override;
  std::shared_ptr<void> export_timeline(int* fd) override;
  void timeline_wait(void* timeline, uint64_t value) override;
  void timeline_signal(void* timeline, uint64_t value) override;
  bool record_long_kernel(uint64_t iterations) override;
  PipelineStats pipeline_stats() const override { return {pipelines_created_, pipelines_.size()}; }
  void release_scratch() override;

  // For the kernel families.
  bool has_variant(const std::string& name) const;
  // A small integer for a variant name, the same for the device's life: pipelines are looked up by it
  // and the specialization constants, without building or hashing strings per dispatch.
  uint32_t variant_id(const std::string& name);
  // A per-op cache of such identifiers for the hot paths (-1 until set): [op][dtype][subgroup].
  int32_t& variant_slot(OpId id, DType t, bool subgroup) {
    return variant_slots_[static_cast<int>(id)][static_cast<int>(t)][subgroup ? 1 : 0];
  }
  void record(const Launch& launch);
  // Records a copy of `bytes` from src to dst (at the given byte offsets), ordered after everything
  // recorded before it.
  void record_copy(const std::shared_ptr<Buffer>& src, const std::shared_ptr<Buffer>& dst, size_t bytes,
                   size_t src_offset = 0, size_t dst_offset = 0);
  // Records filling `bytes` (a multiple of 4) of dst from byte `offset` with `word`, ordered after
  // everything recorded before it.
  void record_fill(const std::shared_ptr<Buffer>& dst, uint32_t word, size_t bytes, size_t offset = 0);
  // Scratch device memory of at least `bytes`, shared by all ops; an op that needs
  // several scratch buffers at once takes them from different slots: 0 the general workspace, 1 and 2
  // converted operands (bf16 attention's K and V, bf16 products' A and B, the convolutions' im2col), 3
  // small per-call tables (bf16 products' factors), 4 to 6 linear_cross_entropy's W converted once per
  // call (rows scaled, columns scaled) and their factors.
  std::shared_ptr<Buffer> workspace(size_t bytes, int slot = 0);

  // An embedded variant compiled again at run time with more macro definitions (runtime_shader.hpp: a
  // custom score function, an output dtype): returns its name for Launch::variant, `base` + "#" + `key`;
  // compiled the first time the name is asked for, with the definitions `extra` then returns (so that a
  // repeated call neither parses nor prints anything), and kept for the device's life. Throws (writing
  // nothing) when it cannot.
  std::string runtime_variant(const std::string& base, const std::string& key, const std::string& what,
                              const std::function<Defines()>& extra);

  VkDevice device() const { return device_; }
  const Tuning& tuning() const { return tuning_; }
  bool coopmat_f16() const { return coopmat_f16_; }  // NV cooperative matrix 16x16x16 f16 -> f32 enabled
  // The matrix products' tensor-core kernels (linear, matmul, the convolutions, linear_cross_entropy): NV,
  // KHR at a fragment shape, or none and why (KF_TUNE coopmat, coopmat_shape; coopmat.hpp).
  const CoopmatChoice& coopmat_mm() const { return coopmat_mm_; }
  // Attention's and its backward's (KF_TUNE attn_coopmat): KHR runs their generic forms at 16x16x16 only.
  const CoopmatChoice& coopmat_attn() const { return coopmat_attn_; }
  // bf16 products: native bf16 cooperative matrices (VK_KHR_shader_bfloat16) or scaled f16, and why
  // (KF_TUNE bf16_coopmat; coopmat.hpp).
  const Bf16Choice& coopmat_bf16() const { return coopmat_bf16_; }
  Allocator& allocator() { return *allocator_; }
  const DeviceOptions& options() const { return options_; }

  // State the kernel families keep per device.
  // supports() of the elementwise and row ops per op and dtype (eltwise.cpp): -1 not asked yet.
  int8_t& simple_supported(OpId id, DType t) const {
    return simple_supported_[static_cast<int>(id)][static_cast<int>(t)];
  }
  int64_t& quad_layout_cache(bool khr) { return quad_layout_[khr ? 1 : 0]; }  // coopmat_quad_layout() (attention.cpp)
  struct RopeCache {  // attention's rotary cos/sin table and the positions it holds (attention.cpp: rope_table)
    std::shared_ptr<Buffer> table;
    plan::RopeTable span;
  };
  RopeCache& rope_cache() { return rope_; }

 private:
  void begin();            // starts recording if not already
  void barrier();          // orders the next command after everything recorded before it
  void submit_and_wait();  // submits the open batch and waits (bounded) for every submitted one
  void finish_pending();   // waits (bounded) for every submitted batch, oldest first
  VkPipeline pipeline(uint32_t variant, const SpecList& spec);
  void copy_through_staging(VkBuffer buf, void* host, size_t bytes, bool to_device);
  std::string cache_path() const;

  std::shared_ptr<Instance> instance_;
  VkPhysicalDevice pd_;
  DeviceInfo info_;
  DeviceOptions options_;
  Tuning tuning_;
  uint64_t max_range_ = 0;  // maxStorageBufferRange: what one binding may cover
  void print_pipeline_stats(VkPipeline p, const std::string& key);  // KF_PIPELINE_STATS
  bool pipeline_stats_ = false;
  bool coopmat_f16_ = false;  // NV cooperative matrix 16x16x16 f16 -> f32 enabled on this device
  CoopmatChoice coopmat_mm_, coopmat_attn_;
  Bf16Choice coopmat_bf16_;
  bool khr_require_subgroup_ = false;  // KHR kernels' pipelines require their size (khr_variant_subgroup)
  int64_t quad_layout_[2] = {-2, -2};  // coopmat_quad_layout(), NV and KHR: -2 not known yet
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t family_ = 0;
  std::unique_ptr<CudaContextHold> cuda_hold_;  // NVIDIA: see cuda_context.cpp
  std::string export_why_;  // why the device exports no memory; empty when it does (external.cpp)
  std::string timeline_why_;  // the same for timeline semaphores
  // Semaphore operations for the next submission (external.cpp: submit), and exported semaphores no longer
  // used, destroyed once no submitted batch can name them (finish_pending).
  std::vector<VkSemaphore> wait_sems_;
  std::vector<uint64_t> wait_values_;
  VkSemaphore signal_sem_ = VK_NULL_HANDLE;
  uint64_t signal_value_ = 0;
  std::mutex retired_mu_;
  std::vector<VkSemaphore> retired_sems_;
  void destroy_retired();
  // vkQueueSubmit of one batch with the pending semaphore operations (then cleared).
  void submit(VkSubmitInfo& si, VkFence fence);
  std::unique_ptr<Allocator> allocator_;

  // The command stream is a ring of batches: when the open batch is full it is submitted and recording
  // goes on into the next one, so a long chain of small ops keeps the device busy while the host records
  // (waiting for a full batch before recording more cost about 1 us per op on an H100). A batch is
  // reused only after its fence signals.
  struct Batch {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    VkDescriptorPool pool = VK_NULL_HANDLE;  // its dispatches' descriptor sets
    std::vector<std::shared_ptr<Buffer>> retained;  // buffers its commands use
    bool pending = false;  // submitted and not yet seen to finish (also after a wait that timed out)
    uint32_t commands = 0;
    std::vector<std::shared_ptr<hal::Graph>> graphs;  // captured graphs submitted after its commands
  };
  friend struct VkGraph;
  std::shared_ptr<VkGraph> capture_;  // the open capture (graph.cpp); commands go to its command buffer
  // Throws Unsupported while a capture is open: `what` waits for the device.
  void not_capturing(const char* what) const;
  std::vector<std::shared_ptr<Buffer>>& retained();  // the open batch's or the capture's
  VkDescriptorPool descriptor_pool();                // likewise

 public:
  // Descriptor sets are kept per combination of buffers (descriptors.cpp): a chain of small ops binds the
  // same few combinations again and again, and writing a set cost more host time than the rest of a
  // dispatch's recording. A buffer's sets are freed when the buffer is destroyed (VkBuf's destructor,
  // on any thread); by then no pending command uses them (batches and graphs hold their buffers).
  void forget_buffer(VkBuffer b);

 private:
  using SetKey = std::array<VkBuffer, kBindings>;
  struct SetKeyHash {
    size_t operator()(const SetKey& k) const {
      uint64_t h = 1469598103934665603ull;
      for (VkBuffer b : k) h = (h ^ reinterpret_cast<uint64_t>(b)) * 1099511628211ull;
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  VkDescriptorSet cached_set(const SetKey& key, const VkWriteDescriptorSet* writes);  // null: none free
  std::mutex set_mu_;  // the cache and its pool (VkBuf's destructor runs on any thread)
  VkDescriptorPool set_pool_ = VK_NULL_HANDLE;
  std::unordered_map<SetKey, VkDescriptorSet, SetKeyHash> sets_;
  std::unordered_map<VkBuffer, std::vector<SetKey>> sets_of_;  // the keys naming each buffer
  static constexpr uint32_t kCachedSets = 4096;
  void flush();                // ends and submits the open batch without waiting; the ring moves on
  void wait_batch(Batch& b);   // waits (bounded) for one submitted batch, then recycles it
  VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
  std::array<Batch, 3> batches_;
  uint32_t open_ = 0;           // the batch recording goes into
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;  // batches_[open_].cmd while recording
  bool recording_ = false;
  bool after_submitted_ = false;  // the open batch follows a batch that may still run: order after it
  uint32_t commands_ = 0;  // commands recorded in the open batch
  VkPipeline bound_ = VK_NULL_HANDLE;  // the pipeline bound in the open batch (binding it again is skipped)
  // The descriptor set and push constants of the open batch's last dispatch: all pipelines share one layout,
  // so both stay in effect across dispatches and pipeline binds, and setting them again is skipped.
  VkDescriptorSet bound_set_ = VK_NULL_HANDLE;
  uint32_t pushed_bytes_ = 0;
  alignas(8) unsigned char pushed_[128];
  void forget_bound() {
    bound_ = VK_NULL_HANDLE;
    bound_set_ = VK_NULL_HANDLE;
    pushed_bytes_ = 0;
  }

  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout pipe_layout_ = VK_NULL_HANDLE;
  VkPipelineCache pipe_cache_ = VK_NULL_HANDLE;
  std::unordered_map<std::string, VkShaderModule> modules_;
  struct PipeKey {
    uint32_t variant;
    SpecList spec;
    bool operator==(const PipeKey& o) const {
      return variant == o.variant && spec.n == o.spec.n && std::equal(spec.begin(), spec.end(), o.spec.begin());
    }
  };
  struct PipeKeyHash {
    size_t operator()(const PipeKey& k) const {
      uint64_t h = 1469598103934665603ull ^ k.variant;
      for (uint32_t x : k.spec) h = (h ^ x) * 1099511628211ull;
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  std::unordered_map<PipeKey, VkPipeline, PipeKeyHash> pipelines_;
  uint64_t pipelines_created_ = 0;  // vkCreateComputePipelines calls (pipeline_stats)
  std::unordered_map<std::string, uint32_t> variant_ids_;
  std::vector<std::string> variant_names_;
  int32_t variant_slots_[kOpCount][5][2];
  mutable int8_t simple_supported_[kOpCount][5];  // simple_supported()
  mutable const KernelFamily* families_[kOpCount] = {};  // families.cpp's table, filled per op on first use
  std::unordered_map<std::string, std::vector<uint32_t>> runtime_spirv_;  // runtime_variant

  VkQueryPool queries_ = VK_NULL_HANDLE;
  uint32_t next_query_ = 0;
  bool queries_reset_ = false;
  uint64_t timestamp_mask_ = ~0ull;

  std::array<std::shared_ptr<Buffer>, 7> workspace_;  // workspace(): scratch of the multi-pass kernels
  RopeCache rope_;
  VkBuffer staging_ = VK_NULL_HANDLE;
  Allocation staging_mem_;

  static constexpr double kCloseWait_s = 10;  // the least that closing waits for running work
  static constexpr uint32_t kMaxQueries = 8192;
  static constexpr uint32_t kMaxBatch = 1024;  // dispatches per submission (descriptor pool size)
  static constexpr size_t kStagingBytes = 64ull << 20;
};

}  // namespace kf::hal::vk
