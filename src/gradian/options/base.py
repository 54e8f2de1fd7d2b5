"""The base of every options dataclass: a field's default, help and CLI flag in one place, checked on construction.

Modelled on kronfluence's ``arguments.py`` and TRL's ``SFTConfig``: plain dataclasses whose fields carry
``metadata={"help": ...}``, validated in ``__post_init__``, saved as JSON beside the results and read back with
:meth:`Options.from_dict`. The Typer options are built from the same fields (:mod:`gradian.options.cli`)."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from gradian.errors import GradianError

OptionsT = TypeVar("OptionsT", bound="Options")


class OptionError(GradianError, ValueError):
    """A bad option value: one line naming the option and the fix (the CLI prints it and exits 2)."""


def option(default: Any, help: str, **meta: Any) -> Any:  # noqa: A002 - the dataclass metadata key
    """A dataclass field with its default and help text. ``meta``: ``flag`` (the CLI spelling, default ``--name``),
    ``cli`` (False: not a command-line option), ``choices`` (the allowed values), ``min`` (the least value)."""
    if isinstance(default, list | dict | set):
        raise TypeError("option(): use a tuple for a sequence default")
    return dataclasses.field(default=default, metadata={"help": help, **meta})


def flag_of(f: dataclasses.Field) -> str:
    """The command-line flag of a field (``--name`` unless the field says otherwise)."""
    return str(f.metadata.get("flag") or "--" + f.name.replace("_", "-")).split("/")[0]


def words(choices: Sequence[str]) -> str:
    """``a, b or c`` for up to three choices, else ``one of a, b, ...``."""
    if len(choices) <= 3:
        return ", ".join(choices[:-1]) + " or " + choices[-1] if len(choices) > 1 else choices[0]
    return "one of " + ", ".join(choices)


@dataclasses.dataclass(frozen=True)
class Options:
    """Base class: per-field checks from the metadata (``choices``, ``min``); subclasses add their own rules in
    ``_check`` (called by ``__post_init__``)."""

    name: ClassVar[str] = "options"
    panel: ClassVar[str | None] = None  # the --help panel its flags are listed under (None: the command's own)
    keywords: ClassVar[bool] = False  # given as Python keyword arguments (errors say ``name=value``), not flags

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            choices = f.metadata.get("choices")
            if choices is not None and value is not None and value not in choices:
                raise OptionError(f"unknown {self._spelled(f, value)}", fix=f"use {words(tuple(choices))}")
            least = f.metadata.get("min")
            if least is None or value is None:
                continue
            fix = f"pass {self._spelled(f, least)} or more"
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise OptionError(f"{self._spelled(f, value)} is not a number", fix=fix)
            if value < least:
                raise OptionError(f"{self._spelled(f, value)} is below {least}", fix=fix)
        self._check()

    def _spelled(self, f: dataclasses.Field, value: Any) -> str:
        """How the user wrote the option: ``--name value`` on the command line, ``name=value`` in Python."""
        return f"{f.name}={value!r}" if self.keywords else f"{flag_of(f)} {value!r}"

    def _check(self) -> None:
        """Rules between fields (one line each)."""

    @classmethod
    def help_of(cls, name: str) -> str:
        return str(cls.field(name).metadata["help"])

    @classmethod
    def field(cls, name: str) -> dataclasses.Field:
        return {f.name: f for f in dataclasses.fields(cls)}[name]

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)}

    @classmethod
    def types(cls) -> dict[str, Any]:
        """Each field's type (resolved annotations)."""
        return typing.get_type_hints(cls)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tuples become lists."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls: type[OptionsT], data: Mapping[str, Any] | None) -> OptionsT:
        """Read back what :meth:`to_dict` saved (keys this version does not know are ignored; missing keys get their
        default, so an older file without some options still loads)."""
        known = cls.field_names()
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in (data or {}).items() if k in known}
        return cls(**values)

    def replace(self: OptionsT, **changes: Any) -> OptionsT:
        """A copy with ``changes`` (one line for a name that is not an option)."""
        unknown = sorted(set(changes) - self.field_names())
        if unknown:
            raise OptionError(
                f"unknown {self.name} option {unknown[0]!r}", fix="use one of " + ", ".join(sorted(self.field_names()))
            )
        return dataclasses.replace(self, **changes)

    @classmethod
    def merged(cls: type[OptionsT], base: OptionsT | None = None, /, **changes: Any) -> OptionsT:
        """``base`` (default: every default) with ``changes``: the keyword form the Python API accepts."""
        return (base if base is not None else cls()).replace(**changes)


def split_kwargs(what: str, kwargs: Mapping[str, Any], *groups: tuple[type[Options], Options | None]) -> list[Any]:
    """The Python API's keyword form (``attribute(train=..., method="kfac")``): each group's fields of ``kwargs``
    applied over that group's given instance (or its defaults); one line for a name no group has."""
    names = [cls.field_names() for cls, _ in groups]
    unknown = sorted(set(kwargs) - set().union(*names))
    if unknown:
        fix = "use one of " + ", ".join(sorted(set().union(*names)))
        raise OptionError(f"unknown {what} option {unknown[0]!r}", fix=fix)
    pairs = zip(groups, names, strict=True)
    return [cls.merged(base, **{k: v for k, v in kwargs.items() if k in n}) for (cls, base), n in pairs]
