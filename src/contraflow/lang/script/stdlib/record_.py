"""`record::` functions."""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import register_sizes, want
from contraflow.lang.script.values import fail, merge

register_sizes("record", dict)


@tremor_fn("record::contains")
def contains(r: Any, key: Any) -> bool:
    return want(key, str, "record::contains", "key") in want(r, dict, "record::contains")


@tremor_fn("record::keys")
def keys(r: Any) -> list[str]:
    return list(want(r, dict, "record::keys"))


@tremor_fn("record::values")
def values_(r: Any) -> list[Any]:
    return list(want(r, dict, "record::values").values())


@tremor_fn("record::to_array")
def to_array(r: Any) -> list[list[Any]]:
    return [[k, v] for k, v in want(r, dict, "record::to_array").items()]


@tremor_fn("record::from_array")
def from_array(a: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in want(a, list, "record::from_array"):
        if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str:
            fail("record::from_array: expects an array of [key, value] pairs with string keys")
        out[pair[0]] = pair[1]
    return out


@tremor_fn("record::select")
def select(r: Any, names: Any) -> dict[str, Any]:
    """Only the listed keys."""
    wanted = set(want(names, list, "record::select", "keys"))
    return {k: v for k, v in want(r, dict, "record::select").items() if k in wanted}


@tremor_fn("record::extract")
def extract(r: Any, names: Any) -> dict[str, Any]:
    return select(r, names)


@tremor_fn("record::remove")
def remove(r: Any, names: Any) -> dict[str, Any]:
    """Every key but the listed ones."""
    unwanted = set(want(names, list, "record::remove", "keys"))
    return {k: v for k, v in want(r, dict, "record::remove").items() if k not in unwanted}


@tremor_fn("record::rename")
def rename(r: Any, renames: Any) -> dict[str, Any]:
    mapping = want(renames, dict, "record::rename", "renames")
    return {mapping.get(k, k): v for k, v in want(r, dict, "record::rename").items()}


@tremor_fn("record::merge")  # Tremor's library name for its `record::combine` intrinsic
@tremor_fn("record::combine")
def combine(a: Any, b: Any) -> dict[str, Any]:
    """Deep merge of two records (keys of `b` win)."""
    result: dict[str, Any] = merge(want(a, dict, "record::combine"), want(b, dict, "record::combine"))
    return result
