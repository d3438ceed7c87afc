// Captured graphs (include/kf/graph.hpp): a replay gives the bits the eager calls give, sees new input
// values, keeps its tensors alive, and a call that needs the host during a capture is refused with the
// context left usable. Runs on every device (the CPU backend replays call by call).
#include <map>

#include "common.hpp"

namespace kf::test {
namespace {

class Graphs : public ::testing::TestWithParam<DeviceRef> {};

Tensor random_tensor(Context& ctx, const Shape& s, double range, std::mt19937_64& rng) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return ctx.from_host(s, DType::f32, uniform(static_cast<size_t>(n), range, rng));
}

// A small model step: h = relu(x + b0); y = linear(h, w) ; z = softmax(y) ; n = rms_norm(z + x2).
struct Step {
  Tensor x, b0, w, x2, g;  // inputs
  Tensor h, y, z, s, n;    // outputs, allocated before the calls
  Step(Context& ctx, std::mt19937_64& rng) {
    x = random_tensor(ctx, {37, 64}, 2, rng);
    b0 = random_tensor(ctx, {37, 64}, 1, rng);
    w = random_tensor(ctx, {48, 64}, 0.5, rng);
    x2 = random_tensor(ctx, {37, 48}, 1, rng);
    g = random_tensor(ctx, {48}, 1, rng);
    h = ctx.empty({37, 64}, DType::f32);
    y = ctx.empty({37, 48}, DType::f32);
    z = ctx.empty({37, 48}, DType::f32);
    s = ctx.empty({37, 48}, DType::f32);
    n = ctx.empty({37, 48}, DType::f32);
  }
  void run(Context& ctx) const {
    ctx.run("add_relu", {x, b0}, {h});
    ctx.run("linear", {h, w}, {y});
    ctx.run("softmax", {y}, {z});
    ctx.run("add", {z, x2}, {s});
    ctx.run("rms_norm", {s, g}, {n});
  }
  std::vector<std::vector<uint8_t>> results() const { return {raw_bytes(h), raw_bytes(y), raw_bytes(z), raw_bytes(n)}; }
};

TEST_P(Graphs, ReplayMatchesEagerBitForBit) {
  Context& ctx = context_for(GetParam());
  ValidationCheck vc(ctx);
  std::mt19937_64 rng(fresh_seed());
  Step st(ctx, rng);
  st.run(ctx);
  const auto eager = st.results();
  for (const Tensor& t : {st.h, st.y, st.z, st.s, st.n}) {
    Tensor o = t;
    o.fill_bytes(kPoison);
  }
  Graph g = ctx.capture([&] { st.run(ctx); });
  EXPECT_EQ(g.ops(), 5u);
  // Nothing ran yet: the capture recorded.
  EXPECT_EQ(raw_bytes(st.n), std::vector<uint8_t>(st.n.nbytes(), kPoison));
  g.replay();
  EXPECT_EQ(st.results(), eager);
  if (GetParam().backend != "cpu") {
    EXPECT_TRUE(g.native()) << GetParam().backend << " should replay natively";
  }
}

TEST_P(Graphs, ReplaySeesNewInputsAndOrdersWithEagerCalls) {
  Context& ctx = context_for(GetParam());
  ValidationCheck vc(ctx);
  std::mt19937_64 rng(fresh_seed());
  Step st(ctx, rng);
  Graph g = ctx.capture([&] { st.run(ctx); });
  Tensor after = ctx.empty({37, 48}, DType::f32);
  for (int round = 0; round < 3; ++round) {
    st.x.upload_from(uniform(37 * 64, 3.0 + round, rng));
    st.w.upload_from(uniform(48 * 64, 0.5, rng));
    // The replay twice back to back, then an eager call on its output, with no wait in between.
    g.replay();
    g.replay();
    ctx.run("add_relu", {st.n, st.x2}, {after});
    const auto replayed = st.results();
    const auto after_bytes = raw_bytes(after);
    st.run(ctx);
    ctx.run("add_relu", {st.n, st.x2}, {after});
    EXPECT_EQ(replayed, st.results()) << "round " << round;
    EXPECT_EQ(after_bytes, raw_bytes(after)) << "round " << round;
  }
}

TEST_P(Graphs, KeepsItsTensorsAlive) {
  Context& ctx = context_for(GetParam());
  ValidationCheck vc(ctx);
  Tensor out;
  Graph g;
  {
    Tensor a = ctx.from_host({5}, DType::f32, {1, -2, 3, -4, 5});
    Tensor b = ctx.from_host({5}, DType::f32, {1, 1, 1, 1, 1});
    g = ctx.capture([&] {
      Tensor t = ctx.call("add_relu", {a, b})[0];  // allocated inside the capture
      out = ctx.call("mul", {t, b})[0];
    });
  }  // the caller's handles of a, b and t are gone; the graph holds them
  out.fill_bytes(0);
  g.replay();
  EXPECT_EQ(out.to_double(), (std::vector<double>{2, 0, 4, 0, 6}));
}

TEST_P(Graphs, LongCaptures) {
  ValidationCheck vc(context_for(GetParam()));
  // More dispatches than a Vulkan batch holds (1024): the graph takes descriptor pools as it grows.
  {
    Context& ctx = context_for(GetParam());
    Tensor a = ctx.from_host({7}, DType::f32, {0, 0, 0, 0, 0, 0, 0});
    Tensor one = ctx.from_host({7}, DType::f32, {1, 1, 1, 1, 1, 1, 1});
    Tensor b = ctx.empty({7}, DType::f32);
    Graph g = ctx.capture([&] {
      for (int k = 0; k < 1100; ++k) ctx.run("add", {k % 2 ? b : a, one}, {k % 2 ? a : b});
    });
    g.replay();
    g.replay();
    EXPECT_EQ(a.to_double(), std::vector<double>(7, 2200));
  }
}

TEST_P(Graphs, HostCallsInsideACaptureAreRefused) {
  Context& ctx = context_for(GetParam());
  ValidationCheck vc(ctx);
  Tensor a = ctx.from_host({3}, DType::f32, {1, 2, 3});
  Tensor b = ctx.empty({3}, DType::f32);
  const auto refused = [&](const std::function<void()>& inside, const std::string& what) {
    try {
      ctx.capture([&] {
        ctx.run("add_relu", {a, a}, {b});
        inside();
      });
      ADD_FAILURE() << what << " was captured";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused([&] { ctx.synchronize(); }, "Context::synchronize");
  refused([&] { (void)a.to_double(); }, "Tensor::download");
  refused([&] { a.upload_from(std::vector<double>{4, 5, 6}); }, "Tensor::upload");
  refused([&] { (void)ctx.timestamp(); }, "Context::timestamp");
  // The context is usable after each: an eager call and a fresh capture both work.
  ctx.run("add_relu", {a, a}, {b});
  EXPECT_EQ(b.to_double(), (std::vector<double>{2, 4, 6}));
  Graph g = ctx.capture([&] { ctx.run("mul", {a, a}, {b}); });
  g.replay();
  EXPECT_EQ(b.to_double(), (std::vector<double>{1, 4, 9}));
}

// An embedding's ids are checked on the host in eager calls; a capture cannot read them, so the kernels'
// own guard serves: ids in range give the eager result, an id out of range a row of NaN, no fault.
TEST_P(Graphs, EmbeddingIsCapturedWithoutItsHostCheck) {
  Context& ctx = context_for(GetParam());
  ValidationCheck vc(ctx);
  std::mt19937_64 rng(fresh_seed());
  Tensor table = random_tensor(ctx, {11, 16}, 1, rng);
  Tensor ids = ctx.from_host({2, 3}, DType::i32, {0, 10, 4, 7, 7, 1});
  Tensor y = ctx.empty({2, 3, 16}, DType::f32);
  ctx.run("embedding", {ids, table}, {y});
  const auto eager = raw_bytes(y);
  y.fill_bytes(kPoison);
  Graph g = ctx.capture([&] { ctx.run("embedding", {ids, table}, {y}); });
  g.replay();
  EXPECT_EQ(raw_bytes(y), eager);
  if (GetParam().backend == "cpu") return;  // the reference replays call by call, and refuses the id below
  ids.upload_from(std::vector<double>{0, 10, 4, 7, 11, 1});  // 11: out of range
  g.replay();
  const auto v = y.to_double();
  for (int c = 0; c < 16; ++c) {
    EXPECT_TRUE(std::isnan(v[4 * 16 + c])) << c;
    EXPECT_FALSE(std::isnan(v[3 * 16 + c])) << c;
  }
  EXPECT_THROW(ctx.run("embedding", {ids, table}, {y}), Error);  // eager: still checked
}

TEST_P(Graphs, MisuseIsAnError) {
  Context& ctx = context_for(GetParam());
  Graph empty;
  try {
    empty.replay();
    ADD_FAILURE() << "an empty graph replayed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
  try {
    ctx.capture([&] { ctx.capture([] {}); });
    ADD_FAILURE() << "a capture nested";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("do not nest"), std::string::npos) << e.what();
  }
  // A rejected op inside a capture: the op's own error, the capture dropped.
  Tensor a = ctx.from_host({3}, DType::f32, {1, 2, 3});
  try {
    ctx.capture([&] { ctx.call("add_relu", {a, ctx.empty({4}, DType::f32)}); });
    ADD_FAILURE() << "a bad call was captured";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Shape) << e.what();
  }
  ctx.synchronize();
}

// Shape buckets: decode attention against caches of changing length, each call served by the graph of
// its bucket on tensors padded to the bucket (the padding finite garbage, masked by key_lengths), equal
// to the eager unpadded call within f32 rounding.
TEST_P(Graphs, BucketedCallsMatchUnpadded) {
  Context& ctx = context_for(GetParam());
  ValidationCheck vc(ctx);
  std::mt19937_64 rng(fresh_seed());
  constexpr int64_t B = 2, Hq = 4, Hkv = 2, D = 32;
  struct Slot {
    Tensor q, k, v, lens, o;
  };
  std::map<int64_t, Slot> slots;
  GraphCache cache({16, 64, 128});
  const auto capture = [&](int64_t bucket) {
    Slot& s = slots[bucket];
    s.q = ctx.empty({B, Hq, 1, D}, DType::f32);
    s.k = ctx.empty({B, Hkv, bucket, D}, DType::f32);
    s.v = ctx.empty({B, Hkv, bucket, D}, DType::f32);
    s.lens = ctx.empty({B}, DType::i32);
    s.o = ctx.empty({B, Hq, 1, D}, DType::f32);
    return ctx.capture([&] { ctx.run("attention", {s.q, s.k, s.v, Tensor(), s.lens}, {s.o}); });
  };
  for (int64_t L : {5, 37, 64, 90, 16, 41}) {
    const auto qv = uniform(B * Hq * D, 1, rng), kv = uniform(B * Hkv * L * D, 1, rng), vv = uniform(B * Hkv * L * D, 1, rng);
    Tensor q = ctx.from_host({B, Hq, 1, D}, DType::f32, qv);
    Tensor k = ctx.from_host({B, Hkv, L, D}, DType::f32, kv), v = ctx.from_host({B, Hkv, L, D}, DType::f32, vv);
    const std::vector<double> expect = ctx.call("attention", {q, k, v})[0].to_double();

    Graph& g = cache.get(L, capture);
    const int64_t bucket = cache.bucket(L);
    Slot& s = slots.at(bucket);
    // The rows of k and v padded from L to the bucket with values the mask must hide.
    const auto pad = [&](const std::vector<double>& x) {
      std::vector<double> out = uniform(static_cast<size_t>(B * Hkv * bucket * D), 50, rng);
      for (int64_t bh = 0; bh < B * Hkv; ++bh)
        std::copy_n(x.begin() + bh * L * D, L * D, out.begin() + bh * bucket * D);
      return out;
    };
    s.q.upload_from(qv);
    s.k.upload_from(pad(kv));
    s.v.upload_from(pad(vv));
    s.lens.upload_from(std::vector<double>(B, static_cast<double>(L)));
    g.replay();
    const std::vector<double> got = s.o.to_double();
    ASSERT_EQ(got.size(), expect.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], expect[i], 2e-5 * (1 + std::abs(expect[i]))) << "length " << L << ", bucket " << bucket << ", element " << i;
  }
  EXPECT_EQ(cache.size(), 3u);  // 16, 64 and 128: six lengths, three captures
  EXPECT_THROW(cache.bucket(129), Error);
  EXPECT_THROW(GraphCache({64, 16}), Error);
}

INSTANTIATE_TEST_SUITE_P(All, Graphs, ::testing::ValuesIn(devices()), [](const auto& info) { return info.param.tag; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Graphs);

}  // namespace
}  // namespace kf::test
