"""A stand-in for PyTorch in a folder put on PYTHONPATH: enough of its API for bench/gpu_check.py's tasks.

No device and no arithmetic: a matmul returns at once, `synchronize` takes a millisecond, the
training loss halves each step, and an allocation past CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is refused
only where the task is an MPS client (CUDA_MPS_PIPE_DIRECTORY set), as NVIDIA MPS refuses it.
`torch.distributed` does not exist, so the pytorch-ddp starter takes its own CPU path.
"""

from __future__ import annotations

from pathlib import Path

TORCH = """
import os, time

bfloat16, uint8 = "bfloat16", "uint8"


class OutOfMemoryError(RuntimeError):
    pass


class Tensor:
    def __init__(self, value=1.0):
        self.value = value

    def __matmul__(self, other):
        return Tensor()

    def tanh(self):
        return self

    def cuda(self):
        return self

    def item(self):
        return self.value

    def backward(self):
        pass

    def fill_(self, value):
        return self


def randn(*shape, **options):
    return Tensor()


def manual_seed(seed):
    pass


def empty(size, dtype=None, device=None):
    limit = os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "")
    if os.environ.get("CUDA_MPS_PIPE_DIRECTORY") and limit:
        cap = int(limit.split("=")[1].rstrip("M")) * 2**20
        if size > cap:
            raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {size // 2**20} MiB (fake)")
    return Tensor()


class cuda:
    is_available = staticmethod(lambda: True)
    synchronize = staticmethod(lambda: time.sleep(0.001))
    get_device_name = staticmethod(lambda index=0: "NVIDIA Fake")
    empty_cache = staticmethod(lambda: None)


class _Module:
    def __init__(self, *layers):
        self.steps = 0

    def cuda(self):
        return self

    def parameters(self):
        return []

    def __call__(self, x):
        return Tensor()


class nn:
    Sequential = Linear = ReLU = _Module

    class functional:
        calls = 0

        @staticmethod
        def mse_loss(prediction, target):
            nn.functional.calls += 1
            return Tensor(1.0 / 2 ** min(nn.functional.calls, 60))


class optim:
    class Adam:
        def __init__(self, parameters, lr=0.001):
            pass

        def zero_grad(self):
            pass

        def step(self):
            pass
"""


def fake_torch(folder: Path) -> Path:
    """A folder holding a `torch` package; put it on PYTHONPATH."""
    package = folder / "torch"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(TORCH)
    return folder
