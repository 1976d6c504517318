"""The gpu backend: the kernel IR as Triton kernels (`triton_print.py`), mapped to programs and
lanes by the kernel-IR grid pass (`kernel_ir/passes/grid.py`); dots through torch (cuBLAS:
`library.py`); the module run by `driver.py` from the shared driver IR and buffer assignment
(`backends/driver_ir/`). Triton and torch are the optional `gpu` extra; nothing here imports
them until a kernel is built. Without a GPU it runs under Triton's interpreter on the CPU when
TRITON_INTERPRET=1 is set (how the tests run it: slow, for checking, never for speed)."""

from __future__ import annotations

import importlib.util

from hlofuse import env
from hlofuse.errors import CompileError


class GpuUnavailableError(CompileError):
    """The gpu backend cannot run here (no torch or Triton, or no GPU and no interpreter)."""


def require() -> None:
    """Raise `GpuUnavailableError` saying why the gpu backend cannot run here."""
    missing = [m for m in ("torch", "triton") if importlib.util.find_spec(m) is None]
    if missing:
        raise GpuUnavailableError(
            f"the gpu backend needs {' and '.join(missing)} (pip install 'hlofuse[gpu]')")
    if env.raw("TRITON_INTERPRET") == "1":  # (as Triton reads it)
        return
    import torch

    if not torch.cuda.is_available():
        raise GpuUnavailableError(
            "the gpu backend found no GPU (torch.cuda.is_available() is False); set "
            "TRITON_INTERPRET=1 to run it under Triton's interpreter on the CPU (slow)")
