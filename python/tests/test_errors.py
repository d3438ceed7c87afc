# kf::Error from Python: the class fits the code (and the built-in exception it is also), the message is
# the C++ one (the op, the argument, what was wrong), a rejected call writes nothing and the context stays
# usable.
import numpy as np
import pytest

import kernelfusion as kf
from kernelfusion import errors


def test_hierarchy():
    assert issubclass(kf.ShapeError, kf.Error) and issubclass(kf.ShapeError, ValueError)
    assert issubclass(kf.InvalidArgumentError, ValueError)
    assert issubclass(kf.DTypeError, TypeError)
    assert issubclass(kf.UnsupportedError, NotImplementedError)
    assert issubclass(kf.OutOfMemoryError, MemoryError)
    assert issubclass(kf.TimeoutError, TimeoutError)
    for code in ("InvalidArgument", "Shape", "DType", "Device", "OutOfMemory", "DeviceLost", "Unsupported",
                 "Timeout", "Internal"):
        assert errors.class_for(code).code == code


def test_shape_error_names_op_and_argument(cpu):
    x = np.zeros((4, 8), np.float32)
    out = np.full((4, 8), 7.0, np.float32)
    with pytest.raises(kf.ShapeError) as e:
        kf.ops.add_relu(x, np.zeros(7, np.float32), out=out, context=cpu)
    assert isinstance(e.value, ValueError) and e.value.code == "Shape"
    msg = str(e.value)
    assert msg.startswith("shape: add_relu:") and "argument 'b'" in msg and "[7]" in msg, msg
    assert (out == 7).all(), "a rejected call wrote its output"
    # the context stays usable
    np.testing.assert_array_equal(kf.ops.relu(x, context=cpu), x)


def test_dtype_error(cpu):
    with pytest.raises(kf.DTypeError) as e:
        kf.ops.add_relu(np.zeros(8, np.float32), np.zeros(8, np.float64), context=cpu)
    assert isinstance(e.value, TypeError) and "add_relu" in str(e.value) and "argument 'b'" in str(e.value)
    with pytest.raises(kf.DTypeError, match="no kf dtype"):
        kf.ops.relu(np.zeros(8, np.int64), context=cpu)


def test_invalid_argument(cpu):
    with pytest.raises(kf.InvalidArgumentError) as e:
        kf.ops.dropout(np.zeros(8, np.float32), p=1.5, seed=1, context=cpu)
    assert isinstance(e.value, ValueError) and "dropout" in str(e.value) and "'p'" in str(e.value)


def test_device_error():
    with pytest.raises(kf.DeviceError, match="not compiled in"):
        kf.Context(backend="no-such-backend")


def test_missing_required_input(cpu):
    with pytest.raises(kf.Error) as e:
        kf.ops.add_relu(np.zeros(8, np.float32), context=cpu)
    assert "add_relu" in str(e.value)
