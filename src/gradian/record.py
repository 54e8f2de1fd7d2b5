"""The base of report.json's typed objects whose keys are open: typed fields, the keys this version does not type
kept as they are, and the keys written back in the order they were read (so a report.json read and written again is
the same file)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

RecordT = TypeVar("RecordT", bound="Record")


def plain(v: Any) -> Any:
    """A schema value as report.json holds it: a typed object (or a list of them) through its ``to_dict``; other
    values (numbers, text, free-form lists and dicts) as they are, not copied."""
    if hasattr(v, "to_dict"):
        return v.to_dict()
    if isinstance(v, list) and v and hasattr(v[0], "to_dict"):
        return [x.to_dict() for x in v]
    return v


_FIELDS: dict[type, dict[str, Any]] = {}  # per Record class: typed field name -> default (MISSING when required)
_FACTORIES: dict[type, dict[str, Any]] = {}  # per Record class: field name -> a fresh default


def _fields_of(cls: type) -> dict[str, Any]:
    if cls not in _FIELDS:
        fresh: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in ("extra", "order"):
                factory = f.default_factory
                fresh[f.name] = factory if callable(factory) else (lambda d=f.default: d)
        _FACTORIES[cls] = fresh
        _FIELDS[cls] = {name: make() for name, make in fresh.items()}
    return _FIELDS[cls]


@dataclass
class Record:
    """A report.json object with typed fields and open keys. ``to_dict`` writes the keys it was read with (in that
    order), then the typed fields that differ from their default (or are ``ALWAYS`` written), then ``extra``;
    :meth:`set` sets a field as a dict sets a key (it is written even when None)."""

    ALWAYS: ClassVar[frozenset[str]] = frozenset()

    extra: dict[str, Any] = field(default_factory=dict, kw_only=True, repr=False)
    order: tuple[str, ...] = field(default=(), kw_only=True, repr=False, compare=False)

    @classmethod
    def typed(cls) -> tuple[str, ...]:
        return tuple(_fields_of(cls))

    @classmethod
    def default_of(cls, name: str) -> Any:
        """A field's default (``dataclasses.MISSING`` for a required one; a shared instance: copy before changing)."""
        return _fields_of(cls)[name]

    def to_dict(self) -> dict[str, Any]:
        fields = _fields_of(type(self))
        out: dict[str, Any] = {}
        for k in self.order:
            if k in fields:
                out[k] = plain(getattr(self, k))
            elif k in self.extra:
                out[k] = self.extra[k]
        for k, default in fields.items():
            if k not in out:
                v = getattr(self, k)
                if k in self.ALWAYS or v is not default and v != default:
                    out[k] = plain(v)
        for k, v in self.extra.items():
            if k not in out:
                out[k] = v
        return out

    def set(self, **values: Any) -> None:
        """Set typed fields and mark them written (as a dict key set to None is still a key)."""
        for k, v in values.items():
            setattr(self, k, v)
        self.order += tuple(k for k in values if k not in self.order)

    def forget(self, keys: Collection[str]) -> None:
        """Drop ``keys`` as if they had never been set (the derived keys, before they are derived again)."""
        if any(k in keys for k in self.order):
            self.order = tuple(k for k in self.order if k not in keys)
        if any(k in self.extra for k in keys):
            self.extra = {k: v for k, v in self.extra.items() if k not in keys}
        defaults = _fields_of(type(self))
        for k in keys:
            if k in defaults:
                v = getattr(self, k)
                if v is not defaults[k] and v != defaults[k]:
                    setattr(self, k, _FACTORIES[type(self)][k]())

    @classmethod
    def _read_as_is(cls: type[RecordT], data: Mapping[str, Any], **converted: Any) -> RecordT:
        """:meth:`_read` with every typed field as ``data`` holds it (None when missing), but the ``converted``
        ones."""
        return cls._read(data, **({k: data.get(k) for k in cls.typed()} | converted))

    @classmethod
    def _read(cls: type[RecordT], data: Mapping[str, Any], **typed: Any) -> RecordT:
        """``cls`` with the typed values given, every other key of ``data`` in ``extra``, and ``data``'s key order."""
        extra = {k: v for k, v in data.items() if k not in typed}
        return cls(**typed, extra=extra, order=tuple(data))
