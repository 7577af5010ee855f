"""Tremor value semantics over plain Python values.

Values are what orjson produces: dict (record), list (array), str, int, float,
bool, None. Python's own operators differ from Tremor's in a few places
(`True == 1`, `[1] + [2]`, unbounded ints, `"ab"[0]`), so every operation the
compiler cannot prove safe goes through a function here. The compiler and the
reference interpreter share these functions, so they agree by construction.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

import orjson

from contraflow.lang.errors import ScriptRuntimeError

INT_MIN = -(2**63)
INT_MAX = 2**64 - 1  # Tremor integers are i64, or u64 when positive


class _Missing:
    """The value of a key that is not there (never equal to anything)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()


def fail(message: str) -> NoReturn:
    """Abort the current event with a runtime error (the caller adds the position)."""
    raise ScriptRuntimeError(message)


def type_name(value: Any) -> str:
    """Tremor's name for a value's type."""
    t = type(value)
    if t is bool:
        return "bool"
    if t is int:
        return "integer"
    if t is float:
        return "float"
    if t is str:
        return "string"
    if t is list:
        return "array"
    if t is dict:
        return "record"
    if value is None:
        return "null"
    if t is bytes:
        return "binary"
    return t.__name__


def a_type(value: Any) -> str:
    """The type name with its article: 'an array', 'a record'."""
    name = type_name(value)
    return ("an " if name[0] in "aeiou" else "a ") + name


def check_int(value: int) -> int:
    if INT_MIN <= value <= INT_MAX:
        return value
    fail(f"integer overflow: {value} does not fit in 64 bits")


def _bad_operands(op: str, a: Any, b: Any) -> NoReturn:
    fail(f"cannot apply '{op}' to {type_name(a)} and {type_name(b)}")


def _is_num(v: Any) -> bool:
    t = type(v)
    return t is int or t is float


# ---------------------------------------------------------------- arithmetic


def add(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is int and tb is int:
        return check_int(a + b)
    if ta is str and tb is str:
        return a + b
    if _is_num(a) and _is_num(b):
        return float(a) + float(b)
    if ta is list and tb is list:
        return a + b
    if ta is dict and tb is dict:
        # Tremor's record `+`: a shallow union where the right-hand side wins (nulls included)
        return {k: copy_value(v) for k, v in (a | b).items()}
    _bad_operands("+", a, b)


def sub(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return check_int(a - b)
    if _is_num(a) and _is_num(b):
        return float(a) - float(b)
    _bad_operands("-", a, b)


def mul(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return check_int(a * b)
    if _is_num(a) and _is_num(b):
        return float(a) * float(b)
    _bad_operands("*", a, b)


def div(a: Any, b: Any) -> Any:
    """Division always yields a float, as in Tremor; dividing by zero is an error."""
    if _is_num(a) and _is_num(b):
        if b == 0:
            fail("division by zero")
        return float(a) / float(b)
    _bad_operands("/", a, b)


def mod(a: Any, b: Any) -> Any:
    """Remainder with the sign of the dividend (Rust's `%`), integers only."""
    if type(a) is int and type(b) is int:
        if b == 0:
            fail("division by zero")
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    if _is_num(a) and _is_num(b):
        if b == 0:
            fail("division by zero")
        return math.fmod(a, b)
    _bad_operands("%", a, b)


def neg(a: Any) -> Any:
    if type(a) is int:
        return check_int(-a)
    if type(a) is float:
        return -a
    fail(f"cannot negate {type_name(a)}")


def pos(a: Any) -> Any:
    if _is_num(a):
        return a
    fail(f"cannot apply unary '+' to {type_name(a)}")


def not_(a: Any) -> bool:
    if type(a) is bool:
        return not a
    fail(f"'not' expects a bool, got {type_name(a)}")


def bit_not(a: Any) -> Any:
    """`!`: logical not on bools, bitwise complement on integers."""
    if type(a) is bool:
        return not a
    if type(a) is int:
        # Tremor reads a non-negative integer as u64 first: `!12` is 2^64 - 13, `!-1` is 0
        return INT_MAX - a if a >= 0 else ~a
    fail(f"'!' expects a bool or an integer, got {type_name(a)}")


def _ints_or_bools(op: str, a: Any, b: Any) -> bool:
    ta, tb = type(a), type(b)
    if ta is int and tb is int:
        return False
    if ta is bool and tb is bool:
        return True
    _bad_operands(op, a, b)


def bit_and(a: Any, b: Any) -> Any:
    return (a and b) if _ints_or_bools("&", a, b) else a & b


def bit_or(a: Any, b: Any) -> Any:
    return (a or b) if _ints_or_bools("|", a, b) else a | b


def bit_xor(a: Any, b: Any) -> Any:
    return (a != b) if _ints_or_bools("^", a, b) else a ^ b


def _shift_amount(op: str, a: Any, b: Any) -> int:
    if type(a) is not int or type(b) is not int:
        _bad_operands(op, a, b)
    if not 0 <= b < 64:
        fail(f"shift amount {b} out of range 0..63")
    return int(b)


def shl(a: Any, b: Any) -> int:
    n = _shift_amount("<<", a, b)
    r = (a << n) & 0xFFFF_FFFF_FFFF_FFFF
    return r - 2**64 if a < 0 and r >= 2**63 else r


def shr(a: Any, b: Any) -> int:
    """Arithmetic (sign-preserving) right shift."""
    return int(a >> _shift_amount(">>", a, b))


def ushr(a: Any, b: Any) -> int:
    """Logical right shift over the 64-bit two's complement representation."""
    n = _shift_amount(">>>", a, b)
    return (a & 0xFFFF_FFFF_FFFF_FFFF) >> n


# ---------------------------------------------------------------- boolean logic


def expect_bool(value: Any, op: str) -> bool:
    if type(value) is bool:
        return value
    fail(f"'{op}' expects bool operands, got {type_name(value)}")


def bool_operand(value: Any) -> bool:
    """An operand of `and`/`or` or a `when` guard: it must be a bool."""
    if type(value) is bool:
        return value
    fail(f"expected a bool, got {type_name(value)}")


def xor(a: Any, b: Any) -> bool:
    return expect_bool(a, "xor") != expect_bool(b, "xor")


# ---------------------------------------------------------------- equality and ordering


def eq(a: Any, b: Any) -> bool:
    """Deep equality where bools are not numbers and 1 == 1.0."""
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is dict:
            return a.keys() == b.keys() and all(eq(v, b[k]) for k, v in a.items())
        if ta is list:
            return len(a) == len(b) and all(eq(x, y) for x, y in zip(a, b, strict=True))
        return bool(a == b)
    if (ta is int and tb is float) or (ta is float and tb is int):
        return bool(a == b)
    if ta in _TEXTS and tb in _TEXTS:  # a binary equals the string of the same bytes
        return _as_bytes(a) == _as_bytes(b)
    return False


def ne(a: Any, b: Any) -> bool:
    return not eq(a, b)


# Types whose values order among themselves exactly as Python orders them.
_PLAIN_ORDER = frozenset({int, float, str})


# Strings and binaries compare with each other byte by byte (Tremor's binary/string operators).
_TEXTS = frozenset({str, bytes})


def _as_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def _orderable(op: str, a: Any, b: Any) -> tuple[Any, Any]:
    """The operands as Python orders them the way Tremor does, or a type error."""
    if _is_num(a) and _is_num(b):
        return a, b
    ta, tb = type(a), type(b)
    if ta is tb and ta in (str, list, bool, bytes):
        return a, b
    if ta in _TEXTS and tb in _TEXTS:
        return _as_bytes(a), _as_bytes(b)
    _bad_operands(op, a, b)


def lt(a: Any, b: Any) -> bool:
    if type(a) is type(b) and type(a) in _PLAIN_ORDER:  # the common case, checked first
        return bool(a < b)
    a, b = _orderable("<", a, b)
    return bool(a < b)


def le(a: Any, b: Any) -> bool:
    if type(a) is type(b) and type(a) in _PLAIN_ORDER:  # the common case, checked first
        return bool(a <= b)
    a, b = _orderable("<=", a, b)
    return bool(a <= b)


def gt(a: Any, b: Any) -> bool:
    if type(a) is type(b) and type(a) in _PLAIN_ORDER:  # the common case, checked first
        return bool(a > b)
    a, b = _orderable(">", a, b)
    return bool(a > b)


def ge(a: Any, b: Any) -> bool:
    if type(a) is type(b) and type(a) in _PLAIN_ORDER:  # the common case, checked first
        return bool(a >= b)
    a, b = _orderable(">=", a, b)
    return bool(a >= b)


BINARY = {
    "+": add,
    "-": sub,
    "*": mul,
    "/": div,
    "%": mod,
    "&": bit_and,
    "|": bit_or,
    "^": bit_xor,
    "<<": shl,
    ">>": shr,
    ">>>": ushr,
    "==": eq,
    "!=": ne,
    "<": lt,
    "<=": le,
    ">": gt,
    ">=": ge,
    "xor": xor,
}
UNARY = {"-": neg, "+": pos, "not": not_, "!": bit_not}


# ---------------------------------------------------------------- access


def get_key(value: Any, key: Any) -> Any:
    """`value.key` / `value["key"]`: missing keys are errors (guard with `present`)."""
    if type(value) is dict:
        try:
            return value[key]
        except KeyError:
            fail(f"trying to access a non-existing key `{key}`")
    fail(f"trying to access key `{key}` of {a_type(value)}, not a record")


def get_index(value: Any, index: Any) -> Any:
    """`value[i]` for arrays (integer index) or `value["k"]` for records."""
    if type(index) is str:
        return get_key(value, index)
    if type(index) is not int:
        fail(f"an index must be an integer or a string, got {type_name(index)}")
    if type(value) is list:
        if 0 <= index < len(value):
            return value[index]
        fail(f"array index {index} out of bounds (length {len(value)})")
    fail(f"trying to index {a_type(value)} with an integer, not an array")


def get_range(value: Any, start: Any, end: Any) -> Any:
    """`value[start:end]`: a sub-array (or sub-string), end exclusive."""
    if type(start) is not int or type(end) is not int:
        fail("range bounds must be integers")
    if type(value) not in (list, str):
        fail(f"trying to slice {a_type(value)}, not an array")
    if not 0 <= start <= end <= len(value):
        fail(f"range {start}:{end} out of bounds (length {len(value)})")
    return value[start:end]


def range_present(value: Any, start: Any, end: Any) -> Any:
    """`present x[a:b]`: the slice when the bounds fit the array (or string), else MISSING."""
    bounds_ok = type(start) is int and type(end) is int and type(value) in (list, str)
    if bounds_ok and 0 <= start <= end <= len(value):
        return value[start:end]
    return MISSING


def unknown_name(name: str) -> NoReturn:
    """Reading a local that was never assigned (only reached in a branch that ran)."""
    fail(f"unknown name `{name}`")


def lookup(value: Any, key: Any) -> Any:
    """Like `get_index` but returns MISSING instead of failing (for `present`)."""
    if type(key) is str:
        return value.get(key, MISSING) if type(value) is dict else MISSING
    if type(key) is int and type(value) is list and 0 <= key < len(value):
        return value[key]
    return MISSING


# ---------------------------------------------------------------- binaries


class _BitWriter:
    """Bytes written bit by bit, most significant bit first, as Tremor packs binary segments."""

    __slots__ = ("out", "pending", "npending")

    def __init__(self) -> None:
        self.out = bytearray()
        self.pending = 0  # the bits not yet making a whole byte (fewer than 8)
        self.npending = 0

    def bits(self, value: int, width: int) -> None:
        total = (self.pending << width) | value
        count = self.npending + width
        spare = count % 8
        self.out += (total >> spare).to_bytes(count // 8, "big")
        self.pending, self.npending = total & ((1 << spare) - 1), spare

    def data(self, data: bytes) -> None:
        if self.npending:
            self.bits(int.from_bytes(data, "big"), 8 * len(data))
        else:
            self.out += data

    def result(self) -> bytes:
        """The bytes; bits left over form a last byte, right-aligned (Tremor's final flush)."""
        if self.npending:
            self.out.append(self.pending)
        return bytes(self.out)


def _swap_bytes(value: int, width: int) -> int:
    """A little-endian segment's bits: the value's bytes reversed, as Tremor does (any width)."""
    nbytes = (width + 7) // 8
    swapped = int.from_bytes((value & ((1 << (8 * nbytes)) - 1)).to_bytes(nbytes, "little"), "big")
    return swapped & ((1 << width) - 1)


def build_binary(*segments: tuple[Any, int | None, tuple[str, ...]]) -> bytes:
    """A binary literal's bytes: each (value, size, type) segment in order, packed bit by bit.

    The type is one of the parser's canonical tuples: `("binary",)` copies a
    string (utf-8) or binary, its first `size` bytes if given; `("unsigned",)`
    and `("signed",)` write an integer in `size` bits (8 by default), big-endian
    unless `"little"` follows. As in Tremor, an integer wider than its segment
    keeps its low bits, and an unsigned segment needs a non-negative integer.
    """
    writer = _BitWriter()
    for value, size, types in segments:
        kind = types[0]
        if kind == "binary":
            data = value.encode("utf-8") if type(value) is str else value
            if type(data) is not bytes:
                fail(f"a /binary segment needs a string or a binary, got {type_name(value)}")
            if size is not None:
                if len(data) < size:
                    fail(f"binary segment of {size} bytes, but the value has only {len(data)}")
                data = data[:size]
            writer.data(data)
            continue
        if type(value) is not int:
            fail(f"an integer segment needs an integer, got {type_name(value)}")
        if kind == "unsigned" and value < 0:
            fail(f"an unsigned integer segment needs a non-negative integer, got {value}")
        width = size or 8
        bits = value & ((1 << width) - 1)
        writer.bits(_swap_bytes(bits, width) if "little" in types else bits, width)
    return writer.result()


def match_binary(value: Any, segments: tuple[tuple[int | None, tuple[str, ...]], ...]) -> Any:
    """Cut a binary into segments for a binary pattern: their values, or MISSING when it does not fit.

    The exact inverse of `build_binary`: a binary matches when the segments
    account for every bit of it (a last byte holding fewer than 8 bits keeps
    them right-aligned, the rest zero), or when a last `/binary` without a size
    takes what is left.
    """
    if type(value) is not bytes:
        return MISSING
    rest = bool(segments) and segments[-1][1][0] == "binary" and segments[-1][0] is None
    fixed = segments[:-1] if rest else segments
    widths = [(size or 8) * (8 if types[0] == "binary" else 1) for size, types in fixed]
    total = sum(widths)
    stream = _bit_stream(value, total, rest)
    if stream is None:
        return MISSING
    out: list[Any] = []
    left = total
    for (_, types), width in zip(fixed, widths, strict=True):
        left -= width
        bits = (stream >> left) & ((1 << width) - 1)
        if types[0] == "binary":
            out.append(bits.to_bytes(width // 8, "big"))
            continue
        if "little" in types:
            bits = int.from_bytes(bits.to_bytes((width + 7) // 8, "big"), "little")
        if types[0] == "signed" and bits >> (width - 1):
            bits -= 1 << width
        out.append(bits)
    if rest:
        out.append(value[total // 8 :])
    return out


def _bit_stream(value: bytes, total: int, rest: bool) -> int | None:
    """The first `total` bits of `value` as one integer, or None when they cannot be its segments."""
    if rest:
        return int.from_bytes(value[: total // 8], "big") if total <= 8 * len(value) else None
    if (total + 7) // 8 != len(value):
        return None
    spare = total % 8
    if not spare:
        return int.from_bytes(value, "big")
    if value[-1] >> spare:
        return None  # bits a literal of these segments would have left zero
    return int.from_bytes(value[:-1], "big") << spare | value[-1]


# ---------------------------------------------------------------- strings


def to_text(value: Any) -> str:
    """How a value appears inside an interpolated string: strings verbatim, others as JSON."""
    if type(value) is str:
        return value
    return orjson.dumps(value).decode()


def interpolate(*parts: Any) -> str:
    return "".join(p if type(p) is str else to_text(p) for p in parts)


# ---------------------------------------------------------------- records


def copy_value(value: Any) -> Any:
    """A deep copy of containers (Tremor values are values, never shared references)."""
    t = type(value)
    if t is dict:
        return {k: copy_value(v) for k, v in value.items()}
    if t is list:
        return [copy_value(v) for v in value]
    return value


def merge(target: Any, patch: Any) -> Any:
    """Tremor's merge: two records merge key by key (a key the target lacks is added as it is);
    otherwise the patch replaces, so a null value sets the key to null (Tremor 0.12+, not RFC 7396)."""
    if type(patch) is not dict or type(target) is not dict:
        return copy_value(patch)
    out = dict(target)
    for key, value in patch.items():
        if key in out:
            out[key] = merge(out[key], value)
        else:
            out[key] = copy_value(value)
    return out


def apply_default(target: dict[str, Any], defaults: dict[str, Any]) -> None:
    """`patch ... of default => {...}`: add missing keys, recursing where both sides are records."""
    for key, value in defaults.items():
        if key not in target:
            target[key] = copy_value(value)
        elif type(target[key]) is dict and type(value) is dict:
            target[key] = dict(target[key])
            apply_default(target[key], value)


def merge_expr(target: Any, value: Any) -> Any:
    """`merge target of value end`: both sides must be records."""
    if type(target) is not dict or type(value) is not dict:
        fail(f"merge needs two records, got {type_name(target)} and {type_name(value)}")
    return merge(target, value)


def _patch_key(key: Any, op: str) -> str:
    if type(key) is not str:
        fail(f"patch '{op}' needs a string key, got {type_name(key)}")
    return key


def patch_start(target: Any) -> dict[str, Any]:
    if type(target) is not dict:
        fail(f"patch needs a record, got {type_name(target)}")
    return dict(target)


def patch_apply(rec: dict[str, Any], op: str, key: Any, value: Any) -> None:
    """Apply one patch operation to `rec` (a private copy of the patched record)."""
    if key is None:
        if type(value) is not dict:
            fail(f"patch '{op} =>' needs a record, got {type_name(value)}")
        if op == "merge":
            merged = merge(rec, value)
            rec.clear()
            rec.update(merged)
        else:  # default
            apply_default(rec, value)
        return
    k = _patch_key(key, op)
    if op == "insert":
        if k in rec:
            fail(f"patch insert: key `{k}` already exists")
        rec[k] = value
    elif op == "upsert":
        rec[k] = value
    elif op == "update":
        if k not in rec:
            fail(f"patch update: key `{k}` does not exist")
        rec[k] = value
    elif op == "erase":
        rec.pop(k, None)
    elif op == "merge":
        if k not in rec:
            rec[k] = merge({}, value)
        elif type(rec[k]) is dict and type(value) is dict:
            rec[k] = merge(rec[k], value)
        else:
            fail(f"patch merge: cannot merge {a_type(value)} into key `{k}`, which holds {a_type(rec[k])}")
    elif op == "default":
        rec.setdefault(k, value)
    elif op in ("copy", "move"):
        dest = _patch_key(value, op)
        if dest in rec:
            fail(f"patch {op}: key `{dest}` already exists")
        if k in rec:  # copying or moving a missing key does nothing
            rec[dest] = copy_value(rec[k])
            if op == "move":
                del rec[k]
    else:  # pragma: no cover - the parser only produces the ops above
        fail(f"unknown patch operation {op}")


# ---------------------------------------------------------------- iteration


def items_of(value: Any) -> Any:
    """(key, value) pairs for `for`: index/element for arrays, key/value for records.

    Anything else has no elements (Tremor yields the initial value, not an error).
    """
    if type(value) is list:
        return enumerate(value)
    if type(value) is dict:
        return list(value.items())
    return ()


_FOLD_LOGIC = {"and", "or", "xor"}


def fold_step(op: str, acc: Any, value: Any) -> Any:
    """One step of `for ... into acc use op end`.

    With `+`, an array accumulator gets the value appended and a record accumulator
    gets the value's fields (the value must be a record); other accumulators and
    operators combine the two values like the binary operator does.
    """
    t = type(acc)
    if t is list or t is dict:
        if op != "+":
            fail(f"cannot fold {a_type(acc)} with '{op}': only '+' folds into arrays and records")
        if t is list:
            acc.append(value)
        elif type(value) is dict:
            acc.update(value)
        else:
            fail(f"folding into a record needs record values, got {type_name(value)}")
        return acc
    if op in _FOLD_LOGIC:
        if type(acc) is not bool or type(value) is not bool:
            fail(f"'{op}' fold needs bool values, got {type_name(acc)} and {type_name(value)}")
        return {"and": acc and value, "or": acc or value, "xor": acc != value}[op]
    return BINARY[op](acc, value)


def array_pairs(arr: Any, pickers: tuple[Any, ...]) -> Any:
    """What `name = %[p1, p2]` binds: `[index, value]` for every element each pattern matched."""
    out: list[Any] = []
    for pick in pickers:
        for i, element in enumerate(arr):
            got = pick(element)
            if got is not MISSING:
                out.append([i, got])
    return out


def set_path(container: Any, keys: list[Any], value: Any) -> Any:
    """Assign `value` at `keys` inside `container` (creating records on the way); returns the root."""
    if not keys:
        return value
    if container is None:
        container = {}
    node = container
    for i, key in enumerate(keys):
        last = i == len(keys) - 1
        if type(node) is dict and type(key) is str:
            if last:
                node[key] = value
            else:
                nxt = node.get(key)
                if nxt is None:
                    nxt = node[key] = {}
                node = nxt
        elif type(node) is list and type(key) is int:
            if not 0 <= key < len(node):
                fail(f"array index {key} out of bounds (length {len(node)})")
            if last:
                node[key] = value
            else:
                node = node[key]
        else:
            fail(f"cannot assign to key `{key}` of {a_type(node)}")
    return container
