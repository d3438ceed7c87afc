// Stand-alone probe (a copy of ../cm2/probe.cpp, checking on 512 x 512 x 640): does a workgroup-scope cooperative
// matrix product (VK_NV_cooperative_matrix2's workgroup scope, flexible dimensions and tensor addressing) run, and how fast?
// Prints the device's KHR and flexible cooperative-matrix properties, then for each SPIR-V file given
// (named wg<W>_m<BM>_n<BN>_k<BK>.spv) checks C = A W^T on a small shape and times 4096^3 and 8192^3.
#include <vulkan/vulkan.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#define CK(x) do { VkResult r_ = (x); if (r_ != VK_SUCCESS) { std::printf("%s failed: %d\n", #x, r_); return r_; } } while (0)

struct KhrFeatures { VkStructureType sType; void* pNext; VkBool32 coop, robust; };
struct KhrProps { VkStructureType sType; void* pNext; uint32_t M, N, K; int32_t A, B, C, R; VkBool32 sat; int32_t scope; };
struct Cm2Features { VkStructureType sType; void* pNext; VkBool32 wg, flex, red, conv, pe, ta, bl; };
struct Cm2Props { VkStructureType sType; void* pNext; uint32_t maxWg, maxDim, reservedShared; };
struct FlexProps { VkStructureType sType; void* pNext; uint32_t Mg, Ng, Kg; int32_t A, B, C, R; VkBool32 sat; int32_t scope; uint32_t inv; };
typedef VkResult (*PFN_khrProps)(VkPhysicalDevice, uint32_t*, KhrProps*);
typedef VkResult (*PFN_flexProps)(VkPhysicalDevice, uint32_t*, FlexProps*);

static uint16_t f2h(float f) {
  uint32_t x; std::memcpy(&x, &f, 4);
  uint32_t s = (x >> 16) & 0x8000; int e = int((x >> 23) & 0xff) - 127 + 15; uint32_t m = x & 0x7fffff;
  if (e <= 0) return uint16_t(s);
  uint32_t h = s | (uint32_t(e) << 10) | (m >> 13); if ((m >> 12) & 1) h++;  // round half up (probe only)
  return uint16_t(h);
}
static float h2f(uint16_t h) {
  uint32_t s = (h & 0x8000u) << 16, e = (h >> 10) & 31, m = h & 1023;
  uint32_t x = e == 0 ? s : s | ((e - 15 + 127) << 23) | (m << 13); float f; std::memcpy(&f, &x, 4); return f;
}

struct Ctx {
  VkInstance inst; VkPhysicalDevice pd; VkDevice dev; VkQueue q; uint32_t qf; VkCommandPool pool;
  VkPhysicalDeviceMemoryProperties mp; float tsPeriod;
};
struct Buf { VkBuffer b; VkDeviceMemory m; void* map = nullptr; };

static uint32_t memType(Ctx& c, uint32_t bits, VkMemoryPropertyFlags f) {
  for (uint32_t i = 0; i < c.mp.memoryTypeCount; ++i)
    if ((bits & (1u << i)) && (c.mp.memoryTypes[i].propertyFlags & f) == f) return i;
  std::printf("no memory type\n"); std::exit(1);
}
static Buf mkbuf(Ctx& c, VkDeviceSize n, bool host) {
  Buf b; VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO}; bi.size = n;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  vkCreateBuffer(c.dev, &bi, nullptr, &b.b); VkMemoryRequirements r; vkGetBufferMemoryRequirements(c.dev, b.b, &r);
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO}; ai.allocationSize = r.size;
  ai.memoryTypeIndex = memType(c, r.memoryTypeBits, host ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  if (vkAllocateMemory(c.dev, &ai, nullptr, &b.m) != VK_SUCCESS) { std::printf("alloc failed\n"); std::exit(1); }
  vkBindBufferMemory(c.dev, b.b, b.m, 0); if (host) vkMapMemory(c.dev, b.m, 0, n, 0, &b.map); return b;
}
static void freebuf(Ctx& c, Buf& b) { vkDestroyBuffer(c.dev, b.b, nullptr); vkFreeMemory(c.dev, b.m, nullptr); }

static VkCommandBuffer begin(Ctx& c) {
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO}; ai.commandPool = c.pool; ai.commandBufferCount = 1;
  VkCommandBuffer cb; vkAllocateCommandBuffers(c.dev, &ai, &cb);
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO}; vkBeginCommandBuffer(cb, &bi); return cb;
}
static void submit(Ctx& c, VkCommandBuffer cb) {
  vkEndCommandBuffer(cb); VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO}; si.commandBufferCount = 1; si.pCommandBuffers = &cb;
  vkQueueSubmit(c.q, 1, &si, VK_NULL_HANDLE); vkQueueWaitIdle(c.q); vkFreeCommandBuffers(c.dev, c.pool, 1, &cb);
}
static void copy(Ctx& c, Buf& s, Buf& d, VkDeviceSize n) {
  auto cb = begin(c); VkBufferCopy r{0, 0, n}; vkCmdCopyBuffer(cb, s.b, d.b, 1, &r); submit(c, cb);
}

struct Pipe { VkPipeline p = VK_NULL_HANDLE; VkPipelineLayout pl; VkDescriptorSetLayout dsl; VkDescriptorPool dp; VkDescriptorSet ds; };

static bool mkpipe(Ctx& c, const std::vector<uint32_t>& spv, Pipe& P) {
  VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO}; mi.codeSize = spv.size() * 4; mi.pCode = spv.data();
  VkShaderModule sm; if (vkCreateShaderModule(c.dev, &mi, nullptr, &sm) != VK_SUCCESS) return false;
  VkDescriptorSetLayoutBinding bs[3]; for (int i = 0; i < 3; ++i) bs[i] = {uint32_t(i), VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo li{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO}; li.bindingCount = 3; li.pBindings = bs;
  vkCreateDescriptorSetLayout(c.dev, &li, nullptr, &P.dsl);
  VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, 12};
  VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO}; pli.setLayoutCount = 1; pli.pSetLayouts = &P.dsl;
  pli.pushConstantRangeCount = 1; pli.pPushConstantRanges = &pr; vkCreatePipelineLayout(c.dev, &pli, nullptr, &P.pl);
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, nullptr, 0, VK_SHADER_STAGE_COMPUTE_BIT, sm, "main", nullptr};
  ci.layout = P.pl;
  VkResult r = vkCreateComputePipelines(c.dev, VK_NULL_HANDLE, 1, &ci, nullptr, &P.p);
  vkDestroyShaderModule(c.dev, sm, nullptr);
  if (r != VK_SUCCESS) { std::printf("  pipeline creation failed: %d\n", r); return false; }
  VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 3};
  VkDescriptorPoolCreateInfo dpi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO}; dpi.maxSets = 1; dpi.poolSizeCount = 1; dpi.pPoolSizes = &ps;
  dpi.flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT;
  vkCreateDescriptorPool(c.dev, &dpi, nullptr, &P.dp);
  VkDescriptorSetAllocateInfo dai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO}; dai.descriptorPool = P.dp; dai.descriptorSetCount = 1; dai.pSetLayouts = &P.dsl;
  vkAllocateDescriptorSets(c.dev, &dai, &P.ds);
  return true;
}

static void bind(Ctx& c, Pipe& P, Buf* b3) {
  VkDescriptorBufferInfo bi[3]; VkWriteDescriptorSet w[3];
  for (int i = 0; i < 3; ++i) {
    bi[i] = {b3[i].b, 0, VK_WHOLE_SIZE};
    w[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, nullptr, P.ds, uint32_t(i), 0, 1, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, nullptr, &bi[i], nullptr};
  }
  vkUpdateDescriptorSets(c.dev, 3, w, 0, nullptr);
}

// Runs C = A W^T reps times; returns the median ms of the timed ones.
static double run(Ctx& c, Pipe& P, uint32_t M, uint32_t N, uint32_t K, uint32_t BM, uint32_t BN, int reps) {
  VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO}; qi.queryType = VK_QUERY_TYPE_TIMESTAMP; qi.queryCount = 2 * reps;
  VkQueryPool qp; vkCreateQueryPool(c.dev, &qi, nullptr, &qp);
  auto cb = begin(c); vkCmdResetQueryPool(cb, qp, 0, 2 * reps);
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, P.p);
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, P.pl, 0, 1, &P.ds, 0, nullptr);
  uint32_t pc[3] = {M, N, K}; vkCmdPushConstants(cb, P.pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, 12, pc);
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER}; mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT; mb.dstAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT;
  for (int r = 0; r < reps; ++r) {
    vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, qp, 2 * r);
    vkCmdDispatch(cb, N / BN, M / BM, 1);
    vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, qp, 2 * r + 1);
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
  }
  submit(c, cb);
  std::vector<uint64_t> ts(2 * reps);
  vkGetQueryPoolResults(c.dev, qp, 0, 2 * reps, ts.size() * 8, ts.data(), 8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
  vkDestroyQueryPool(c.dev, qp, nullptr);
  std::vector<double> ms; for (int r = 2; r < reps; ++r) ms.push_back((ts[2 * r + 1] - ts[2 * r]) * c.tsPeriod * 1e-6);
  std::sort(ms.begin(), ms.end()); return ms[ms.size() / 2];
}

int main(int argc, char** argv) {
  Ctx c{};
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO}; app.apiVersion = VK_API_VERSION_1_3;
  VkInstanceCreateInfo ii{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO}; ii.pApplicationInfo = &app;
  CK(vkCreateInstance(&ii, nullptr, &c.inst));
  uint32_t n = 0; vkEnumeratePhysicalDevices(c.inst, &n, nullptr); std::vector<VkPhysicalDevice> pds(n); vkEnumeratePhysicalDevices(c.inst, &n, pds.data());
  c.pd = VK_NULL_HANDLE;
  for (auto p : pds) { VkPhysicalDeviceProperties pp; vkGetPhysicalDeviceProperties(p, &pp); std::printf("device: %s\n", pp.deviceName);
    if (pp.vendorID == 0x10de) { c.pd = p; c.tsPeriod = pp.limits.timestampPeriod; } }
  if (!c.pd) { std::printf("no NVIDIA device\n"); return 1; }
  vkGetPhysicalDeviceMemoryProperties(c.pd, &c.mp);
  auto khrProps = (PFN_khrProps)vkGetInstanceProcAddr(c.inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
  auto flexProps = (PFN_flexProps)vkGetInstanceProcAddr(c.inst, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV");
  if (khrProps) { khrProps(c.pd, &n, nullptr); std::vector<KhrProps> v(n); for (auto& x : v) x = {VkStructureType(1000506001)};
    khrProps(c.pd, &n, v.data()); std::printf("KHR shapes (%u):\n", n);
    for (auto& x : v) std::printf("  M%u N%u K%u A%d B%d C%d R%d sat%u scope%d\n", x.M, x.N, x.K, x.A, x.B, x.C, x.R, x.sat, x.scope); }
  if (flexProps) { flexProps(c.pd, &n, nullptr); std::vector<FlexProps> v(n); for (auto& x : v) x = {VkStructureType(1000593001)};
    flexProps(c.pd, &n, v.data()); std::printf("flexible (%u):\n", n);
    for (auto& x : v) std::printf("  Mg%u Ng%u Kg%u A%d B%d C%d R%d sat%u scope%d inv%u\n", x.Mg, x.Ng, x.Kg, x.A, x.B, x.C, x.R, x.sat, x.scope, x.inv); }
  Cm2Props cp{VkStructureType(1000593002)}; VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2}; p2.pNext = &cp;
  vkGetPhysicalDeviceProperties2(c.pd, &p2);
  std::printf("cm2 props: maxWg %u maxDim %u reservedShared %u\n", cp.maxWg, cp.maxDim, cp.reservedShared);

  Cm2Features cf{VkStructureType(1000593000)}; KhrFeatures kf{VkStructureType(1000506000), &cf};
  VkPhysicalDeviceVulkan13Features f13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES, &kf};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, &f13};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, &f12};
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f11};
  vkGetPhysicalDeviceFeatures2(c.pd, &f2);
  std::printf("features: coop %u robust %u | wg %u flex %u red %u conv %u pe %u ta %u bl %u | f16 %u vmm %u\n", kf.coop, kf.robust,
              cf.wg, cf.flex, cf.red, cf.conv, cf.pe, cf.ta, cf.bl, f12.shaderFloat16, f12.vulkanMemoryModel);
  kf.robust = VK_FALSE;
  uint32_t qn = 0; vkGetPhysicalDeviceQueueFamilyProperties(c.pd, &qn, nullptr); std::vector<VkQueueFamilyProperties> qfp(qn);
  vkGetPhysicalDeviceQueueFamilyProperties(c.pd, &qn, qfp.data());
  for (c.qf = 0; c.qf < qn && !(qfp[c.qf].queueFlags & VK_QUEUE_COMPUTE_BIT); ++c.qf) {}
  float prio = 1; VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}; qci.queueFamilyIndex = c.qf; qci.queueCount = 1; qci.pQueuePriorities = &prio;
  const char* exts[] = {"VK_KHR_cooperative_matrix", "VK_NV_cooperative_matrix2"};
  VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &f2}; di.queueCreateInfoCount = 1; di.pQueueCreateInfos = &qci;
  di.enabledExtensionCount = 2; di.ppEnabledExtensionNames = exts;
  CK(vkCreateDevice(c.pd, &di, nullptr, &c.dev));
  vkGetDeviceQueue(c.dev, c.qf, 0, &c.q);
  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO}; pci.queueFamilyIndex = c.qf; vkCreateCommandPool(c.dev, &pci, nullptr, &c.pool);

  const uint32_t MAXD = 8192; const VkDeviceSize bytes = VkDeviceSize(MAXD) * MAXD * 2;
  Buf d[3] = {mkbuf(c, bytes, false), mkbuf(c, bytes, false), mkbuf(c, bytes, false)};
  Buf h = mkbuf(c, bytes, true);
  std::mt19937 rng(7); std::uniform_real_distribution<float> U(-1, 1);
  // Small check shape: M 512, N 512, K 640 (A [M,K], W [N,K]).
  const uint32_t cM = 512, cN = 512, cK = 640;
  std::vector<uint16_t> A(cM * cK), W(cN * cK); for (auto& x : A) x = f2h(U(rng)); for (auto& x : W) x = f2h(U(rng));
  for (int a = 1; a < argc; ++a) {
    std::string f = argv[a]; uint32_t WG, BM, BN, BK;
    if (std::sscanf(f.substr(f.rfind('/') + 1).c_str(), "wg%u_m%u_n%u_k%u", &WG, &BM, &BN, &BK) != 4) continue;
    std::ifstream in(f, std::ios::binary); std::vector<char> raw((std::istreambuf_iterator<char>(in)), {});
    std::vector<uint32_t> spv(raw.size() / 4); std::memcpy(spv.data(), raw.data(), raw.size());
    std::printf("%s:\n", f.c_str()); std::fflush(stdout);
    Pipe P; if (!mkpipe(c, spv, P)) continue;
    bind(c, P, d);
    // correctness
    std::memcpy(h.map, A.data(), A.size() * 2); copy(c, h, d[0], A.size() * 2);
    std::memcpy(h.map, W.data(), W.size() * 2); copy(c, h, d[1], W.size() * 2);
    std::memset(h.map, 0xff, cM * cN * 2); copy(c, h, d[2], cM * cN * 2);
    if (cM % BM == 0 && cN % BN == 0 && cK % BK == 0) {
      run(c, P, cM, cN, cK, BM, BN, 3); copy(c, d[2], h, cM * cN * 2);
      const uint16_t* C = (const uint16_t*)h.map; double maxerr = 0; int bad = 0;
      for (uint32_t i = 0; i < cM; ++i) for (uint32_t j = 0; j < cN; ++j) {
        double s = 0; for (uint32_t k = 0; k < cK; ++k) s += double(h2f(A[i * cK + k])) * h2f(W[j * cK + k]);
        double e = std::fabs(h2f(C[i * cN + j]) - s) / (1 + std::fabs(s)); maxerr = std::max(maxerr, e); if (!(e < 1e-2)) ++bad;
      }
      std::printf("  check %ux%ux%u: max rel err %.3g, %d bad of %u\n", cM, cN, cK, maxerr, bad, cM * cN);
    } else std::printf("  check skipped (shape not a tile multiple)\n");
    for (uint32_t s : {4096u, 8192u}) {
      double ms = run(c, P, s, s, s, BM, BN, 12);
      std::printf("  %u^3: %.3f ms  %.1f TFLOP/s\n", s, ms, 2.0 * s * s * double(s) / ms * 1e-9);
      std::fflush(stdout);
    }
    vkDestroyPipeline(c.dev, P.p, nullptr);
  }
  return 0;
}
