"""Token log-probabilities the eval generation computed, read again instead of recomputed.

Greedy generation scores every token it writes (the log-probability of its choice at each step), and the departure
check (:func:`gradian.attribute.generate.departures`) teacher-forces the fine-tune over the same tokens. The eval NLL
scores those tokens again, and the side-by-side generations write the same greedy replies again. A
:class:`Continuations` holds, per model (adapter on or off) and prompt tokens, one continuation with its per-token
log-probabilities: :func:`gradian.attribute.engine.completion_nll` reads an item's mean NLL from it when the item's
tokens after its prompt are the start of a held continuation (and its label tokens all follow the prompt), and
:func:`gradian.attribute.generate.generate` reuses a greedy reply held for the same length limit. The values agree
with a fresh forward to the model's round-off (the cached forward of generation against one full forward); an item
that does not match token for token is scored by a forward as before. No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gradian.data.types import FormattedExample


@dataclass
class Continuation:
    """Tokens after a prompt and what one model made of them."""

    tokens: list[int]  # a greedy reply keeps the end token it wrote, when it wrote one
    logp: np.ndarray  # log-probability of each token given the prompt and the tokens before it
    greedy: int | None = None  # the max_new_tokens of the greedy generation that wrote them (None: teacher forced)


class Continuations:
    """(adapter on, prompt tokens) -> the :class:`Continuation` held for them (the last one put)."""

    def __init__(self) -> None:
        self._held: dict[tuple[bool, tuple[int, ...]], Continuation] = {}

    def put(self, adapter: bool, prompt: Sequence[int], c: Continuation) -> None:
        self._held[(adapter, tuple(int(t) for t in prompt))] = c

    def get(self, adapter: bool, prompt: Sequence[int]) -> Continuation | None:
        return self._held.get((adapter, tuple(int(t) for t in prompt)))

    def greedy(self, adapter: bool, prompt: Sequence[int], max_new_tokens: int) -> list[int] | None:
        """The greedy reply held for ``prompt`` when it was generated with the same ``max_new_tokens``."""
        c = self.get(adapter, prompt)
        return list(c.tokens) if c is not None and c.greedy == max_new_tokens else None

    def mean_nll(self, adapter: bool, fx: FormattedExample) -> float | None:
        """``fx``'s mean NLL per label token from a held continuation, or None when none matches it."""
        n = fx.n_prompt_tokens
        c = self.get(adapter, fx.input_ids[:n]) if n > 0 else None
        if c is None:
            return None
        after = [int(t) for t in fx.input_ids[n:]]
        labels = [t - n for t in range(1, len(fx.input_ids)) if fx.loss_mask[t]]
        if not labels or labels[0] < 0 or after != c.tokens[: len(after)] or len(after) > len(c.logp):
            return None
        return float(-np.mean(np.asarray(c.logp, dtype=np.float64)[labels]))
