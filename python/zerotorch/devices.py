"""Where a rank trains, for the Python front door: the C++ side's resolution (train/device.h)
of "auto", "cpu", "cuda", "cuda:N", "zttest", "zttest:N" as a ``torch.device``.

A device type other than the CPU and CUDA (the test device, PyTorch's PrivateUse1 renamed
"zttest" when the C++ side loads it) also needs a ``torch.<name>`` module before Python's
``Tensor.to`` accepts it (PyTorch imports it to initialise the device lazily); an empty one is
registered for it, as a backend's Python package would. Load the test device before the
process's first backward: PyTorch's autograd engine sizes its per-device threads once."""

import sys
import types

import torch

from . import _C


def resolve_device(spec):
    device = torch.device(_C.resolve_device(spec))
    name = device.type
    if name not in ("cpu", "cuda") and f"torch.{name}" not in sys.modules:
        module = types.ModuleType(f"torch.{name}")
        module.__doc__ = "zerotorch's host-backed test device (testdevice/test_device.h)"
        torch._register_device_module(name, module)
    return device
