# The tests import the package from the build tree (PYTHONPATH=build/python, tools/test.sh) or from an
# installed wheel (pip install .); KF_BACKEND is left to the tests: they open their contexts by name.
import numpy as np
import pytest

import kernelfusion as kf

NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32}


@pytest.fixture(scope="module")
def cpu():
    return kf.Context(backend="cpu")


@pytest.fixture(scope="module")
def cpu_default(cpu):
    """The CPU context as the default one for a module's tests (torch_ops and nn run on the default)."""
    previous = kf.default_context()
    kf.set_default_context(cpu)
    yield cpu
    kf.set_default_context(previous)


@pytest.fixture(scope="module")
def kt(cpu_default):
    import kernelfusion.torch_ops as kt
    return kt


@pytest.fixture(scope="module")
def knn(cpu_default):
    import kernelfusion.nn as knn
    return knn


def vulkan_context():
    """lavapipe (or a GPU) through the Vulkan backend; None where there is none."""
    if "vulkan" not in kf.backends():
        return None
    try:
        return kf.Context(backend="vulkan")
    except kf.DeviceError:
        return None
