"""`gradian diagnose`: deterministic checks over the dataset, the training config and the trainer logs.

``gradian.diagnose(...)`` is the Python API (:func:`gradian.diagnose.api.diagnose`). Because this subpackage has the
same name, the module itself is made callable so that ``gradian.diagnose(...)`` works whether or not the package
was imported first.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any):
        from gradian.diagnose.api import diagnose

        return diagnose(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
