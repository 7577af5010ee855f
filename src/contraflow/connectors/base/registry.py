"""Which class implements a connector: built-in kinds, kinds of installed packages, and `python` connectors.

A created connector's kind is looked up in this order:

- a built-in kind: `contraflow/connectors/<kind>.py`, registered with `@register("kind")`;
- a kind an installed package declares with an entry point in the group
  `contraflow.connectors` (its name is the kind, its object a `Connector` subclass);
- `python`: the class named by `config.class` (`"MODULE:CLASS"`), looked up next
  to the flow file, on CONTRAFLOW_PATH, then on sys.path (`contraflow.user_modules`);
  the rest of `config` is the class's, checked by its own `check_config`.

Plugin classes are imported when a flow naming them is compiled (checked or
deployed), so a missing module or class is reported at the flow's `config`.
Inside `plugins_refused(why)` (a flow deployed over the API under a path
policy) no plugin is imported or used: the code they run could do what the
policy forbids, e.g. import a module a `file` sink just wrote.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from contraflow.connectors.base.connector import Connector
from contraflow.connectors.base.options import ConnectorConfigError
from contraflow.errors import UserError
from contraflow.lang.graph import ConnectorSpec
from contraflow.user_modules import (
    ENTRY_POINT_GROUP,
    UserModuleNotFound,
    import_user_module,
    search_directories,
)

# The kind whose class a flow names itself, in `config.class`.
PYTHON_KIND = "python"
CLASS_KEY = "class"

_REGISTRY: dict[str, type[Connector]] = {}
_INSTALLED: set[str] = set()  # kinds registered from an entry point
_REFUSED: ContextVar[str | None] = ContextVar("contraflow_plugins_refused", default=None)
C = TypeVar("C", bound=type[Connector])


class PluginLoadError(UserError):
    """An installed package's connector kind could not be loaded (import failed, not a Connector)."""


def register(kind: str) -> Callable[[C], C]:
    """Class decorator: make `cls` the implementation of connector `kind`."""

    def decorate(cls: C) -> C:
        cls.kind = kind
        _REGISTRY[kind] = cls
        return cls

    return decorate


def connector_class(kind: str) -> type[Connector]:
    """The class implementing `kind`: built in (`contraflow.connectors.<kind>`, imported on first use),
    else an installed package's entry point."""
    if kind not in _REGISTRY:
        try:
            importlib.import_module(f"contraflow.connectors.{kind}")
        except ModuleNotFoundError as err:
            if err.name != f"contraflow.connectors.{kind}":
                raise
    if kind not in _REGISTRY:
        _refuse_plugin(kind)
        installed = _entry_point_class(kind)
        if installed is not None:
            register(kind)(installed)
            _INSTALLED.add(kind)
    if kind not in _REGISTRY:
        raise UserError(f"connector kind '{kind}' is not available in this runtime")
    return _REGISTRY[kind]


def registered_kinds() -> list[str]:
    """Kinds imported so far (for diagnostics)."""
    return sorted(_REGISTRY)


@contextmanager
def plugins_refused(why: str) -> Iterator[None]:
    """Within this context (and tasks and threads started from it) connector kinds from outside
    contraflow are errors, reported with `why`, and nothing of theirs is imported."""
    token = _REFUSED.set(why)
    try:
        yield
    finally:
        _REFUSED.reset(token)


def _refuse_plugin(kind: str) -> None:
    why = _REFUSED.get()
    if why is not None:
        raise PluginLoadError(f"kind '{kind}' comes from outside contraflow and is refused here: {why}")


def connector_for(spec: ConnectorSpec) -> tuple[type[Connector], dict[str, Any]]:
    """The class implementing a created connector, and the `config` its instances get.

    Raises `ConnectorConfigError` naming the connector when a plugin class cannot be had.
    """
    try:
        if spec.kind == PYTHON_KIND:
            _refuse_plugin(spec.kind)
            return _python_class(spec), {k: v for k, v in spec.config.items() if k != CLASS_KEY}
        if spec.kind in _INSTALLED:
            _refuse_plugin(spec.kind)
        return connector_class(spec.kind), spec.config
    except PluginLoadError as err:
        raise ConnectorConfigError(f"connector '{spec.alias}' ({spec.kind}): {err}") from None


def check_connector(cls: type[Connector], alias: str, config: Mapping[str, Any]) -> None:
    """`cls.check_config(alias, config)`, where a plugin's own check failing with any exception
    is reported as this connector's config error rather than a crash of the compiler or runtime."""
    try:
        cls.check_config(alias, config)
    except UserError:
        raise
    except Exception as err:
        raise ConnectorConfigError(
            f"connector '{alias}' ({cls.kind}): its check_config failed: {type(err).__name__}: {err}"
        ) from err


def _entry_point_class(kind: str) -> type[Connector] | None:
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=kind):
        where = f"entry point '{kind} = {entry_point.value}'"
        try:
            loaded = entry_point.load()
        except Exception as err:
            raise PluginLoadError(f"loading {where} failed: {type(err).__name__}: {err}") from err
        if not _is_connector_class(loaded):
            raise PluginLoadError(f"{where} is not a subclass of contraflow.connectors.Connector")
        return loaded
    return None


def _python_class(spec: ConnectorSpec) -> type[Connector]:
    """The class `config.class` names, imported; every problem names the `class` key (where errors point)."""
    what = f"connector '{spec.alias}' ({PYTHON_KIND})"
    ref = spec.config.get(CLASS_KEY)
    if ref is None:
        raise ConnectorConfigError(f"{what}: missing config key '{CLASS_KEY}' (\"MODULE:CLASS\")")
    module_name, _, class_name = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not module_name or not class_name.isidentifier():
        raise ConnectorConfigError(
            f'{what}: config key \'{CLASS_KEY}\' must be "MODULE:CLASS" (e.g. "my_sink:MySink"), not {ref!r}'
        )
    directory = Path(spec.directory) if spec.directory else None
    try:
        module = import_user_module(module_name, search_directories(directory))
    except UserModuleNotFound as err:
        raise ConnectorConfigError(f"{what}: config key '{CLASS_KEY}': {err}") from None
    except Exception as err:
        raise ConnectorConfigError(
            f"{what}: config key '{CLASS_KEY}': importing module '{module_name}' failed: "
            f"{type(err).__name__}: {err}"
        ) from err
    found = getattr(module, class_name, None)
    if found is None:
        raise ConnectorConfigError(
            f"{what}: config key '{CLASS_KEY}': module '{module_name}' ({module.__file__}) "
            f"has no class '{class_name}'"
        )
    if not _is_connector_class(found):
        raise ConnectorConfigError(
            f"{what}: config key '{CLASS_KEY}': '{ref}' is not a subclass of contraflow.connectors.Connector"
        )
    if not found.kind:  # how messages about the class name it; a registered kind keeps its own name
        found.kind = PYTHON_KIND
    return found


def _is_connector_class(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, Connector)
