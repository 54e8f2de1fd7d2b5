"""Pause Python's cyclic garbage collector around bulk work that allocates many long-lived objects.

Reading, tokenizing and checking 100k rows allocates millions of containers (rows, token lists, per-row measures)
and almost no reference cycles; the collector's full passes re-scan all of them again and again (about a third of
`gradian diagnose`'s time at 100k rows). Reference counting still frees everything that is not a cycle.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block (nested blocks are fine); restore its state after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
