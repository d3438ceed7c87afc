// Run-time shader compilation with shaderc (see runtime_shader.hpp). Debian's static shaderc, glslang and
// SPIRV-Tools libraries are linked into libkf (CMakeLists.txt: KF_HAVE_SHADERC); the embedded sources
// resolve the shaders' #include "x.glsl" lines.
#include "hal/vulkan/runtime_shader.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "hal/vulkan/spirv_khr.hpp"
#include "kf/error.hpp"

#if defined(KF_HAVE_SHADERC)
#include <shaderc/shaderc.h>
#include <spirv-tools/optimizer.hpp>
#endif

namespace kf::hal::vk {

namespace {

const ShaderSource* find_source(const std::string& name) {
  for (size_t k = 0; k < kShaderSourcesSize; ++k)
    if (name == kShaderSources[k].name) return &kShaderSources[k];
  return nullptr;
}

#if defined(KF_HAVE_SHADERC)
// #include "x.glsl" from the embedded sources; an unknown name is reported through the result.
shaderc_include_result* resolve_include(void*, const char* requested, int, const char*, size_t) {
  auto* r = new shaderc_include_result{};
  const ShaderSource* src = find_source(requested);
  static const char kMissing[] = "not among kf's embedded shader sources";
  r->source_name = src ? src->name : "";
  r->source_name_length = src ? std::strlen(src->name) : 0;
  r->content = src ? src->text : kMissing;
  r->content_length = src ? std::strlen(src->text) : sizeof(kMissing) - 1;
  return r;
}
void release_include(void*, shaderc_include_result* r) { delete r; }
#endif

}  // namespace

Defines parse_defines(const std::string& list) {
  Defines out;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string d = list.substr(begin, end - begin);
    if (!d.empty()) {
      const size_t eq = d.find('=');
      out.emplace_back(d.substr(0, eq), eq == std::string::npos ? "" : d.substr(eq + 1));
    }
    begin = end + 1;
  }
  return out;
}

namespace {

// shaderc's compilation, optimized (glslc -O) or not.
std::vector<uint32_t> shaderc_compile(const ShaderSource* src, const Defines& defines, const std::string& what,
                                      bool optimize) {
#if !defined(KF_HAVE_SHADERC)
  (void)src, (void)defines, (void)optimize;
  throw Error(ErrorCode::Unsupported, what + " compiles its kernel at run time, and this build of kf has no shader "
                                             "compiler (it was configured without Debian's libshaderc-dev, glslang-dev, spirv-tools)");
#else
  // One compiler for the process, used by one thread at a time (compilations are rare: callers cache).
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  static shaderc_compiler_t compiler = shaderc_compiler_initialize();
  if (!compiler) throw Error(ErrorCode::Internal, what + ": shaderc_compiler_initialize failed");
  shaderc_compile_options_t opts = shaderc_compile_options_initialize();
  for (const auto& [name, value] : defines)
    shaderc_compile_options_add_macro_definition(opts, name.data(), name.size(), value.empty() ? nullptr : value.data(),
                                                 value.size());
  shaderc_compile_options_set_optimization_level(
      opts, optimize ? shaderc_optimization_level_performance : shaderc_optimization_level_zero);
  shaderc_compile_options_set_target_env(opts, shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_2);
  shaderc_compile_options_set_include_callbacks(opts, resolve_include, release_include, nullptr);
  shaderc_compilation_result_t res = shaderc_compile_into_spv(compiler, src->text, std::strlen(src->text),
                                                              shaderc_glsl_compute_shader, src->name, "main", opts);
  shaderc_compile_options_release(opts);
  const bool ok = res && shaderc_result_get_compilation_status(res) == shaderc_compilation_status_success;
  std::vector<uint32_t> words;
  const std::string msg = res ? shaderc_result_get_error_message(res) : "no result";
  if (ok) {
    words.resize(shaderc_result_get_length(res) / 4);
    std::memcpy(words.data(), shaderc_result_get_bytes(res), words.size() * 4);
  }
  if (res) shaderc_result_release(res);
  if (!ok) throw Error(ErrorCode::Internal, what + ": the run-time compilation of " + src->name + " failed: " + msg);
  return words;
#endif
}

#if defined(KF_HAVE_SHADERC)
// glslc -O's passes (SPIRV-Tools' performance passes) without the validator, which rejects the
// KF_COOPMAT_NV_AS_KHR form: its products' matrices have different scopes (the use markers).
std::vector<uint32_t> optimize_unvalidated(const std::vector<uint32_t>& words, const std::string& what) {
  spvtools::Optimizer opt(SPV_ENV_VULKAN_1_2);
  std::string msg;
  opt.SetMessageConsumer([&](spv_message_level_t level, const char*, const spv_position_t&, const char* m) {
    if (level <= SPV_MSG_ERROR) msg += std::string(m) + "\n";
  });
  opt.RegisterPerformancePasses();
  spvtools::OptimizerOptions o;
  o.set_run_validator(false);
  std::vector<uint32_t> out;
  if (!opt.Run(words.data(), words.size(), &out, o))
    throw Error(ErrorCode::Internal, what + ": SPIRV-Tools could not optimize its run-time kernel: " + msg);
  return out;
}
#endif

}  // namespace

std::vector<uint32_t> compile_shader(const std::string& source, const Defines& defines, const std::string& what) {
  const ShaderSource* src = find_source(source);
  if (!src) throw Error(ErrorCode::Internal, what + ": no embedded shader source " + source);
  bool khr = false;
  Defines nv_as_khr = defines;
  for (auto& d : nv_as_khr)
    if (d.first == "KF_COOPMAT_KHR") d.first = "KF_COOPMAT_NV_AS_KHR", khr = true;
  if (!khr) return shaderc_compile(src, defines, what, true);
  // A KHR variant (runtime_shader.hpp): the NV-as-KHR form, optimized as the build optimizes the KHR
  // variants (spirv-opt -O), then rewritten to SPV_KHR_cooperative_matrix.
  std::vector<uint32_t> words = shaderc_compile(src, nv_as_khr, what, false);
#if defined(KF_HAVE_SHADERC)
  words = optimize_unvalidated(words, what);
#endif
  return rewrite_coopmat_nv_to_khr(words, what);
}

}  // namespace kf::hal::vk
