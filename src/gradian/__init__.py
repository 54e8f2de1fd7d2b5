"""Gradian: debug a LoRA fine-tune that got worse.

`gradian diagnose` checks the data, config and trainer logs; `gradian attribute` finds the training rows that caused
the regression. See docs/ for the method.
"""

from __future__ import annotations

__version__ = "0.1.0"

from gradian.errors import GradianError  # noqa: E402

__all__ = ["GradianError", "__version__", "attribute", "diagnose"]


def __getattr__(name: str):  # lazy: importing gradian must not import torch
    if name == "attribute":
        from gradian.attribute.api import attribute

        return attribute
    if name == "diagnose":
        from gradian.diagnose.api import diagnose

        return diagnose
    raise AttributeError(name)
