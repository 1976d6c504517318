"""hlofuse's HLO IR: element types, shapes, literals, the opcode table, instructions,
computations and modules. Shape inference and the verifier live beside them."""

from hlofuse.ir.attributes import ATTRIBUTES, AttrKind, WindowDim
from hlofuse.ir.computation import Computation
from hlofuse.ir.dtypes import DTYPES, DType
from hlofuse.ir.instruction import Instruction, Metadata
from hlofuse.ir.literal import Literal
from hlofuse.ir.module import DebugInfo, FileLocation, Module, SourceLocation, StackFrame
from hlofuse.ir.opcodes import OPCODES, Category, Opcode, OpInfo
from hlofuse.ir.shape import ArrayShape, Shape, TokenShape, TupleShape

__all__ = [
    "ATTRIBUTES",
    "DTYPES",
    "OPCODES",
    "ArrayShape",
    "AttrKind",
    "Category",
    "Computation",
    "DType",
    "DebugInfo",
    "FileLocation",
    "Instruction",
    "Literal",
    "Metadata",
    "Module",
    "OpInfo",
    "Opcode",
    "Shape",
    "SourceLocation",
    "StackFrame",
    "TokenShape",
    "TupleShape",
    "WindowDim",
]
