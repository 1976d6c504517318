"""What a driver calls: one kernel's code and calling convention (`Kernel`) and one host
callback site (`HostSite`). Every backend's lowering hands the scheduler (`schedule.py`)
`Kernel`s; the cpu backend's C contract (`cpu/contract.py`) and the gpu backend's launches
(`gpu/driver.py`) read them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from hlofuse.ir.shape import ArrayShape


@dataclass(frozen=True)
class Kernel:
    """One kernel's code and its calling convention: the text a backend printed for it (C for
    the cpu backend, `cpu/contract.py`; Triton for the gpu backend) and its operand leaves."""

    name: str  # the function's name, unique within a program
    source: str  # the text defining `name` (and any static helpers/constants it needs); empty
    # when an earlier kernel of the program prints the same function (kernel_key.structural_key
    # before lowering, the same kernel-IR identity after: kernel_ir.identity.digest)
    inputs: tuple[ArrayShape, ...]  # one per operand leaf, in operand order
    outputs: tuple[ArrayShape, ...]  # one per result leaf
    instruction: str  # the HLO instruction it computes (for profiles and explain)
    kind: str  # "loop", "input", "output", or the opcode of an unfused op ("dot", "sort", ...)
    inplace: dict[int, int] = field(default_factory=dict)  # output index -> input index

    @property
    def nbytes(self) -> int:
        """Bytes read and written once per call (a lower bound on the memory traffic)."""
        return sum(s.nbytes for s in self.inputs) + sum(s.nbytes for s in self.outputs)


@dataclass(frozen=True)
class HostSite:
    """One host callback the driver calls (`Program.host_sites`)."""

    index: int  # into the caller's callback table
    instruction: str  # the custom call (for messages)
    inputs: tuple[ArrayShape, ...]  # its array operands
    outputs: tuple[ArrayShape, ...]  # its array results


class Lowered(Protocol):
    """A kernel lowered and optimised by a backend, not yet printed (`cpu/kernels.Lowered`,
    `gpu/kernels.Lowered`): the scheduler prints one function per `digest`."""

    @property
    def stem(self) -> str: ...  # the readable part of its name (`naming.kernel_stem`)

    @property
    def digest(self) -> str: ...  # its identity (`kernel_ir.identity.digest`)

    def call(self, name: str, source: str = "") -> Kernel: ...  # a call of function `name`

    def emit(self, name: str) -> Kernel: ...  # the function `name` printed
