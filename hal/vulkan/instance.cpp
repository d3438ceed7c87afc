// The Vulkan instance (with the Khronos validation layer on request), VkResult mapping, device
// description, and the backend's entry point.
#include <cstring>
#include <mutex>
#include <sstream>

#include "hal/vulkan/coopmat.hpp"
#include "hal/vulkan/device.hpp"
#include "hal/vulkan/vk_common.hpp"

namespace kf::hal::vk {

const char* result_name(VkResult r) {
  switch (r) {
#define KF_CASE(x) case x: return #x;
    KF_CASE(VK_SUCCESS) KF_CASE(VK_NOT_READY) KF_CASE(VK_TIMEOUT) KF_CASE(VK_INCOMPLETE)
    KF_CASE(VK_ERROR_OUT_OF_HOST_MEMORY) KF_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    KF_CASE(VK_ERROR_INITIALIZATION_FAILED) KF_CASE(VK_ERROR_DEVICE_LOST) KF_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    KF_CASE(VK_ERROR_LAYER_NOT_PRESENT) KF_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    KF_CASE(VK_ERROR_FEATURE_NOT_PRESENT) KF_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    KF_CASE(VK_ERROR_TOO_MANY_OBJECTS) KF_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    KF_CASE(VK_ERROR_FRAGMENTED_POOL) KF_CASE(VK_ERROR_OUT_OF_POOL_MEMORY) KF_CASE(VK_ERROR_UNKNOWN)
#undef KF_CASE
    default: return "VkResult(?)";
  }
}

void check(VkResult r, const char* what) {
  if (r == VK_SUCCESS) return;
  const std::string msg = std::string("vulkan: ") + what + " returned " + result_name(r);
  switch (r) {
    case VK_ERROR_DEVICE_LOST: throw Error(ErrorCode::DeviceLost, msg);
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_OUT_OF_POOL_MEMORY: throw Error(ErrorCode::OutOfMemory, msg);
    case VK_TIMEOUT: throw Error(ErrorCode::Timeout, msg);
    case VK_ERROR_FEATURE_NOT_PRESENT:
    case VK_ERROR_EXTENSION_NOT_PRESENT:
    case VK_ERROR_INCOMPATIBLE_DRIVER: throw Error(ErrorCode::Unsupported, msg);
    default: throw Error(ErrorCode::Device, msg);
  }
}

namespace {

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                          VkDebugUtilsMessageTypeFlagsEXT, const VkDebugUtilsMessengerCallbackDataEXT* data,
                                          void* user) {
  if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT)
    static_cast<Instance*>(user)->record(data->pMessage ? data->pMessage : "(no message)");
  return VK_FALSE;
}

// The layer's spec version, 0 when it is not installed.
uint32_t layer_version(const char* name) {
  uint32_t n = 0;
  vkEnumerateInstanceLayerProperties(&n, nullptr);
  std::vector<VkLayerProperties> layers(n);
  vkEnumerateInstanceLayerProperties(&n, layers.data());
  for (auto& l : layers)
    if (std::strcmp(l.layerName, name) == 0) return l.specVersion ? l.specVersion : 1;
  return 0;
}

bool instance_extension_present(const char* name) {
  uint32_t n = 0;
  vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> ext(n);
  vkEnumerateInstanceExtensionProperties(nullptr, &n, ext.data());
  for (auto& e : ext)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

std::string version_string(uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
         std::to_string(VK_API_VERSION_PATCH(v));
}

}  // namespace

std::shared_ptr<Instance> Instance::create(bool validation) {
  static std::once_flag once;
  static VkResult loader = VK_ERROR_INITIALIZATION_FAILED;
  std::call_once(once, [] { loader = volkInitialize(); });
  if (loader != VK_SUCCESS)
    throw Error(ErrorCode::Device, "vulkan: unavailable (no Vulkan loader libvulkan.so.1 found)");
  if (volkGetInstanceVersion() < VK_API_VERSION_1_2)
    throw Error(ErrorCode::Unsupported, "vulkan: the loader is older than Vulkan 1.2");

  // One live instance per process, shared: volk keeps one table of instance functions, and loading it
  // for a second instance (Context::list_devices() while a context is open) left the first with the
  // second's table, whose vkDestroyDebugUtilsMessengerEXT was null when the first was destroyed. A
  // listing (no validation) shares whatever instance is alive.
  static std::mutex mu;
  static std::weak_ptr<Instance> live;
  static bool live_validation = false;
  std::lock_guard<std::mutex> lock(mu);
  if (auto alive = live.lock(); alive && (live_validation == validation || !validation)) return alive;

  auto inst = std::make_shared<Instance>();
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "kf";
  app.pEngineName = "KernelFusion";
  app.apiVersion = VK_API_VERSION_1_3;
  std::vector<const char*> layers, exts;
  const bool debug_utils = instance_extension_present(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  if (validation) {
    inst->validation_layer_ = layer_version("VK_LAYER_KHRONOS_validation");
    if (!inst->validation_layer_)
      throw Error(ErrorCode::Device,
                  "vulkan: validation was asked for (KF_VALIDATION=1) but VK_LAYER_KHRONOS_validation is not "
                  "installed (Debian: vulkan-validationlayers)");
    layers.push_back("VK_LAYER_KHRONOS_validation");
  }
  if (validation && debug_utils) exts.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  VkDebugUtilsMessengerCreateInfoEXT dbg{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  dbg.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  dbg.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                    VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  dbg.pfnUserCallback = on_message;
  dbg.pUserData = inst.get();
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  ci.enabledLayerCount = static_cast<uint32_t>(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = static_cast<uint32_t>(exts.size());
  ci.ppEnabledExtensionNames = exts.data();
  if (validation && debug_utils) ci.pNext = &dbg;  // also catches messages of instance creation
  KF_VK(vkCreateInstance(&ci, nullptr, &inst->instance_));
  // Every function, device-level ones included, through the loader's dispatching entry points: right for
  // every device of the instance, and never rewritten when a device is created (volkLoadDevice would
  // overwrite these process-wide pointers with one device's own while other contexts call through them).
  volkLoadInstance(inst->instance_);
  if (validation && debug_utils)
    KF_VK(vkCreateDebugUtilsMessengerEXT(inst->instance_, &dbg, nullptr, &inst->messenger_));
  live = inst;
  live_validation = validation;
  return inst;
}

Instance::~Instance() {
  if (messenger_) vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

std::vector<VkPhysicalDevice> Instance::physical_devices() const {
  uint32_t n = 0;
  KF_VK(vkEnumeratePhysicalDevices(instance_, &n, nullptr));
  std::vector<VkPhysicalDevice> v(n);
  KF_VK(vkEnumeratePhysicalDevices(instance_, &n, v.data()));
  return v;
}

void Instance::record(const std::string& msg) {
  std::lock_guard<std::mutex> lock(mu_);
  ++count_;
  if (log_.size() < 100) log_.push_back(msg);
}
uint64_t Instance::messages() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}
std::vector<std::string> Instance::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

DeviceInfo describe(VkPhysicalDevice pd, int index) {
  VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceVulkan11Properties p11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES, &drv};
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &p11};
  vkGetPhysicalDeviceProperties2(pd, &props);
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, &f12};
  VkPhysicalDeviceFeatures2 feats{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f11};
  vkGetPhysicalDeviceFeatures2(pd, &feats);
  const auto& p = props.properties;

  DeviceInfo d;
  d.backend = "vulkan";
  d.index = index;
  d.name = p.deviceName;
  switch (p.vendorID) {
    case 0x10DE: d.vendor = "NVIDIA"; break;
    case 0x1002: d.vendor = "AMD"; break;
    case 0x8086: d.vendor = "Intel"; break;
    case 0x10005: d.vendor = "Mesa"; break;
    case 0x13B5: d.vendor = "ARM"; break;
    case 0x5143: d.vendor = "Qualcomm"; break;
    default: {
      std::ostringstream s;
      s << "0x" << std::hex << p.vendorID;
      d.vendor = s.str();
    }
  }
  switch (p.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: d.type = "discrete"; break;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: d.type = "integrated"; break;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: d.type = "virtual"; break;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: d.type = "cpu"; break;
    default: d.type = "other";
  }
  d.driver = std::string(drv.driverName) + " " + drv.driverInfo;
  d.api_version = version_string(p.apiVersion);
  std::memcpy(d.uuid.data(), p11.deviceUUID, 16);

  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> ext(n);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, ext.data());
  auto has = [&](const char* name) {
    for (auto& e : ext)
      if (std::strcmp(e.extensionName, name) == 0) return true;
    return false;
  };

  Caps& c = d.caps;
  c.storage16 = f11.storageBuffer16BitAccess;
  c.float16_arith = f12.shaderFloat16;
  c.bfloat16 = has("VK_KHR_shader_bfloat16");
  c.float64 = feats.features.shaderFloat64;
  c.int8 = f12.shaderInt8 && f12.storageBuffer8BitAccess;
  c.int_dot = has("VK_KHR_shader_integer_dot_product") || p.apiVersion >= VK_API_VERSION_1_3;
  c.subgroup_arith = (p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                     (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                     (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT);
  c.subgroup_size = p11.subgroupSize;
  c.subgroup_shuffle = (p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                       (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
  c.coopmat_nv = has("VK_NV_cooperative_matrix");
  c.coopmat_khr = has("VK_KHR_cooperative_matrix");
  if (c.coopmat_khr) c.coopmat_khr_shapes = query_coopmat_khr(pd);
  c.timestamp_period_ns = p.limits.timestampPeriod;
  c.max_shared_bytes = p.limits.maxComputeSharedMemorySize;
  c.max_workgroup_size = p.limits.maxComputeWorkGroupInvocations;
  c.max_workgroup_count = p.limits.maxComputeWorkGroupCount[0];
  c.max_storage_range = p.limits.maxStorageBufferRange;
  c.storage_offset_alignment =
      static_cast<uint32_t>(std::max<VkDeviceSize>(16, p.limits.minStorageBufferOffsetAlignment));
  c.max_allocation = p11.maxMemoryAllocationSize;
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i)
    c.heaps.push_back({mem.memoryHeaps[i].size, (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0});
  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf.data());
  for (auto& q : qf)
    if ((q.queueFlags & VK_QUEUE_COMPUTE_BIT) && q.timestampValidBits > 0) c.timestamps = true;
  return d;
}

namespace {

class VulkanBackend final : public Backend {
 public:
  std::string name() const override { return "vulkan"; }

  std::vector<DeviceEntry> enumerate(const ContextOptions& o) override {
    std::vector<DeviceEntry> out;
    std::shared_ptr<Instance> inst;
    try {
      inst = Instance::create(false);
    } catch (const Error& e) {
      DeviceEntry none;
      none.info.backend = "vulkan";
      none.info.name = "(no Vulkan)";
      none.usable = false;
      none.why_not = e.what();
      out.push_back(none);
      return out;
    }
    (void)o;
    int index = 0;
    for (VkPhysicalDevice pd : inst->physical_devices()) {
      DeviceEntry e;
      e.info = describe(pd, index++);
      VkPhysicalDeviceProperties p;
      vkGetPhysicalDeviceProperties(pd, &p);
      if (p.apiVersion < VK_API_VERSION_1_2) {
        e.usable = false;
        e.why_not = "Vulkan " + e.info.api_version + " < 1.2";
      }
      out.push_back(e);
    }
    return out;
  }

  std::unique_ptr<Device> open(int index, const DeviceOptions& o) override {
    auto inst = Instance::create(o.validation);
    auto pds = inst->physical_devices();
    if (index < 0 || index >= static_cast<int>(pds.size()))
      throw Error(ErrorCode::Device, "vulkan: no device with index " + std::to_string(index));
    return std::make_unique<VulkanDevice>(inst, pds[index], index, o);
  }
};

}  // namespace
}  // namespace kf::hal::vk

namespace kf::hal {
std::unique_ptr<Backend> make_vulkan_backend() { return std::make_unique<vk::VulkanBackend>(); }
}  // namespace kf::hal
