"""Captured graphs from Python: kernelfusion.capture (a with block) and Context.capture (a callable)
record kf ops once; a replay gives the eager results and sees new inputs; host calls inside are refused."""
import numpy as np
import pytest

import kernelfusion as kf


@pytest.fixture(scope="module")
def ctx():
    return kf.default_context()


def test_with_block_replays_with_new_inputs(ctx):
    rng = np.random.default_rng(3)
    xa, ba = rng.standard_normal((7, 33)).astype(np.float32), rng.standard_normal((7, 33)).astype(np.float32)
    x, b = ctx.empty([7, 33]), ctx.empty([7, 33])
    x.upload(xa)
    b.upload(ba)
    with kf.capture(ctx) as cap:
        y = kf.ops.add_relu(x, b)
        z = kf.ops.softmax(y, scale=0.5)
    assert cap.graph.ops == 2
    for _ in range(2):
        cap.graph.replay()
        expect = kf.ops.softmax(kf.ops.add_relu(xa, ba), scale=0.5)
        np.testing.assert_array_equal(z.to_numpy(), np.asarray(expect))
        xa = rng.standard_normal((7, 33)).astype(np.float32)
        x.upload(xa)


def test_callable_form_and_refusals(ctx):
    a = ctx.empty([5])
    a.upload(np.arange(5, dtype=np.float32) - 2)
    out = ctx.empty([5])
    g = ctx.capture(lambda: ctx.run("relu", [a], [out]))
    g()
    np.testing.assert_array_equal(out.to_numpy(), [0, 0, 0, 1, 2])
    with pytest.raises(kf.UnsupportedError, match="Context::synchronize"):
        with kf.capture(ctx):
            ctx.run("relu", [a], [out])
            ctx.synchronize()
    with pytest.raises(ZeroDivisionError):  # a Python error inside drops the capture too
        with kf.capture(ctx):
            1 / 0
    ctx.run("relu", [a], [out])  # the context is usable
    ctx.synchronize()


def test_graph_cache_buckets(ctx):
    """Rows of changing count, each call served by its bucket's graph on rows padded to the bucket."""
    cache = kf.GraphCache([8, 32])
    slots = {}

    def capture(bucket):
        x, y = ctx.empty([bucket, 16]), ctx.empty([bucket, 16])
        slots[bucket] = (x, y)
        return ctx.capture(lambda: ctx.run("softmax", [x], [y]))

    rng = np.random.default_rng(5)
    for n in (3, 8, 20, 5, 31):
        rows = rng.standard_normal((n, 16)).astype(np.float32)
        g = cache.get(n, capture)
        x, y = slots[cache.bucket(n)]
        padded = np.zeros(x.shape, np.float32)
        padded[:n] = rows
        x.upload(padded)
        g.replay()
        np.testing.assert_allclose(y.to_numpy()[:n], np.asarray(kf.ops.softmax(rows)), rtol=1e-6, atol=1e-7)
    assert len(cache) == 2
    with pytest.raises(kf.InvalidArgumentError):
        cache.bucket(33)
