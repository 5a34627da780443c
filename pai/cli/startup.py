"""What typer would load on every `pai` call and a call seldom needs, left until it is needed.

Every `pai` call is a new interpreter, so each import is paid by each call. Two of typer's own
cost more than the rest of a plain call (bench/cli_bench.py measures them):

- typer converts each parameter of the command run through a pydantic ``TypeAdapter`` built for
  it: pydantic's import and the adapters cost `pai job list` about a third of its CPU time.
  ``quick_parameters`` gives each parameter of the types the commands use (str, bool, int, float, a
  path, a list of str) a converter that takes the common values (a plain string, a number
  written plainly, a default of the parameter's own type) as typer would, and hands any other
  value, a number outside its range included, to typer's own converter, built then, so that what
  a user sees for a bad value is typer's message word for word.
- typer's help formatter (``typer.rich_utils``) imports rich's Markdown renderer (markdown-it)
  and rich's traceback (pygments, attrs) at its top, for a markup mode the commands do not use
  and for an unexpected error's traceback: half of `pai --help`. While it is imported, those two
  modules are stand-ins whose class loads the real module on its first use.

tests/unit/test_cli_startup.py holds the converters equal to typer's on the values the commands
take (and on bad ones), the help unchanged, and the imports gone.
"""

from __future__ import annotations

import importlib
import re
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:  # a typer that converts parameters through pydantic (0.29 here); older ones use click's types.
    from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    from typer._param_types import coerce_cli_path, lenient_issubclass, routes_to_path
    from typer.core import _TyperParameter

    PYDANTIC_CONVERTERS = True
except ImportError:  # pragma: no cover - another typer
    PYDANTIC_CONVERTERS = False

if TYPE_CHECKING:
    from typer import _click as click

# Numbers the quick converters take, written plainly: no sign but "-", no leading zero, space,
# underscore or exponent. Any other string goes to typer's converter, which says what is wrong.
_INT = re.compile(r"-?[1-9][0-9]{0,17}|0")
_FLOAT = re.compile(r"-?(?:[1-9][0-9]{0,14}|0)(?:\.[0-9]{1,15})?")


class Slow(Exception):
    """The value is not one the quick converter takes: typer's own converts it."""


Quick = Callable[[Any, "click.Parameter", "click.Context"], Any]


def _str(value: Any, param: click.Parameter, ctx: click.Context) -> Any:
    if type(value) is str:
        return value
    raise Slow


def _bool(value: Any, param: click.Parameter, ctx: click.Context) -> Any:
    if type(value) is bool:
        return value
    raise Slow


def _str_list(value: Any, param: click.Parameter, ctx: click.Context) -> Any:
    if isinstance(value, list | tuple) and all(type(item) is str for item in value):
        return list(value)
    raise Slow


def _in_range(number: float, low: float | None, high: float | None) -> bool:
    return (low is None or number >= low) and (high is None or number <= high)


def _number(kind: type[int] | type[float], low: float | None, high: float | None) -> Quick:
    written = _INT if kind is int else _FLOAT
    # As typer's converter takes them: a number written plainly, one of the kind, an int for a float.
    taken = (kind, int) if kind is float else (kind,)

    def convert(value: Any, param: click.Parameter, ctx: click.Context) -> Any:
        if not (type(value) in taken or (type(value) is str and written.fullmatch(value))):
            raise Slow
        number = kind(value)
        if not _in_range(number, low, high):
            raise Slow
        return number

    return convert


def _path(descriptor: TypeDescriptor, path_type: type[Path]) -> Quick:
    info = descriptor.parameter_info

    def convert(value: Any, param: click.Parameter, ctx: click.Context) -> Any:
        if type(value) is not str or not value or "\0" in value:
            raise Slow
        assert isinstance(param, _TyperParameter)
        # typer makes the path with pydantic, as path_type(value), then checks it.
        return coerce_cli_path(path_type(value), info, path_type=path_type, param=param, ctx=ctx)

    return convert


def quick_converter(descriptor: TypeDescriptor) -> Quick | None:
    """The quick converter for a parameter typer describes so, or None where typer's is needed."""
    info = descriptor.parameter_info
    annotation = descriptor.annotation
    if info.parser is not None or descriptor.is_file or descriptor.is_choice:
        return None
    if annotation is str:
        return _str
    if annotation is bool:
        return _bool
    if annotation is int or annotation is float:
        if info.clamp:
            return None
        return _number(int if annotation is int else float, info.min, info.max)
    if descriptor.is_list and annotation == list[str]:
        return _str_list
    if lenient_issubclass(annotation, Path) and routes_to_path(annotation, info):
        path_type = info.path_type or annotation
        if isinstance(path_type, type) and issubclass(path_type, Path):
            return _path(descriptor, path_type)
    return None


if PYDANTIC_CONVERTERS:

    @dataclass(frozen=True)
    class QuickParam(RuntimeParam):
        """A parameter's converter: the quick one where it takes the value, else typer's."""

        descriptor: TypeDescriptor
        quick: Quick

        def _coerce_value(self, value: Any, param: _TyperParameter, ctx: click.Context) -> Any:
            try:
                return self.quick(value, param, ctx)
            except Slow:
                pass
            full = build_runtime_param(self.descriptor)
            param._runtime_param = full
            return full._coerce_value(value, param=param, ctx=ctx)


def _runtime_param(param: _TyperParameter) -> RuntimeParam:
    """typer's ``_TyperParameter.get_runtime_param``, a quick converter first where one fits."""
    if param._runtime_param is None:
        descriptor = param.type_descriptor
        quick = quick_converter(descriptor)
        if quick is None:
            param._runtime_param = build_runtime_param(descriptor)
        else:
            param._runtime_param = QuickParam(
                parameter_info=descriptor.parameter_info,
                annotation=descriptor.annotation,
                descriptor=descriptor,
                quick=quick,
            )
    return param._runtime_param


def quick_parameters() -> None:
    """Every typer parameter (a command's, a group's, a help option) converts its value with a
    quick converter where one fits, typer's own otherwise. typer builds a parameter's converter
    when the parameter's value is first read, even when there is none to convert (an option not
    given, a help option not asked for): this is where it does."""
    if PYDANTIC_CONVERTERS:
        _TyperParameter.get_runtime_param = _runtime_param  # type: ignore[method-assign,assignment]


# Modules typer's help formatter imports at its top and uses only for a markup mode the commands
# do not use (Markdown) and for an unexpected error's traceback (Traceback).
DEFERRED_BY_HELP = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}
HELP_FORMATTER = "typer.rich_utils"


class _LoadedOnUse(type):
    """A stand-in class: calling it or reading its attributes loads and uses the real one."""

    real_module: str
    real_name: str

    def real(cls) -> Any:
        return getattr(importlib.import_module(cls.real_module), cls.real_name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.real()(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        return getattr(cls.real(), name)


@contextmanager
def _stand_ins() -> Iterator[None]:
    placed = {}
    for module_name, class_name in DEFERRED_BY_HELP.items():
        if module_name in sys.modules:
            continue
        module = types.ModuleType(module_name)
        stand_in = _LoadedOnUse(class_name, (), {"real_module": module_name, "real_name": class_name})
        setattr(module, class_name, stand_in)
        placed[module_name] = sys.modules[module_name] = module
    try:
        yield
    finally:
        for module_name, module in placed.items():
            if sys.modules.get(module_name) is module:
                del sys.modules[module_name]


class _HelpFormatterLoader:
    """Runs the help formatter's module with the stand-ins in place."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        module: types.ModuleType | None = self.loader.create_module(spec)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        with _stand_ins():
            self.loader.exec_module(module)


class HelpFormatterFinder:
    """On sys.meta_path: finds typer's help formatter as the others do, to load it as above."""

    @classmethod
    def find_spec(cls, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname != HELP_FORMATTER:
            return None
        for finder in sys.meta_path:
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec: ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HelpFormatterLoader(spec.loader)  # type: ignore[assignment]
                return spec
        return None


def defer_help_imports() -> None:
    """Load typer's help formatter, when a call needs it, without Markdown and Traceback."""
    if HELP_FORMATTER not in sys.modules and HelpFormatterFinder not in sys.meta_path:
        sys.meta_path.insert(0, HelpFormatterFinder)


def lighten() -> None:
    """Both of the above, for the process: `pai` calls it as it starts."""
    quick_parameters()
    defer_help_imports()
