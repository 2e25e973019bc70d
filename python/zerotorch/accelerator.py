"""``zerotorch.get_accelerator()``: the calls DeepSpeed scripts make on
``deepspeed.accelerator.get_accelerator()``, for the device this rank trains on by default
(what ``zerotorch.initialize`` chooses for a module on the host: the local rank's GPU where one
is visible, else the CPU). Its methods answer as DeepSpeed's CUDA and CPU accelerators do:
``device_name(i)`` is "cuda:i" (or "cpu"), ``communication_backend_name()`` is "nccl" on CUDA and
"gloo" on the CPU.
"""

import torch

from .devices import resolve_device


class Accelerator:
    def __init__(self, kind):
        self._kind = kind  # "cuda" or "cpu"

    def _name(self):
        return self._kind

    def device_name(self, device_index=None):
        if self._kind == "cpu" or device_index is None:
            return self._kind
        return f"{self._kind}:{device_index}"

    def device(self, device_index=None):
        return torch.device(self.device_name(device_index))

    def is_available(self):
        return self.device_count() > 0

    def device_count(self):
        return torch.cuda.device_count() if self._kind == "cuda" else 1

    def current_device(self):
        return torch.cuda.current_device() if self._kind == "cuda" else 0

    def current_device_name(self):
        return self.device_name(self.current_device()) if self._kind == "cuda" else "cpu"

    def set_device(self, device_index):
        if self._kind == "cuda":
            torch.cuda.set_device(device_index)

    def synchronize(self, device_index=None):
        if self._kind == "cuda":
            torch.cuda.synchronize(device_index)

    def communication_backend_name(self):
        return "nccl" if self._kind == "cuda" else "gloo"

    def is_bf16_supported(self):
        return torch.cuda.is_bf16_supported() if self._kind == "cuda" else True

    def is_fp16_supported(self):
        return True

    def manual_seed(self, seed):
        (torch.cuda.manual_seed if self._kind == "cuda" else torch.manual_seed)(seed)

    def manual_seed_all(self, seed):
        (torch.cuda.manual_seed_all if self._kind == "cuda" else torch.manual_seed)(seed)

    def empty_cache(self):
        if self._kind == "cuda":
            torch.cuda.empty_cache()

    def memory_allocated(self, device_index=None):
        return torch.cuda.memory_allocated(device_index) if self._kind == "cuda" else 0

    def max_memory_allocated(self, device_index=None):
        return torch.cuda.max_memory_allocated(device_index) if self._kind == "cuda" else 0

    def pin_memory(self, tensor, align_bytes=1):
        return tensor.pin_memory() if self._kind == "cuda" else tensor

    def on_accelerator(self, tensor):
        return tensor.device.type == self._kind


_accelerator = None


def get_accelerator():
    """This rank's default accelerator (module docstring)."""
    global _accelerator
    if _accelerator is None:
        _accelerator = Accelerator(resolve_device("auto").type)
    return _accelerator
