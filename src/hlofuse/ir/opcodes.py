"""THE opcode table: every HLO opcode hlofuse knows, with the facts every pass derives from.

One row per opcode: its text name, arity (None = variadic), category, and whether XLA's base
`InstructionFusion::IsExpensive` calls it expensive. Nothing else in hlofuse keeps its own list of
opcodes: fusion predicates, the interpreter, the kernel counter and the C backend all ask this
table (or a category of it).

Categories, in the spirit of TVM's ordered pattern kinds:

    ELEMENTWISE  out[i] = f(in0[i], in1[i], ...)          add, exp, select, convert, ...
    BROADCAST    out index maps to an operand index         broadcast, iota
    INJECTIVE    each out element comes from one in element reshape, transpose, slice, pad, ...
    REDUCTION    many in elements fold into one out element reduce, reduce-window
    COMPLEX      heavy math with reuse                      dot, convolution, fft, ...
    DATA         data-dependent indexing or ordering        gather, scatter, sort, dus
    CONTROL      calls other computations                   while, conditional, call, fusion
    STRUCTURAL   no computation: naming and plumbing        parameter, constant, tuple, gte
    OPAQUE       side effects or unknown code               custom-call, rng, collectives

The rows follow XLA's `HLO_OPCODE_LIST` (`xla/hlo/ir/hlo_opcode.h`): every opcode of today's HLO
is here. Which of them the interpreter and the cpu backend run is their business (and listed in
docs/hlo-text.md); parsing and verifying knows them all. `ASYNC_WRAPPABLE`, `COLLECTIVES` and
`START_DONE` are derived groups the parser, verifier and backends share.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum

from hlofuse.ir.fastenum import plain_member_reads


class Category(Enum):
    ELEMENTWISE = "elementwise"
    BROADCAST = "broadcast"
    INJECTIVE = "injective"
    REDUCTION = "reduction"
    COMPLEX = "complex"
    DATA = "data"
    CONTROL = "control"
    STRUCTURAL = "structural"
    OPAQUE = "opaque"


class FusionKind(StrEnum):
    """A fusion's `kind=` (XLA's HloInstruction::FusionKind), compared and printed as its text.
    Whole-loop fusion (`passes/fusion/loop_fusion.py`) is CUSTOM with a while inside."""

    LOOP = "kLoop"
    INPUT = "kInput"
    OUTPUT = "kOutput"
    CUSTOM = "kCustom"


class Opcode(Enum):
    # elementwise unary
    ABS = "abs"
    ACOS = "acos"
    ACOSH = "acosh"
    ASIN = "asin"
    ASINH = "asinh"
    ATAN = "atan"
    ATANH = "atanh"
    COSH = "cosh"
    SINH = "sinh"
    BITCAST_CONVERT = "bitcast-convert"
    CBRT = "cbrt"
    CEIL = "ceil"
    CLZ = "count-leading-zeros"
    CONVERT = "convert"
    COPY = "copy"
    COS = "cosine"
    ERF = "erf"
    EXP = "exponential"
    EXPM1 = "exponential-minus-one"
    FLOOR = "floor"
    IMAG = "imag"
    IS_FINITE = "is-finite"
    LOG = "log"
    LOG1P = "log-plus-one"
    LOGISTIC = "logistic"
    NEGATE = "negate"
    NOT = "not"
    POPCNT = "popcnt"
    REAL = "real"
    REDUCE_PRECISION = "reduce-precision"
    ROUND_AFZ = "round-nearest-afz"
    ROUND_EVEN = "round-nearest-even"
    RSQRT = "rsqrt"
    SIGN = "sign"
    SIN = "sine"
    SQRT = "sqrt"
    TAN = "tan"
    TANH = "tanh"
    # elementwise binary
    ADD = "add"
    AND = "and"
    ATAN2 = "atan2"
    COMPARE = "compare"
    COMPLEX = "complex"
    DIVIDE = "divide"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    MULHI = "mulhi"
    MULTIPLY = "multiply"
    OR = "or"
    POWER = "power"
    REMAINDER = "remainder"
    SHIFT_LEFT = "shift-left"
    SHIFT_RIGHT_ARITHMETIC = "shift-right-arithmetic"
    SHIFT_RIGHT_LOGICAL = "shift-right-logical"
    STOCHASTIC_CONVERT = "stochastic-convert"
    SUBTRACT = "subtract"
    XOR = "xor"
    # elementwise ternary
    CLAMP = "clamp"
    SELECT = "select"
    # broadcast-like
    BROADCAST = "broadcast"
    IOTA = "iota"
    # injective / data movement
    BITCAST = "bitcast"
    CONCATENATE = "concatenate"
    DYNAMIC_RESHAPE = "dynamic-reshape"
    DYNAMIC_SLICE = "dynamic-slice"
    PAD = "pad"
    RESHAPE = "reshape"
    REVERSE = "reverse"
    SLICE = "slice"
    TRANSPOSE = "transpose"
    # reductions
    REDUCE = "reduce"
    REDUCE_WINDOW = "reduce-window"
    # heavy math
    CONVOLUTION = "convolution"
    DOT = "dot"
    CHOLESKY = "cholesky"
    TRIANGULAR_SOLVE = "triangular-solve"
    FFT = "fft"
    BATCH_NORM_GRAD = "batch-norm-grad"
    BATCH_NORM_INFERENCE = "batch-norm-inference"
    BATCH_NORM_TRAINING = "batch-norm-training"
    RAGGED_DOT = "ragged-dot"
    SCALED_DOT = "scaled-dot"
    # data-dependent
    DYNAMIC_UPDATE_SLICE = "dynamic-update-slice"
    GATHER = "gather"
    SCATTER = "scatter"
    SELECT_AND_SCATTER = "select-and-scatter"
    SORT = "sort"
    TOPK = "topk"
    MAP = "map"
    # control
    ASYNC_START = "async-start"
    ASYNC_UPDATE = "async-update"
    ASYNC_DONE = "async-done"
    CALL = "call"
    CONDITIONAL = "conditional"
    FUSION = "fusion"
    WHILE = "while"
    # structural
    ADD_DEPENDENCY = "add-dependency"
    AFTER_ALL = "after-all"
    CONSTANT = "constant"
    COPY_START = "copy-start"
    COPY_DONE = "copy-done"
    DOMAIN = "domain"
    GET_DIMENSION_SIZE = "get-dimension-size"
    SET_DIMENSION_SIZE = "set-dimension-size"
    GET_TUPLE_ELEMENT = "get-tuple-element"
    OPTIMIZATION_BARRIER = "opt-barrier"
    PARAMETER = "parameter"
    PARTITION_ID = "partition-id"
    REPLICA_ID = "replica-id"
    TUPLE = "tuple"
    # opaque
    CUSTOM_CALL = "custom-call"
    RNG = "rng"
    RNG_BIT_GENERATOR = "rng-bit-generator"
    RNG_GET_AND_UPDATE_STATE = "rng-get-and-update-state"
    SHUFFLE = "shuffle"
    ALL_REDUCE = "all-reduce"
    ALL_REDUCE_START = "all-reduce-start"
    ALL_REDUCE_DONE = "all-reduce-done"
    ALL_GATHER = "all-gather"
    ALL_GATHER_START = "all-gather-start"
    ALL_GATHER_DONE = "all-gather-done"
    ALL_TO_ALL = "all-to-all"
    RAGGED_ALL_TO_ALL = "ragged-all-to-all"
    REDUCE_SCATTER = "reduce-scatter"
    COLLECTIVE_BROADCAST = "collective-broadcast"
    COLLECTIVE_PERMUTE = "collective-permute"
    COLLECTIVE_PERMUTE_START = "collective-permute-start"
    COLLECTIVE_PERMUTE_DONE = "collective-permute-done"
    COLLECTIVE_REDUCE = "collective-reduce"
    INFEED = "infeed"
    OUTFEED = "outfeed"
    SEND = "send"
    SEND_DONE = "send-done"
    RECV = "recv"
    RECV_DONE = "recv-done"
    # control (newer XLA)
    SCAN = "scan"

    def __str__(self) -> str:
        return self.value

    # Members are singletons compared by identity, so they may hash by identity too, in C:
    # Enum's own __hash__ (hash of the name) runs Python code, and opcodes are looked up in
    # sets and tables for every instruction every pass visits.
    __hash__ = object.__hash__

    @property
    def info(self) -> OpInfo:
        return OPCODES[self]


plain_member_reads(Category)
plain_member_reads(Opcode)


@dataclass(frozen=True)
class OpInfo:
    """Facts about one opcode. `arity` None means variadic."""

    text: str
    arity: int | None
    category: Category
    expensive: bool
    side_effect: bool = False


E, B, INJ, R = Category.ELEMENTWISE, Category.BROADCAST, Category.INJECTIVE, Category.REDUCTION
CX, D, CT, ST, OP = (
    Category.COMPLEX,
    Category.DATA,
    Category.CONTROL,
    Category.STRUCTURAL,
    Category.OPAQUE,
)

# fmt: off
_ROWS: list[tuple[Opcode, int | None, Category, bool]] = [
    # opcode                         arity  category expensive (XLA base IsExpensive)
    (Opcode.ABS,                      1,    E,   False),
    (Opcode.ACOS,                     1,    E,   True),
    (Opcode.ACOSH,                    1,    E,   True),
    (Opcode.ASIN,                     1,    E,   True),
    (Opcode.ASINH,                    1,    E,   True),
    (Opcode.ATAN,                     1,    E,   True),
    (Opcode.ATANH,                    1,    E,   True),
    (Opcode.COSH,                     1,    E,   True),
    (Opcode.SINH,                     1,    E,   True),
    (Opcode.BITCAST_CONVERT,          1,    E,   False),
    (Opcode.CBRT,                     1,    E,   True),
    (Opcode.CEIL,                     1,    E,   False),
    (Opcode.CLZ,                      1,    E,   False),
    (Opcode.CONVERT,                  1,    E,   False),
    (Opcode.COPY,                     1,    E,   False),
    (Opcode.COS,                      1,    E,   False),   # expensive only for complex
    (Opcode.ERF,                      1,    E,   True),
    (Opcode.EXP,                      1,    E,   True),
    (Opcode.EXPM1,                    1,    E,   True),
    (Opcode.FLOOR,                    1,    E,   False),
    (Opcode.IMAG,                     1,    E,   False),
    (Opcode.IS_FINITE,                1,    E,   False),
    (Opcode.LOG,                      1,    E,   True),
    (Opcode.LOG1P,                    1,    E,   True),
    (Opcode.LOGISTIC,                 1,    E,   True),
    (Opcode.NEGATE,                   1,    E,   False),
    (Opcode.NOT,                      1,    E,   False),
    (Opcode.POPCNT,                   1,    E,   False),
    (Opcode.REAL,                     1,    E,   False),
    (Opcode.REDUCE_PRECISION,         1,    E,   False),
    (Opcode.ROUND_AFZ,                1,    E,   False),
    (Opcode.ROUND_EVEN,               1,    E,   False),
    (Opcode.RSQRT,                    1,    E,   True),
    (Opcode.SIGN,                     1,    E,   False),
    (Opcode.SIN,                      1,    E,   False),   # expensive only for complex
    (Opcode.SQRT,                     1,    E,   True),
    (Opcode.TAN,                      1,    E,   True),
    (Opcode.TANH,                     1,    E,   True),
    (Opcode.ADD,                      2,    E,   False),
    (Opcode.AND,                      2,    E,   False),
    (Opcode.ATAN2,                    2,    E,   True),
    (Opcode.COMPARE,                  2,    E,   False),
    (Opcode.COMPLEX,                  2,    E,   False),
    (Opcode.DIVIDE,                   2,    E,   True),    # cheap: integral / constant scalar
    (Opcode.MAXIMUM,                  2,    E,   False),
    (Opcode.MINIMUM,                  2,    E,   False),
    (Opcode.MULHI,                    2,    E,   False),
    (Opcode.MULTIPLY,                 2,    E,   False),
    (Opcode.OR,                       2,    E,   False),
    (Opcode.POWER,                    2,    E,   True),
    (Opcode.REMAINDER,                2,    E,   True),    # cheap: integral / constant scalar
    (Opcode.SHIFT_LEFT,               2,    E,   False),
    (Opcode.SHIFT_RIGHT_ARITHMETIC,   2,    E,   False),
    (Opcode.SHIFT_RIGHT_LOGICAL,      2,    E,   False),
    (Opcode.STOCHASTIC_CONVERT,       2,    E,   False),
    (Opcode.SUBTRACT,                 2,    E,   False),
    (Opcode.XOR,                      2,    E,   False),
    (Opcode.CLAMP,                    3,    E,   False),
    (Opcode.SELECT,                   3,    E,   False),
    (Opcode.BROADCAST,                1,    B,   False),
    (Opcode.IOTA,                     0,    B,   False),
    (Opcode.BITCAST,                  1,    INJ, False),
    (Opcode.CONCATENATE,              None, INJ, False),
    (Opcode.DYNAMIC_RESHAPE,          None, INJ, False),
    (Opcode.DYNAMIC_SLICE,            None, INJ, False),
    (Opcode.PAD,                      2,    INJ, False),
    (Opcode.RESHAPE,                  1,    INJ, False),
    (Opcode.REVERSE,                  1,    INJ, False),
    (Opcode.SLICE,                    1,    INJ, False),
    (Opcode.TRANSPOSE,                1,    INJ, False),
    (Opcode.REDUCE,                   None, R,   True),
    (Opcode.REDUCE_WINDOW,            None, R,   True),
    (Opcode.CONVOLUTION,              2,    CX,  True),
    (Opcode.DOT,                      2,    CX,  True),
    (Opcode.CHOLESKY,                 1,    CX,  True),
    (Opcode.TRIANGULAR_SOLVE,         2,    CX,  True),
    (Opcode.FFT,                      1,    CX,  True),
    (Opcode.BATCH_NORM_GRAD,          5,    CX,  True),
    (Opcode.BATCH_NORM_INFERENCE,     5,    CX,  True),
    (Opcode.BATCH_NORM_TRAINING,      3,    CX,  True),
    (Opcode.RAGGED_DOT,               3,    CX,  True),
    (Opcode.SCALED_DOT,               4,    CX,  True),
    (Opcode.DYNAMIC_UPDATE_SLICE,     None, D,   False),
    (Opcode.GATHER,                   2,    D,   True),
    (Opcode.SCATTER,                  None, D,   True),
    (Opcode.SELECT_AND_SCATTER,       3,    D,   True),
    (Opcode.SORT,                     None, D,   True),
    (Opcode.TOPK,                     1,    D,   True),
    (Opcode.MAP,                      None, D,   True),
    (Opcode.ASYNC_START,              None, CT,  True),
    (Opcode.ASYNC_UPDATE,             None, CT,  True),
    (Opcode.ASYNC_DONE,               1,    CT,  True),
    (Opcode.CALL,                     None, CT,  True),
    (Opcode.CONDITIONAL,              None, CT,  True),
    (Opcode.FUSION,                   None, CT,  True),
    (Opcode.WHILE,                    1,    CT,  True),
    (Opcode.ADD_DEPENDENCY,           2,    ST,  True),
    (Opcode.AFTER_ALL,                None, ST,  True),
    (Opcode.CONSTANT,                 0,    ST,  False),
    (Opcode.COPY_START,               1,    ST,  False),
    (Opcode.COPY_DONE,                1,    ST,  False),
    (Opcode.DOMAIN,                   1,    ST,  False),
    (Opcode.GET_DIMENSION_SIZE,       1,    ST,  False),
    (Opcode.SET_DIMENSION_SIZE,       2,    ST,  False),
    (Opcode.GET_TUPLE_ELEMENT,        1,    ST,  False),
    (Opcode.OPTIMIZATION_BARRIER,     1,    ST,  False),
    (Opcode.PARAMETER,                0,    ST,  True),
    (Opcode.PARTITION_ID,             0,    ST,  False),
    (Opcode.REPLICA_ID,               0,    ST,  False),
    (Opcode.TUPLE,                    None, ST,  False),
    (Opcode.CUSTOM_CALL,              None, OP,  True),
    (Opcode.RNG,                      None, OP,  True),
    (Opcode.RNG_BIT_GENERATOR,        1,    OP,  True),
    (Opcode.RNG_GET_AND_UPDATE_STATE, 0,    OP,  True),
    (Opcode.SHUFFLE,                  1,    OP,  True),
    (Opcode.ALL_REDUCE,               None, OP,  True),
    (Opcode.ALL_REDUCE_START,         None, OP,  True),
    (Opcode.ALL_REDUCE_DONE,          1,    OP,  True),
    (Opcode.ALL_GATHER,               None, OP,  True),
    (Opcode.ALL_GATHER_START,         None, OP,  True),
    (Opcode.ALL_GATHER_DONE,          1,    OP,  True),
    (Opcode.ALL_TO_ALL,               None, OP,  True),
    (Opcode.RAGGED_ALL_TO_ALL,        6,    OP,  True),
    (Opcode.REDUCE_SCATTER,           None, OP,  True),
    (Opcode.COLLECTIVE_BROADCAST,     None, OP,  True),
    (Opcode.COLLECTIVE_PERMUTE,       None, OP,  True),
    (Opcode.COLLECTIVE_PERMUTE_START, None, OP,  True),
    (Opcode.COLLECTIVE_PERMUTE_DONE,  1,    OP,  True),
    (Opcode.COLLECTIVE_REDUCE,        None, OP,  True),
    (Opcode.INFEED,                   1,    OP,  True),
    (Opcode.OUTFEED,                  2,    OP,  True),
    (Opcode.SEND,                     2,    OP,  True),
    (Opcode.SEND_DONE,                1,    OP,  True),
    (Opcode.RECV,                     1,    OP,  True),
    (Opcode.RECV_DONE,                1,    OP,  True),
    (Opcode.SCAN,                     None, CT,  True),
]
# fmt: on

# Collectives: cross-device communication. With one replica and one partition (all hlofuse runs)
# each is a local function of its operands (docs/hlo-text.md, "Collectives on one device").
COLLECTIVES = frozenset({
    Opcode.ALL_REDUCE, Opcode.ALL_REDUCE_START, Opcode.ALL_REDUCE_DONE, Opcode.ALL_GATHER,
    Opcode.ALL_GATHER_START, Opcode.ALL_GATHER_DONE, Opcode.ALL_TO_ALL, Opcode.RAGGED_ALL_TO_ALL,
    Opcode.REDUCE_SCATTER, Opcode.COLLECTIVE_BROADCAST, Opcode.COLLECTIVE_PERMUTE,
    Opcode.COLLECTIVE_PERMUTE_START, Opcode.COLLECTIVE_PERMUTE_DONE, Opcode.COLLECTIVE_REDUCE,
})

# Async pairs that are opcodes of their own (`all-reduce-start` / `all-reduce-done`, ...): the
# start op -> its done op. Any other `X-start` / `X-update` / `X-done` in text is the parser's
# syntax sugar for async-start / async-update / async-done wrapping X.
START_DONE: dict[Opcode, Opcode] = {
    Opcode.ALL_REDUCE_START: Opcode.ALL_REDUCE_DONE,
    Opcode.ALL_GATHER_START: Opcode.ALL_GATHER_DONE,
    Opcode.COLLECTIVE_PERMUTE_START: Opcode.COLLECTIVE_PERMUTE_DONE,
    Opcode.COPY_START: Opcode.COPY_DONE,
    Opcode.SEND: Opcode.SEND_DONE,
    Opcode.RECV: Opcode.RECV_DONE,
}
ASYNC_OPS = frozenset({Opcode.ASYNC_START, Opcode.ASYNC_UPDATE, Opcode.ASYNC_DONE})

_SIDE_EFFECTS = COLLECTIVES | ASYNC_OPS | {
    Opcode.INFEED,
    Opcode.OUTFEED,
    Opcode.RNG,
    Opcode.RNG_GET_AND_UPDATE_STATE,
    Opcode.AFTER_ALL,
    Opcode.ADD_DEPENDENCY,
    Opcode.SEND,
    Opcode.SEND_DONE,
    Opcode.RECV,
    Opcode.RECV_DONE,
}

OPCODES: dict[Opcode, OpInfo] = {
    op: OpInfo(op.value, arity, cat, exp, op in _SIDE_EFFECTS) for op, arity, cat, exp in _ROWS
}
assert set(OPCODES) == set(Opcode), "every opcode needs a row in the table"

BY_TEXT: dict[str, Opcode] = {op.value: op for op in Opcode}
# Spellings XLA's parser also accepts.
BY_TEXT["optimization-barrier"] = Opcode.OPTIMIZATION_BARRIER
BY_TEXT["clz"] = Opcode.CLZ


def lookup(text: str) -> Opcode | None:
    """The opcode for its text name, or None if hlofuse does not know it."""
    return BY_TEXT.get(text)


def is_elementwise(op: Opcode) -> bool:
    return OPCODES[op].category is Category.ELEMENTWISE


# Ops that produce no work at run time: they name, alias or pass values (kernel accounting).
NON_KERNEL_OPS = frozenset(
    {
        Opcode.PARAMETER,
        Opcode.CONSTANT,
        Opcode.TUPLE,
        Opcode.GET_TUPLE_ELEMENT,
        Opcode.BITCAST,
        Opcode.AFTER_ALL,
        Opcode.ADD_DEPENDENCY,
        Opcode.OPTIMIZATION_BARRIER,
        Opcode.PARTITION_ID,
        Opcode.REPLICA_ID,
        Opcode.DOMAIN,
    }
)

# Control flow: ops that run other computations in the caller's sequence (a loop, a branch, a
# call), no kernel of their own; their computations' instructions are the kernels.
CONTROL_FLOW_OPS = frozenset({Opcode.WHILE, Opcode.CONDITIONAL, Opcode.CALL})

# Ops a kernel computes whole, by a routine of the backend's library (the kernel IR's
# `LibCall`: kernel_ir/lower/library.py), not as an index map or a reduction. jax's LAPACK
# custom calls are library calls too, by target (backends/lapack_targets.py).
LIBRARY_OPS = frozenset({
    Opcode.DOT, Opcode.CONVOLUTION, Opcode.SORT, Opcode.TOPK, Opcode.RNG_BIT_GENERATOR,
    Opcode.SELECT_AND_SCATTER, Opcode.CHOLESKY, Opcode.TRIANGULAR_SOLVE,
})

# Binary ops that commute and associate (floats up to rounding, as XLA treats them): a reducer
# `ROOT r = op(p0, p1)` of one of these may be reassociated, vectorized and split in partials.
REASSOCIATIVE_REDUCERS = frozenset({
    Opcode.ADD, Opcode.MULTIPLY, Opcode.MAXIMUM, Opcode.MINIMUM, Opcode.AND, Opcode.OR,
    Opcode.XOR,
})

# Custom-call targets that are identities on one device (sharding annotations, host-memory
# moves, jax's memory-kind placement): every backend forwards their one operand.
IDENTITY_CUSTOM_CALLS = frozenset({
    "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "MoveToHost", "MoveToDevice",
    "annotate_device_placement",
})

# Ops whose elemental emission opens new basic blocks (ElementalIrEmitter::OpInvalidatesCache).
INVALIDATES_CACHE = frozenset(
    {
        Opcode.CONCATENATE,
        Opcode.DOT,
        Opcode.DYNAMIC_UPDATE_SLICE,
        Opcode.PAD,
        Opcode.REDUCE,
        Opcode.REDUCE_WINDOW,
    }
)

# The attributes through which each opcode calls computations (an attribute of a computation kind
# on any other opcode is refused by the parser, as XLA's parser does).
CALLED_COMPUTATION_ATTRS: dict[Opcode, frozenset[str]] = {
    **{op: frozenset({"to_apply"}) for op in (
        Opcode.CALL, Opcode.MAP, Opcode.REDUCE, Opcode.REDUCE_WINDOW, Opcode.SCATTER,
        Opcode.SORT, Opcode.ALL_REDUCE, Opcode.ALL_REDUCE_START, Opcode.REDUCE_SCATTER,
        Opcode.SCAN, Opcode.COLLECTIVE_REDUCE)},
    Opcode.FUSION: frozenset({"calls"}),
    Opcode.WHILE: frozenset({"condition", "body"}),
    Opcode.CONDITIONAL: frozenset({"branch_computations", "true_computation",
                                   "false_computation"}),
    Opcode.SELECT_AND_SCATTER: frozenset({"select", "scatter"}),
    Opcode.CUSTOM_CALL: frozenset({"called_computations", "to_apply"}),
    **{op: frozenset({"calls"}) for op in ASYNC_OPS},
}

# Ops that take `result_accuracy=` (XLA: the unary transcendentals).
RESULT_ACCURACY_OPS = frozenset({
    Opcode.CBRT, Opcode.COS, Opcode.EXP, Opcode.EXPM1, Opcode.LOG, Opcode.LOG1P,
    Opcode.LOGISTIC, Opcode.RSQRT, Opcode.SIN, Opcode.SQRT, Opcode.TAN, Opcode.TANH,
    Opcode.ERF, Opcode.ACOS, Opcode.ACOSH, Opcode.ASIN, Opcode.ASINH, Opcode.ATAN,
    Opcode.ATANH, Opcode.COSH, Opcode.SINH,
})

# Comparison directions and types accepted by `compare`.
COMPARISON_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")
COMPARISON_TYPES = ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")
FUSION_KINDS = tuple(FusionKind)
CUSTOM_CALL_API_VERSIONS = ("API_VERSION_ORIGINAL", "API_VERSION_STATUS_RETURNING",
                            "API_VERSION_STATUS_RETURNING_UNIFIED", "API_VERSION_TYPED_FFI")
RNG_ALGORITHMS = ("rng_default", "rng_three_fry", "rng_philox")
