"""The base of report.json's typed objects whose keys are open: typed fields, the keys this version does not type
kept as they are, and the keys written back in the order they were read (so a report.json read and written again is
the same file)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

RecordT = TypeVar("RecordT", bound="Record")


def plain(v: Any) -> Any:
    """A schema value as report.json holds it: typed objects through their ``to_dict``, containers element-wise."""
    if hasattr(v, "to_dict"):
        return v.to_dict()
    if isinstance(v, list | tuple):
        return [plain(x) for x in v]
    if isinstance(v, Mapping):
        return {k: plain(x) for k, x in v.items()}
    return v


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
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in ("extra", "order"))

    @classmethod
    def default_of(cls, name: str) -> Any:
        """A field's default (``dataclasses.MISSING`` for a required one)."""
        f = next(f for f in dataclasses.fields(cls) if f.name == name)
        return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default

    def to_dict(self) -> dict[str, Any]:
        names = self.typed()
        out: dict[str, Any] = {}
        for k in (*self.order, *names, *self.extra):
            if k in out:
                continue
            if k in names:
                v = getattr(self, k)
                if k in self.order or k in self.ALWAYS or v != self.default_of(k):
                    out[k] = plain(v)
            elif k in self.extra:
                out[k] = self.extra[k]
        return out

    def set(self, **values: Any) -> None:
        """Set typed fields and mark them written (as a dict key set to None is still a key)."""
        for k, v in values.items():
            setattr(self, k, v)
        self.order += tuple(k for k in values if k not in self.order)

    def forget(self, keys: Iterable[str]) -> None:
        """Drop ``keys`` as if they had never been set (the derived keys, before they are derived again)."""
        drop = set(keys)
        self.order = tuple(k for k in self.order if k not in drop)
        self.extra = {k: v for k, v in self.extra.items() if k not in drop}
        for k in drop & set(self.typed()):
            setattr(self, k, self.default_of(k))

    @classmethod
    def _read(cls: type[RecordT], data: Mapping[str, Any], **typed: Any) -> RecordT:
        """``cls`` with the typed values given, every other key of ``data`` in ``extra``, and ``data``'s key order."""
        extra = {k: v for k, v in data.items() if k not in typed}
        return cls(**typed, extra=extra, order=tuple(str(k) for k in data))
