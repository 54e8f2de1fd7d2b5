"""`gradian attribute`: which training rows made a LoRA fine-tune worse (EK-FAC influence over LoRA blocks).

``gradian.attribute(...)`` and ``gradian.attribute.api.attribute(...)`` are the same function. Importing this package
does not import torch.
"""

from __future__ import annotations

import sys
import types


class _CallableModule(types.ModuleType):
    """`gradian.attribute` is both this package and, lazily, the `attribute` function: once the package is
    imported, ``gradian.attribute`` resolves to the module, so the module forwards calls to
    :func:`gradian.attribute.api.attribute`."""

    def __call__(self, *args, **kwargs):
        from gradian.attribute.api import attribute

        return attribute(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
