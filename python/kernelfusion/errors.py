"""kf::Error as Python exceptions.

Every error kf raises is a :class:`Error` carrying its code (``Error.code``: "Shape", "DType", ...) and the
C++ message unchanged (the op, the argument and what was wrong). The subclasses are also the built-in
exception that fits, so ``except ValueError`` catches a shape mismatch.
"""
import builtins


class Error(Exception):
    """Base of every kf error; ``code`` names the kf::ErrorCode."""

    code = "Internal"


class InvalidArgumentError(Error, ValueError):
    """A value out of range (p outside [0, 1), eps <= 0, a bad option)."""

    code = "InvalidArgument"


class ShapeError(Error, ValueError):
    """Shapes that do not match, or an empty required tensor."""

    code = "Shape"


class DTypeError(Error, TypeError):
    """Dtypes that do not match, or one the op does not take."""

    code = "DType"


class DeviceError(Error, RuntimeError):
    """A tensor of another device, no usable device, a device failure."""

    code = "Device"


class OutOfMemoryError(Error, MemoryError):
    """Host or device memory exhausted."""

    code = "OutOfMemory"


class DeviceLostError(DeviceError):
    """The GPU was lost (driver reset, watchdog)."""

    code = "DeviceLost"


class UnsupportedError(Error, NotImplementedError):
    """The device lacks a capability the op needs (named in the message)."""

    code = "Unsupported"


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 - kernelfusion.TimeoutError on purpose
    """A bounded wait for the device ran out."""

    code = "Timeout"


class InternalError(Error, RuntimeError):
    """A bug in kf itself."""

    code = "Internal"


_BY_CODE = {c.code: c for c in (InvalidArgumentError, ShapeError, DTypeError, DeviceError, OutOfMemoryError,
                                DeviceLostError, UnsupportedError, TimeoutError, InternalError)}


def class_for(code):
    """The exception class of a kf::ErrorCode name (the C++ module's translator calls it)."""
    return _BY_CODE.get(code, Error)
