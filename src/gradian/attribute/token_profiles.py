"""Where each top row's harm sits, by token: the evidence the verdict reads to find a defect's rows by its tokens.

A row's harm splits over its label tokens (:mod:`gradian.attribute.tokens`). For the ``--token-profiles`` share of
the rows, most harmful first, a profile keeps the row's positive harm and the few token strings that carry most of it,
case and surrounding space ignored (" He" and "he" are one key; a token that is only space, as SentencePiece puts
before a word it has no piece for, counts as the token after it). For each of those keys it also counts the scored
rows that hold the key among their label tokens. :mod:`gradian.verdict.harm_tokens` reads them: a flipped pronoun or
a renamed entity puts a group's harm on a few tokens, and rows outside the group whose harm sits on the same tokens
are the defect's rows whose harm alone did not stand out. No torch here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

KEYS_PER_ROW = 8  # token keys kept per row, most positive harm first (the rest is in the row's total)


def token_key(text: str) -> str:
    """A token's text without case or surrounding space (the text itself when only space is left)."""
    return text.strip().lower() or text


@dataclass
class ProfileNeed:
    """What the verdict's ``tokens`` step reads of the profiles (:func:`gradian.verdict.harm_tokens.extend_by_tokens`):
    the rows of the groups it extends (training-file indices) and the share of a group's harm its tokens must carry
    (``token_share``). A row that holds none of those groups' harm tokens among its label tokens has none of its harm
    there: it can neither join nor leave a group, and needs no profile."""

    groups: list[list[int]]
    share: float


@dataclass
class TokenProfiles:
    """Profiled rows and how common their harm tokens are. Saved as ``token_profiles.json`` beside report.json.
    ``keys``: the harm tokens the profiles were taken for (:class:`ProfileNeed`); the profiled share's rows that hold
    none of them have no profile. None: every row of the share has one."""

    rows: dict[int, tuple[float, dict[str, float]]]  # training row -> (positive harm, {token key: positive harm})
    holders: dict[str, int]  # token key -> scored rows whose label tokens hold it
    keys: list[str] | None = None

    def covers(self, keys: Iterable[str]) -> bool:
        """Whether every profiled-share row holding one of ``keys`` has a profile."""
        return self.keys is None or set(keys) <= set(self.keys)

    def share_on(self, row: int, keys: Iterable[str]) -> float:
        """The share of ``row``'s positive harm that sits on ``keys`` (0 for a row without a profile)."""
        total, by_key = self.rows.get(row, (0.0, {}))
        return sum(by_key.get(k, 0.0) for k in keys) / total if total > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [
                {"index": r, "positive": p, "tokens": [[k, h] for k, h in ks.items()]}
                for r, (p, ks) in sorted(self.rows.items())
            ],  # fmt: skip
            "holders": dict(sorted(self.holders.items())),
            "keys": self.keys,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenProfiles:
        rows = {
            int(r["index"]): (float(r["positive"]), {str(k): float(h) for k, h in r["tokens"]})
            for r in data.get("rows") or []
        }
        keys = data.get("keys")
        holders = {str(k): int(n) for k, n in (data.get("holders") or {}).items()}
        return cls(rows, holders, None if keys is None else [str(k) for k in keys])


def row_profile(keys: Sequence[str], harms: np.ndarray) -> tuple[float, dict[str, float]]:
    """(positive harm, the ``KEYS_PER_ROW`` keys with the most positive harm) of one row's label tokens."""
    by_key: dict[str, float] = {}
    for k, h in zip(keys, np.asarray(harms, dtype=np.float64).tolist(), strict=True):
        if h > 0:
            by_key[k] = by_key.get(k, 0.0) + h
    top = sorted(by_key.items(), key=lambda kv: -kv[1])[:KEYS_PER_ROW]
    return sum(by_key.values()), dict(top)


def harm_tokens(rows: Sequence[int], profiles: TokenProfiles, share: float) -> list[str]:
    """The fewest token keys that carry ``share`` of ``rows``' positive harm, most harmful first; [] when that takes
    more keys than a profile keeps per row (``KEYS_PER_ROW``: the harm is not on a few tokens) or the kept keys never
    reach it."""
    total = 0.0
    by_key: dict[str, float] = {}
    for r in rows:
        positive, keys = profiles.rows.get(int(r), (0.0, {}))
        total += positive
        for k, h in keys.items():
            by_key[k] = by_key.get(k, 0.0) + h
    picked, acc = [], 0.0
    for k, h in sorted(by_key.items(), key=lambda kv: (-kv[1], kv[0])):
        if total <= 0 or acc >= share * total:
            break
        picked.append(k)
        acc += h
    return picked if total > 0 and acc >= share * total and len(picked) <= KEYS_PER_ROW else []


class KeyOf:
    """Token id -> key, decoding each id once."""

    def __init__(self, decode: Callable[[int], str]) -> None:
        self._decode = decode
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        k = self._cache.get(token_id)
        if k is None:
            k = self._cache[token_id] = token_key(self._decode(token_id))
        return k


def label_ids(fx: Any) -> np.ndarray:
    """The label token ids of a formatted row (the tokens its loss mask keeps, as the model predicts them)."""
    ids = np.asarray(fx.input_ids)
    mask = np.asarray(fx.loss_mask, dtype=bool)
    return ids[1:][mask[1:]]


def row_keys(ids: Sequence[int], key_of: KeyOf) -> list[str]:
    """The key of each of a row's label tokens; a token that is only space takes the key of the token after it (the
    word it starts: "▁" + "Z" of a name without a piece of its own is "z", not the space every such word shares)."""
    keys = [key_of(int(t)) for t in ids]
    for i in range(len(keys) - 2, -1, -1):
        if not keys[i].strip():
            keys[i] = keys[i + 1]
    return keys


def count_holders(rows: Iterable[Any], key_of: KeyOf, keys: set[str]) -> dict[str, int]:
    """For each key in ``keys``: how many of ``rows`` (formatted rows) hold it among their label tokens."""
    counts = dict.fromkeys(keys, 0)
    for fx in rows:
        held = set(row_keys(label_ids(fx).tolist(), key_of)) & keys
        for k in held:
            counts[k] += 1
    return counts
