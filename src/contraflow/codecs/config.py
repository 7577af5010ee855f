"""Reading codec and processor specs as Troy writes them, with errors that name the bad key.

A spec is a bare name (`"json"`) or a record `{"name": "json", "config": {...}}`.
Each codec or processor declares its options as a frozen dataclass; the
dataclass fields *are* the list of valid keys and their types, so the error
messages, the defaults and the documentation cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Self, TypeVar, Union

from contraflow.codecs.errors import ConfigError, unknown

Spec = str | Mapping[str, Any]
"""How Troy names a codec or processor: `"name"` or `{"name": ..., "config": {...}}`."""

_SPEC_KEYS = ("name", "config")

T = TypeVar("T")
OptionsT = TypeVar("OptionsT")


@dataclass(frozen=True)
class NoOptions:
    """For codecs and processors that take no config: any key given is reported as unknown."""


class Configured(Generic[OptionsT]):
    """A codec or processor built from an options dataclass: `class X(Preprocessor[XOptions])`.

    The type argument names the options dataclass once: it becomes `Options`
    (what `from_config` validates a raw Troy config into) and the type of
    `self.options`. Instances pickle as their options (Spark ships codecs to
    worker processes), never as their buffers or precompiled state, which
    `setup` rebuilds; so a kind overrides `setup`, never `__init__`.
    """

    name: ClassVar[str]
    kind: ClassVar[str]
    Options: ClassVar[type[Any]] = NoOptions
    options: OptionsT

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            for argument in typing.get_args(base):
                if isinstance(argument, type):
                    cls.Options = argument

    def __init__(self, options: OptionsT | None = None) -> None:
        self.options = self.Options() if options is None else options
        self.setup()

    def setup(self) -> None:
        """Build per-instance state from `self.options` (buffers, precompiled calls); most kinds need none."""

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> Self:
        return cls(load_options(cls.Options, raw, kind=cls.kind, name=cls.name))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.options,))


class BadValue(ValueError):
    """Raised by an options dataclass's `__post_init__` to reject one key's value."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key
        self.reason = reason


def parse_spec(spec: object, kind: str) -> tuple[str, Mapping[str, Any]]:
    """Split a spec into its name and its config mapping (empty when not given)."""
    if isinstance(spec, str):
        return spec, {}
    if not isinstance(spec, Mapping):
        raise ConfigError(
            f"a {kind} must be a name or a record with 'name' and 'config', got {_describe(spec)}",
            kind=kind,
        )
    extra = [key for key in spec if key not in _SPEC_KEYS]
    if extra:
        raise ConfigError(
            f"{kind} record: " + unknown("key", str(extra[0]), _SPEC_KEYS), kind=kind, key=str(extra[0])
        )
    name = spec.get("name")
    if not isinstance(name, str):
        raise ConfigError(f"{kind} record needs a string 'name', got {_describe(name)}", kind=kind)
    config = spec.get("config")
    if config is None:
        return name, {}
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"{kind} {name!r}: 'config' must be a record, got {_describe(config)}", kind=kind, name=name
        )
    return name, config


def resolve(spec: object, kind: str, registry: Mapping[str, Callable[[Mapping[str, Any]], T]]) -> T:
    """Build the codec or processor a spec names, or explain which names exist."""
    name, config = parse_spec(spec, kind)
    factory = registry.get(name)
    if factory is None:
        raise ConfigError(unknown(kind, name, registry), kind=kind, name=name, valid=sorted(registry))
    return factory(config)


def load_options(cls: type[T], raw: Mapping[str, Any], *, kind: str, name: str) -> T:
    """Check `raw` against the options dataclass `cls` (keys, types, values) and build it."""
    fields = {field.name for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    where = f"{kind} {name!r}"
    for key, value in raw.items():
        if key not in fields:
            raise ConfigError(
                f"{where}: " + unknown("config key", str(key), fields),
                kind=kind,
                name=name,
                key=str(key),
                valid=sorted(fields),
            )
        if not _accepts(hints[key], value):
            raise ConfigError(
                f"{where}: config key {key!r} must be {_expected(hints[key])}, got {_describe(value)}",
                kind=kind,
                name=name,
                key=key,
            )
    try:
        return cls(**raw)
    except BadValue as err:
        raise ConfigError(
            f"{where}: config key {err.key!r} {err.reason}", kind=kind, name=name, key=err.key
        ) from None


def _accepts(hint: Any, value: object) -> bool:
    if typing.get_origin(hint) in (Union, types.UnionType):
        return any(_accepts(arg, value) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, hint)


_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", type(None): "null"}


def _expected(hint: Any) -> str:
    if typing.get_origin(hint) in (Union, types.UnionType):
        return " or ".join(_expected(arg) for arg in typing.get_args(hint))
    return _NAMES.get(hint, getattr(hint, "__name__", str(hint)))


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"
