"""The GPU backend's printer: the kernel IR as Triton kernels (`triton_print.py`), mapped to
programs and lanes by the kernel-IR grid pass (`kernel_ir/passes/grid.py`). Triton and torch
are the optional `gpu` extra; nothing here imports them until a kernel is built. There is no
`backend="gpu"` yet: the driver (device memory, launches, loops) is issue 32's next step."""
