"""Every option of `gradian attribute`, `diagnose`, `train`, `verify`, the verdict and the training callback, once:
typed dataclasses whose fields carry the default, the help text and the checks (``__post_init__``). The command line is
built from them (:mod:`gradian.options.cli`), report.json saves them (``options``) and `gradian verify` / `gradian
report` read them back (:meth:`Options.from_dict`). No torch, no other gradian layer: everything may import this."""

from gradian.options.attribute import DEFAULTS, METHODS, AttributeOptions, report_options
from gradian.options.base import OptionError, Options, option
from gradian.options.callback import CallbackOptions
from gradian.options.diagnose import DiagnoseOptions
from gradian.options.inputs import RunInputs
from gradian.options.train import TRL_MAX_LENGTH, TrainOptions
from gradian.options.verdict import VerdictOptions
from gradian.options.verify import VerifyOptions

__all__ = [
    "DEFAULTS",
    "METHODS",
    "TRL_MAX_LENGTH",
    "AttributeOptions",
    "CallbackOptions",
    "DiagnoseOptions",
    "OptionError",
    "Options",
    "RunInputs",
    "TrainOptions",
    "VerdictOptions",
    "VerifyOptions",
    "option",
    "report_options",
]
