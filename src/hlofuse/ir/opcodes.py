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
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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


class Opcode(Enum):
    # elementwise unary
    ABS = "abs"
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
    DIVIDE = "divide"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    MULTIPLY = "multiply"
    OR = "or"
    POWER = "power"
    REMAINDER = "remainder"
    SHIFT_LEFT = "shift-left"
    SHIFT_RIGHT_ARITHMETIC = "shift-right-arithmetic"
    SHIFT_RIGHT_LOGICAL = "shift-right-logical"
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
    # data-dependent
    DYNAMIC_UPDATE_SLICE = "dynamic-update-slice"
    GATHER = "gather"
    SCATTER = "scatter"
    SELECT_AND_SCATTER = "select-and-scatter"
    SORT = "sort"
    TOPK = "topk"
    MAP = "map"
    # control
    CALL = "call"
    CONDITIONAL = "conditional"
    FUSION = "fusion"
    WHILE = "while"
    # structural
    ADD_DEPENDENCY = "add-dependency"
    AFTER_ALL = "after-all"
    CONSTANT = "constant"
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
    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
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

    @property
    def info(self) -> OpInfo:
        return OPCODES[self]


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
    (Opcode.DIVIDE,                   2,    E,   True),    # cheap: integral / constant scalar
    (Opcode.MAXIMUM,                  2,    E,   False),
    (Opcode.MINIMUM,                  2,    E,   False),
    (Opcode.MULTIPLY,                 2,    E,   False),
    (Opcode.OR,                       2,    E,   False),
    (Opcode.POWER,                    2,    E,   True),
    (Opcode.REMAINDER,                2,    E,   True),    # cheap: integral / constant scalar
    (Opcode.SHIFT_LEFT,               2,    E,   False),
    (Opcode.SHIFT_RIGHT_ARITHMETIC,   2,    E,   False),
    (Opcode.SHIFT_RIGHT_LOGICAL,      2,    E,   False),
    (Opcode.SUBTRACT,                 2,    E,   False),
    (Opcode.XOR,                      2,    E,   False),
    (Opcode.CLAMP,                    3,    E,   False),
    (Opcode.SELECT,                   3,    E,   False),
    (Opcode.BROADCAST,                1,    B,   False),
    (Opcode.IOTA,                     0,    B,   False),
    (Opcode.BITCAST,                  1,    INJ, False),
    (Opcode.CONCATENATE,              None, INJ, False),
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
    (Opcode.DYNAMIC_UPDATE_SLICE,     None, D,   False),
    (Opcode.GATHER,                   2,    D,   True),
    (Opcode.SCATTER,                  None, D,   True),
    (Opcode.SELECT_AND_SCATTER,       3,    D,   True),
    (Opcode.SORT,                     None, D,   True),
    (Opcode.TOPK,                     1,    D,   True),
    (Opcode.MAP,                      None, D,   True),
    (Opcode.CALL,                     None, CT,  True),
    (Opcode.CONDITIONAL,              None, CT,  True),
    (Opcode.FUSION,                   None, CT,  True),
    (Opcode.WHILE,                    1,    CT,  True),
    (Opcode.ADD_DEPENDENCY,           2,    ST,  True),
    (Opcode.AFTER_ALL,                None, ST,  True),
    (Opcode.CONSTANT,                 0,    ST,  False),
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
    (Opcode.ALL_REDUCE,               None, OP,  True),
    (Opcode.ALL_GATHER,               None, OP,  True),
    (Opcode.INFEED,                   1,    OP,  True),
    (Opcode.OUTFEED,                  2,    OP,  True),
    (Opcode.SEND,                     2,    OP,  True),
    (Opcode.SEND_DONE,                1,    OP,  True),
    (Opcode.RECV,                     1,    OP,  True),
    (Opcode.RECV_DONE,                1,    OP,  True),
    (Opcode.SCAN,                     None, CT,  True),
]
# fmt: on

_SIDE_EFFECTS = {
    Opcode.INFEED,
    Opcode.OUTFEED,
    Opcode.RNG,
    Opcode.RNG_GET_AND_UPDATE_STATE,
    Opcode.ALL_REDUCE,
    Opcode.ALL_GATHER,
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
    }
)

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

# Comparison directions and types accepted by `compare`.
COMPARISON_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")
COMPARISON_TYPES = ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")
FUSION_KINDS = ("kLoop", "kInput", "kOutput", "kCustom")
RNG_ALGORITHMS = ("rng_default", "rng_three_fry", "rng_philox")
