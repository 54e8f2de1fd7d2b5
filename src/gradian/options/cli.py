"""Typer commands whose options come from the options dataclasses: a field's flag, default and help are read from
the field, never typed again in a command's signature.

``@options_command(opts=AttributeOptions)`` on ``def cmd(..., opts: AttributeOptions)`` puts every command-line
field of :class:`AttributeOptions` where ``opts`` stands in the signature Typer reads, and calls ``cmd`` with
``opts`` built from them (so ``__post_init__`` checks the values). A group given as ``given(TrainOptions)`` passes a
dict of the flags that were given instead (their default shown in the help), for commands where a config file sits
between the defaults and the flags."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from gradian.options.base import Options


@dataclasses.dataclass(frozen=True)
class given:  # noqa: N801 - reads as a marker: given(TrainOptions)
    """A group passed as a dict of the flags that were given (the rest come from a config file or the defaults)."""

    cls: type[Options]


def cli_fields(cls: type[Options]) -> list[dataclasses.Field]:
    """The fields of ``cls`` that are command-line options."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True)]


def decls_of(f: dataclasses.Field) -> tuple[str, ...]:
    """The Typer parameter declarations of a field: ``("--format", "-f")``, ``("--eval-cut/--no-eval-cut",)``."""
    return tuple(f.metadata.get("decls") or (f.metadata.get("flag") or "--" + f.name.replace("_", "-"),))


def _cli_type(tp: Any) -> tuple[Any, bool]:
    """The type Typer parses for a field type, and whether it is a repeatable option (a tuple field)."""
    args = [a for a in typing.get_args(tp) if a is not type(None)] if _is_union(tp) else [tp]
    optional = _is_union(tp) and type(None) in typing.get_args(tp)
    if any(typing.get_origin(a) is tuple for a in args):
        return list[str] | None, True
    if Path in args:
        base: Any = Path
    elif len(args) == 1:
        base = args[0]
    else:  # e.g. list[str] | str: read as text, the options class parses it
        base = str
    return (base | None) if optional else base, False


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _default_text(v: Any) -> str:
    return "none" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def _parameters(cls: type[Options], partial: bool) -> list[inspect.Parameter]:
    hints = cls.types()
    out = []
    for f in cli_fields(cls):
        tp, _many = _cli_type(hints[f.name])
        text = str(f.metadata["help"])
        if partial:
            tp = tp if _is_union(tp) else tp | None
            default, text = None, f"{text} (default: {_default_text(f.default)})"
        else:
            default = None if isinstance(f.default, tuple) else f.default
        info = typer.Option(default, *decls_of(f), help=text, show_default=not partial, rich_help_panel=cls.panel)
        out.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=tp))
    return out


def _collect(cls: type[Options], partial: bool, kwargs: dict[str, Any]) -> Any:
    hints = cls.types()
    values = {}
    for f in cli_fields(cls):
        v = kwargs.pop(f.name)
        if _cli_type(hints[f.name])[1] and v is not None:
            v = tuple(v)
        values[f.name] = v
    if partial:
        return {k: v for k, v in values.items() if v is not None}
    return cls(**values)


def options_command(**groups: type[Options] | given) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a Typer command: each ``name=Cls`` parameter of the command becomes ``Cls``'s options."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        own = inspect.signature(fn, eval_str=True)
        params: list[inspect.Parameter] = []
        spec = {n: (g.cls, True) if isinstance(g, given) else (g, False) for n, g in groups.items()}
        for p in own.parameters.values():
            if p.name in spec:
                params += _parameters(*spec[p.name])
            else:
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))
        names = [p.name for p in params]
        clash = sorted({n for n in names if names.count(n) > 1})
        if clash or set(spec) - set(own.parameters):
            raise TypeError(
                f"{fn.__name__}: options clash or missing: {clash or sorted(set(spec) - set(own.parameters))}"
            )

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            built = {n: _collect(cls, partial, kwargs) for n, (cls, partial) in spec.items()}
            return fn(**kwargs, **built)

        del command.__wrapped__  # Typer reads the signature below, not fn's
        command.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {}
        command.options_groups = spec  # type: ignore[attr-defined]
        command.undecorated = fn  # type: ignore[attr-defined]
        return command

    return wrap
