"""The library versions a run recorded, and the version windows the checks depend on.

A run records its versions in the model card its trainer writes next to the adapter (README.md: TRL's and the
transformers Trainer's "Framework versions" list, ``- TRL: 1.16.0`` / ``- Transformers 4.46.0`` / ``- PEFT 0.13.2``;
Axolotl's ``axolotl version: `0.9.1```), in adapter_config.json (``peft_version``) and in ``*_version`` config keys.
Where none is recorded, a config value that only some versions know may bound it (TRL's packing_strategy). A check
whose truth depends on a version reads it through :func:`check_window`: the recorded version decides, else the
bound; the installed one is only a hint, since the run may have trained elsewhere."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

# Names in model cards -> package names.
CARD_NAMES = {
    "trl": "trl",
    "transformers": "transformers",
    "pytorch": "torch",
    "torch": "torch",
    "peft": "peft",
    "datasets": "datasets",
    "tokenizers": "tokenizers",
    "axolotl": "axolotl",
    "llamafactory": "llamafactory",
    "llama-factory": "llamafactory",
}
# How each package is written in messages.
DISPLAY = {"trl": "TRL", "transformers": "transformers", "torch": "PyTorch", "peft": "PEFT", "axolotl": "Axolotl",
           "llamafactory": "LLaMA-Factory", "datasets": "datasets", "tokenizers": "tokenizers"}  # fmt: skip
CARD_MAX_BYTES = 1_000_000

_HEADING = re.compile(r"^#+\s*(.*?)\s*$")
_CARD_LINE = re.compile(r"^\s*[-*]\s*([A-Za-z][\w-]*)\s*:?\s*`?v?(\d+(?:\.\d+)*[\w.+-]*)`?\s*$")
_AXOLOTL = re.compile(r"axolotl version:\s*`?v?(\d+(?:\.\d+)*[\w.+-]*)`?", re.IGNORECASE)


@dataclass(frozen=True)
class RecordedVersion:
    """One library version the run recorded, and where (``README.md: Framework versions``)."""

    package: str
    version: str
    source: str


def parse_version(v: str | None) -> tuple[int, ...] | None:
    """``"1.16.0"`` -> ``(1, 16, 0)``; ``"0.9.1.post1"`` -> ``(0, 9, 1)``; None when no leading number."""
    if not v:
        return None
    parts = []
    for p in str(v).split("."):
        m = re.match(r"\d+", p)
        if not m:
            break
        parts.append(int(m.group()))
    return tuple(parts) or None


def installed_version(package: str) -> str | None:
    """The version installed in this environment, or None."""
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:  # noqa: BLE001 - not installed, or broken metadata
        return None


def card_versions(path: Path) -> list[RecordedVersion]:
    """The versions a model card (README.md) lists: its "Framework versions" section and Axolotl's version line."""
    try:
        if path.stat().st_size > CARD_MAX_BYTES:
            return []
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    where = f"{path.parent.name}/{path.name}" if path.parent.name else path.name
    out: list[RecordedVersion] = []
    section = ""
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            section = heading.group(1).lower()
            continue
        m = _CARD_LINE.match(line)
        if m and section == "framework versions":
            package = CARD_NAMES.get(m.group(1).lower())
            if package is not None:
                out.append(RecordedVersion(package, m.group(2), f"{where}: Framework versions"))
            continue
        axolotl = _AXOLOTL.search(line)
        if axolotl:
            out.append(RecordedVersion("axolotl", axolotl.group(1), f"{where}: axolotl version"))
    return out


@dataclass(frozen=True)
class VersionWindow:
    """Where a check's truth depends on a library version: ``package`` >= ``since`` behaves one way (``after``),
    older versions the other (``before``). ``ends``: the last release before the window and the first inside it,
    the two that tests/test_version_ends.py runs."""

    package: str
    since: tuple[int, ...]
    after: str
    before: str
    ends: tuple[str, str] = ("", "")

    @property
    def label(self) -> str:
        return f"{DISPLAY.get(self.package, self.package)} >= {'.'.join(map(str, self.since))}"

    def describe(self) -> str:
        """``TRL >= 0.20 keeps ...; older ... drops ...``: the window as one clause."""
        return f"{self.label} {self.after}; older versions {self.before}"


@dataclass(frozen=True)
class VersionRange:
    """What a run's config implies about a library's version where it recorded none: ``low`` <= version < ``high``
    (either end open), read from ``source``."""

    low: tuple[int, ...] | None
    high: tuple[int, ...] | None
    source: str

    def label(self, package: str) -> str:
        name = DISPLAY.get(package, package)
        ends = [f">= {_dotted(self.low)}" if self.low else "", f"< {_dotted(self.high)}" if self.high else ""]
        return f"{name} {' and '.join(e for e in ends if e)}"


def _dotted(v: tuple[int, ...] | None) -> str:
    return ".".join(map(str, v or ()))


# SFTConfig.packing_strategy values and the TRL versions that know them (tags of huggingface/trl: "ffd" in 0.19.x,
# renamed "bfd" in 0.20.0; "bfd-requeue" / "bfd_split" later). A run that trained with one ran such a TRL.
TRL_PACKING_STRATEGIES: dict[str, tuple[tuple[int, ...] | None, tuple[int, ...] | None]] = {
    "ffd": ((0, 19), (0, 20)),
    "bfd": ((0, 20), None),
    "bfd-requeue": ((0, 20), None),
    "bfd_split": ((0, 20), None),
}


def trl_range_from_config(packing_strategy: str | None, source: str | None) -> VersionRange | None:
    """The TRL versions a packing_strategy value set in the run's config implies; None when it implies nothing."""
    bounds = TRL_PACKING_STRATEGIES.get(str(packing_strategy or "").lower())
    if bounds is None or not source or "default" in source:
        return None
    return VersionRange(bounds[0], bounds[1], f"{source} {packing_strategy!r}")


# The fields of a pickled SFTConfig that tell TRL versions apart (trl/trainer/sft_config.py at each tag): 0.15.2 has
# max_seq_length alone; 0.16.0 adds max_length; 0.16.1 adds pad_token; 0.20.0 drops max_seq_length. Keyed by
# (has max_seq_length, has max_length, has pad_token).
TRL_SFT_FIELDS: dict[tuple[bool, bool, bool], tuple[tuple[int, ...] | None, tuple[int, ...] | None]] = {
    (True, False, False): (None, (0, 16)),
    (True, True, False): ((0, 16), (0, 16, 1)),
    (True, True, True): ((0, 16, 1), (0, 20)),
    (False, True, True): ((0, 20), None),
}


def trl_range_from_fields(fields: Collection[str], source: str) -> VersionRange | None:
    """The TRL versions the fields of a pickled SFTConfig (training_args.bin: every field, set or not) imply."""
    if "dataset_text_field" not in fields:  # not an SFTConfig
        return None
    bounds = TRL_SFT_FIELDS.get(("max_seq_length" in fields, "max_length" in fields, "pad_token" in fields))
    return None if bounds is None else VersionRange(bounds[0], bounds[1], f"{source}'s SFTConfig fields")


@dataclass(frozen=True)
class WindowCheck:
    """A run's version against a :class:`VersionWindow`. ``inside`` is True at or above ``since``, False below, None
    when the run recorded no version (``installed`` is then a hint, never the answer)."""

    window: VersionWindow
    recorded: str | None
    source: str | None
    installed: str | None
    implied: VersionRange | None = None  # what the config implies where no version was recorded

    @property
    def inside(self) -> bool | None:
        v = parse_version(self.recorded)
        if v is not None:
            return v >= self.window.since
        if self.implied is not None and self.implied.low is not None and self.implied.low >= self.window.since:
            return True
        if self.implied is not None and self.implied.high is not None and self.implied.high <= self.window.since:
            return False
        return None

    @property
    def known(self) -> bool:
        return self.inside is not None

    def note(self) -> str:
        """What the check read: the recorded version and where, or that none was recorded (and what is installed)."""
        name = DISPLAY.get(self.window.package, self.window.package)
        if self.recorded:
            return f"{name} {self.recorded} (recorded by the run: {self.source})"
        if self.implied is not None and self.inside is not None:
            return f"{self.implied.label(self.window.package)} (no version recorded; implied by {self.implied.source})"
        hint = f"; {name} {self.installed} is installed here" if self.installed else ""
        return f"the run recorded no {name} version{hint}"

    def evidence(self) -> dict[str, str | None]:
        """The evidence keys every version-dependent finding carries."""
        return {"version": self.note(), "version_window": self.window.describe()}


def check_window(
    versions: dict[str, str],
    sources: dict[str, str],
    window: VersionWindow,
    ranges: dict[str, VersionRange] | None = None,
) -> WindowCheck:
    """``window`` against the versions a setup recorded (``TrainingSetup.versions`` / ``sources``), else against
    what its config implies (``TrainingSetup.version_ranges``)."""
    recorded = versions.get(window.package) or None
    return WindowCheck(
        window=window,
        recorded=recorded,
        source=sources.get(f"versions.{window.package}") if recorded else None,
        installed=None if recorded else installed_version(window.package),
        implied=None if recorded else (ranges or {}).get(window.package),
    )


def versions_record(versions: dict[str, str], sources: dict[str, str]) -> dict[str, dict[str, str | None]]:
    """The recorded versions as report.json keeps them: package -> version and where it was read (empty: none)."""
    return {p: {"version": v, "source": sources.get(f"versions.{p}")} for p, v in sorted(versions.items())}
