// kf-soak: random mixed work on one device for a while (docs/conformance.md, "Soak"). Every op of the
// registry in every dtype the device runs, on the registry's test shapes and on shapes derived from them
// (a size replaced by another that the op's own checks accept: awkward sizes), each call's tensors made and
// released; a sample of the calls (one in --check-every, and every op at least once) is compared with the
// float64 reference within the tolerances of docs/ops.md. At the end, with everything released and the
// device's scratch freed, memory_usage() must be back at its starting value, the validation layer must have
// reported nothing, and no compute pipeline may have been created twice. Exit status: 0 when all holds, 1
// otherwise (2 for bad flags).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "check/conformance.hpp"
#include "core/internal.hpp"
#include "kf/kf.hpp"
#include "ops/registry.hpp"

namespace {

using namespace kf;
using Clock = std::chrono::steady_clock;

struct Options {
  double seconds = 300;
  std::string backend, device, filter;
  bool validation = false;
  int check_every = 20;
  uint64_t seed = 0;
  int64_t max_elements = 1 << 20;
  int verbose = 0;
};

const char* family_name(Family f) {
  switch (f) {
    case Family::Elementwise: return "elementwise";
    case Family::Reduction: return "reduction";
    case Family::Matmul: return "matmul";
    case Family::Normalization: return "normalization";
    case Family::Loss: return "loss";
    case Family::Optimizer: return "optimizer";
    case Family::Attention: return "attention";
  }
  return "?";
}

std::string mib(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return b;
}

int64_t elements(const std::vector<Shape>& shapes) {
  int64_t n = 0;
  for (const auto& s : shapes) n += s.empty() ? 0 : kf::numel(s);
  return n;
}

// A case with one size of its inputs replaced by another, wherever it occurs (so that inputs that must
// agree still do), when the op's checks (OpDef::infer) accept the result; the case itself otherwise.
TestCase derive(const OpDef& op, const TestCase& tc, std::mt19937_64& rng, int64_t max_elements) {
  std::vector<int64_t> sizes;
  for (const auto& s : tc.inputs)
    for (int64_t d : s)
      if (d > 1) sizes.push_back(d);
  if (sizes.empty() || !op.infer) return tc;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int64_t from = sizes[rng() % sizes.size()];
    // Awkward sizes: anything from 1 to about three times the old one, odd numbers and primes included.
    const int64_t to = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(3 * from + 6));
    TestCase d = tc;
    for (auto& s : d.inputs)
      for (auto& x : s)
        if (x == from) x = to;
    d.label += " (" + std::to_string(from) + "->" + std::to_string(to) + ")";
    if (elements(d.inputs) > max_elements) continue;
    try {
      op.infer(op, d.inputs, d.attrs);
      return d;
    } catch (const Error&) {
    }
  }
  return tc;
}

struct Work {
  const OpDef* op;
  std::vector<DType> dtypes;         // those the device runs
  std::vector<const TestCase*> cases;  // the registry's cases within --max-elements (else its smallest)
};

struct Counts {
  uint64_t calls = 0, checked = 0, failed = 0, errors = 0, unsupported = 0, refused = 0, derived = 0;
};

class Soak {
 public:
  Soak(Context& ctx, const Options& o) : ctx_(ctx), o_(o), rng_(o.seed) {}

  // One call of `w` in `dtype` on `tc`: checked against the reference, or run and released.
  void call(const Work& w, DType dtype, const TestCase& tc, bool derived, bool check) {
    const OpDef& op = *w.op;
    ++counts_.calls;
    ++per_family_[family_name(op.family)];
    const std::string what = op.name + " " + to_string(dtype) + " " + tc.label;
    const uint64_t seed = rng_();
    if (check) {
      ++counts_.checked;
      ++checked_ops_[op.name];
      check::CaseOptions co;
      co.check_validation = true;
      const auto values = check::case_inputs(op, tc, dtype, check::Values::uniform, seed);
      const check::CaseResult r = check::run_case(ctx_, op, dtype, tc.inputs, values, tc.attrs, co);
      if (!r.variant.empty()) variants_.insert(r.variant);
      if (r.unsupported) {
        ++counts_.unsupported;
      } else if (!r.pass) {
        // A derived shape that the core refuses is no failure (run_case reports refusals as failures too).
        if (derived && refused(r.message)) {
          ++counts_.refused;
          return;
        }
        ++counts_.failed;
        failure(what + " (seed " + std::to_string(seed) + "): " + r.message);
      }
      if (o_.verbose) std::printf("  checked %s: %s\n", what.c_str(), r.pass ? "ok" : r.unsupported ? "unsupported" : "FAILED");
      return;
    }
    try {
      const auto values = check::case_inputs(op, tc, dtype, check::Values::uniform, seed);
      std::vector<Tensor> in;
      for (size_t k = 0; k < tc.inputs.size(); ++k) {
        if (tc.inputs[k].empty()) {  // an optional input left out
          in.emplace_back();
          continue;
        }
        in.push_back(ctx_.from_host(tc.inputs[k], op.input_dtype(k, dtype, tc.attrs), values[k]));
      }
      std::vector<Tensor> out = ctx_.call(op.name, in, tc.attrs);
      variants_.insert(ctx_.last_variant());
    } catch (const Error& e) {
      if (e.code() == ErrorCode::Unsupported) {
        ++counts_.unsupported;
      } else if (derived && (e.code() == ErrorCode::Shape || e.code() == ErrorCode::InvalidArgument ||
                             e.code() == ErrorCode::DType)) {
        ++counts_.refused;
      } else {
        ++counts_.errors;
        failure(what + ": " + e.what());
      }
    }
  }

  void run(const std::vector<Work>& work, Clock::time_point deadline) {
    // Every op checked once first, in a random dtype on a random case of its own.
    for (const Work& w : work) {
      const TestCase& tc = *w.cases[rng_() % w.cases.size()];
      call(w, w.dtypes[rng_() % w.dtypes.size()], tc, false, true);
    }
    // Then random work until the deadline, one call in check_every checked.
    uint64_t n = 0;
    while (Clock::now() < deadline) {
      const Work& w = work[rng_() % work.size()];
      const DType dtype = w.dtypes[rng_() % w.dtypes.size()];
      const TestCase& base = *w.cases[rng_() % w.cases.size()];
      const bool derive_it = rng_() % 2 == 0;
      TestCase tc = derive_it ? derive(*w.op, base, rng_, o_.max_elements) : base;
      const bool derived = tc.label != base.label;
      counts_.derived += derived;
      call(w, dtype, tc, derived, o_.check_every > 0 && rng_() % static_cast<uint64_t>(o_.check_every) == 0);
      // Every so often the host waits for the device, so that work does not pile up unboundedly.
      if (++n % 64 == 0) synchronize();
    }
    synchronize();
  }

  const Counts& counts() const { return counts_; }
  const std::map<std::string, uint64_t>& per_family() const { return per_family_; }
  const std::set<std::string>& variants() const { return variants_; }
  const std::vector<std::string>& failures() const { return failures_; }
  void failure(const std::string& m) {
    if (failures_.size() < 50) failures_.push_back(m);
  }

 private:
  static bool refused(const std::string& m) {
    return m.rfind("Shape:", 0) == 0 || m.rfind("InvalidArgument:", 0) == 0 || m.rfind("DType:", 0) == 0;
  }
  void synchronize() {
    try {
      ctx_.synchronize();
    } catch (const Error& e) {
      ++counts_.errors;
      failure(std::string("synchronize: ") + e.what());
    }
  }

  Context& ctx_;
  const Options& o_;
  std::mt19937_64 rng_;
  Counts counts_;
  std::map<std::string, uint64_t> per_family_, checked_ops_;
  std::set<std::string> variants_;
  std::vector<std::string> failures_;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"kf-soak: random mixed work over every op family on one device, a sample checked against the "
               "float64 reference; fails on a wrong result, an error, leaked device memory, a validation "
               "message or a pipeline created twice"};
  app.add_option("--seconds", o.seconds, "how long it runs (at least the first pass, which checks every op once)")
      ->check(CLI::PositiveNumber);
  app.add_option("--backend", o.backend, "the backend (vulkan, cuda, cpu); default KF_BACKEND, else the best device");
  app.add_option("--device", o.device, "the device: an index or a name substring (KF_DEVICE)");
  app.add_option("--filter", o.filter, "regular expression selecting op names (searched, as grep)");
  app.add_option("--check-every", o.check_every, "check one call in N against the reference (0: only the first pass)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "the seed of the random work (default: a fresh one, printed)");
  app.add_option("--max-elements", o.max_elements, "the most input elements of a call with a derived shape")
      ->check(CLI::PositiveNumber);
  app.add_flag("--validation", o.validation, "open a Vulkan device with the Khronos validation layer (KF_VALIDATION=1)");
  app.add_flag("-v,--verbose", o.verbose, "print every checked call");
  CLI11_PARSE(app, argc, argv);
  if (o.seed == 0) o.seed = check::fresh_seed();

  ContextOptions co;
  co.backend = o.backend;
  co.device = o.device;
  co.validation = o.validation;
  // Flags given here name the device exactly (Context::create would let the environment override them).
  if (!o.backend.empty()) unsetenv("KF_BACKEND");
  if (!o.device.empty()) unsetenv("KF_DEVICE");
  int status = 0;
  try {
    Context ctx = Context::create(co);
    const MemoryUsage start = ctx.memory_usage();
    std::vector<Work> work;
    std::vector<std::string> not_here;
    const std::regex filter(o.filter);
    for (const OpDef& op : registry()) {
      if (!o.filter.empty() && !std::regex_search(op.name, filter)) continue;
      if (op.tests.empty()) continue;
      Work w{&op, {}, {}};
      const TestCase* smallest = &op.tests[0];
      for (const TestCase& tc : op.tests) {
        if (elements(tc.inputs) <= o.max_elements) w.cases.push_back(&tc);
        if (elements(tc.inputs) < elements(smallest->inputs)) smallest = &tc;
      }
      if (w.cases.empty()) w.cases.push_back(smallest);
      for (DType t : op.dtypes)
        if (ctx.supports(op.name, t)) w.dtypes.push_back(t);
      if (w.dtypes.empty()) not_here.push_back(op.name);
      else work.push_back(w);
    }
    const DeviceInfo& d = ctx.device();
    std::printf("kf-soak: %s %d \"%s\", %.0f s of random work, every op checked once, then one call in %d (seed %llu)\n",
                d.backend.c_str(), d.index, d.name.c_str(), o.seconds, o.check_every,
                static_cast<unsigned long long>(o.seed));
    std::printf("  ops: %zu run here", work.size());
    if (!not_here.empty()) {
      std::printf(" (%zu in no dtype on this device:", not_here.size());
      for (const auto& n : not_here) std::printf(" %s", n.c_str());
      std::printf(")");
    }
    std::printf("\n  memory at start: %s\n", mib(start.current).c_str());
    std::fflush(stdout);
    if (work.empty()) {
      std::printf("kf-soak: FAIL: no op to run\n");
      return 1;
    }

    const auto t0 = Clock::now();
    Soak soak(ctx, o);
    soak.run(work, t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds)));
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();

    const MemoryUsage held = ctx.memory_usage();  // the device's scratch (workspaces, tables) still held
    kf::detail::release_scratch(ctx);
    const MemoryUsage end = ctx.memory_usage();
    const kf::detail::PipelineStats ps = kf::detail::pipeline_stats(ctx);
    const Counts& c = soak.counts();
    std::printf("  ran %.1f s: %llu calls (%llu on derived shapes), %llu checked, %llu failed, %llu errors, "
                "%llu unsupported, %llu derived shapes refused\n",
                took, (unsigned long long)c.calls, (unsigned long long)c.derived, (unsigned long long)c.checked,
                (unsigned long long)c.failed, (unsigned long long)c.errors, (unsigned long long)c.unsupported,
                (unsigned long long)c.refused);
    std::printf("  per family:");
    for (const auto& [f, n] : soak.per_family()) std::printf(" %s %llu", f.c_str(), (unsigned long long)n);
    std::printf("\n  memory: start %s, peak %s, end %s (%s before the device's scratch was freed)\n",
                mib(start.current).c_str(), mib(end.peak).c_str(), mib(end.current).c_str(), mib(held.current).c_str());
    if (ps.created || ps.held)
      std::printf("  pipelines: %llu created, %llu distinct held, for %zu distinct variants reported\n",
                  (unsigned long long)ps.created, (unsigned long long)ps.held, soak.variants().size());
    else
      std::printf("  pipelines: none on this backend; %zu distinct variants reported\n", soak.variants().size());
    const uint64_t vmsg = ctx.validation_messages();
    std::printf("  validation messages: %llu\n", (unsigned long long)vmsg);
    for (const auto& f : soak.failures()) std::printf("  FAILED %s\n", f.c_str());
    std::vector<std::string> why;
    if (c.failed) why.push_back(std::to_string(c.failed) + " wrong result(s)");
    if (c.errors) why.push_back(std::to_string(c.errors) + " error(s)");
    if (end.current != start.current)
      why.push_back("device memory not back at its start value (" + mib(start.current) + " -> " + mib(end.current) + ")");
    if (vmsg) {
      why.push_back(std::to_string(vmsg) + " validation message(s)");
      for (const auto& line : ctx.validation_log()) std::printf("  validation: %s\n", line.c_str());
    }
    if (ps.created != ps.held)
      why.push_back("pipelines created more than once (" + std::to_string(ps.created) + " created for " +
                    std::to_string(ps.held) + " distinct)");
    if (why.empty()) {
      std::printf("kf-soak: PASS\n");
    } else {
      std::printf("kf-soak: FAIL:");
      for (size_t i = 0; i < why.size(); ++i) std::printf("%s %s", i ? "," : "", why[i].c_str());
      std::printf("\n");
      status = 1;
    }
  } catch (const std::exception& e) {
    std::printf("kf-soak: FAIL: %s\n", e.what());
    status = 1;
  }
  return status;
}
