"""Read ``training_args.bin`` (a pickled TrainingArguments) without ever executing it.

The HF Trainer saves its arguments with ``torch.save(args)``: a zip holding ``<name>/data.pkl`` (or, from old torch,
a plain stream of pickles). Unpickling that file runs whatever callables it names, so Gradian never does. Instead a
restricted unpickler (the pure-Python one, so every global goes through ``find_class``) turns every global into an
inert stub class that only records the arguments it was called with and the state it was given. No real class,
function or module attribute is ever looked up, so ``os.system``, ``builtins.open`` or ``eval`` in a hostile file
become harmless stubs too. The stubs are then turned into plain Python values: enums into their value, dataclasses into
dicts.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradian.errors import GradianError

_MAX_PICKLES = 6  # old torch.save streams: magic number, protocol, sys info, the object, storage keys


class _Stub:
    """Stands in for any global a pickle names. Calling it (REDUCE / NEWOBJ) only records the arguments."""

    _module = "?"
    _name = "?"
    # set per instance in __new__ (declared here for the type checker only)
    _args: tuple[Any, ...]
    _kwargs: dict[str, Any]
    _state: Any
    _items: dict[Any, Any]
    _list: list[Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> _Stub:
        obj = object.__new__(cls)
        obj.__dict__.update({"_args": args, "_kwargs": kwargs, "_state": None, "_items": {}, "_list": []})
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # the args were recorded in __new__
        pass

    def __setstate__(self, state: Any) -> None:
        self.__dict__["_state"] = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self._items[key] = value

    def append(self, value: Any) -> None:
        self._list.append(value)

    def extend(self, values: Any) -> None:
        self._list.extend(values)

    def __repr__(self) -> str:
        return f"<stub {self._module}.{self._name}>"


class _PersistentRef:
    """What a torch storage reference becomes: nothing is loaded."""

    def __init__(self, pid: Any) -> None:
        self.pid = pid


class _InertUnpickler(pickle._Unpickler):  # the pure-Python unpickler: every global goes through find_class
    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self._stubs: dict[tuple[str, str], type] = {}

    def find_class(self, module: str, name: str) -> type:
        key = (str(module), str(name))
        if key not in self._stubs:
            self._stubs[key] = type("Stub", (_Stub,), {"_module": key[0], "_name": key[1]})
        return self._stubs[key]

    def persistent_load(self, pid: Any) -> _PersistentRef:
        return _PersistentRef(pid)


@dataclass
class PickledArgs:
    """The arguments object found in a training_args.bin: its class and its fields as plain values."""

    class_path: str  # e.g. "transformers.training_args.TrainingArguments" or "trl.trainer.sft_config.SFTConfig"
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def class_name(self) -> str:
        return self.class_path.rsplit(".", 1)[-1]


def _plain(obj: Any, depth: int = 0) -> Any:
    """Turn stubs and containers into JSON-like values."""
    if depth > 20:
        return None
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    if isinstance(obj, dict):
        return {str(_plain(k, depth + 1)): _plain(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v, depth + 1) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return [_plain(v, depth + 1) for v in obj]
    if isinstance(obj, _PersistentRef):
        return None
    if isinstance(obj, _Stub):
        qual = f"{obj._module}.{obj._name}"
        state = obj._state
        if isinstance(state, tuple) and len(state) == 2 and (state[0] is None or isinstance(state[0], dict)):
            merged: dict[Any, Any] = {}
            for part in state:
                if isinstance(part, dict):
                    merged.update(part)
            state = merged
        if isinstance(state, dict):
            return _plain(state, depth + 1)
        if obj._items:
            return _plain(obj._items, depth + 1)
        if obj._list:
            return _plain(obj._list, depth + 1)
        args = obj._args
        if qual in ("builtins.set", "builtins.frozenset") and args:
            return _plain(args[0], depth + 1)
        if len(args) == 1 and isinstance(args[0], (str, int, float, bool)):  # enum members, torch.device("cpu")
            return args[0]
        if args and all(isinstance(a, (str, int, float, bool)) for a in args):
            return [_plain(a, depth + 1) for a in args]
        return f"<{qual}>"
    return str(obj)


def _pickle_payloads(data: bytes, where: str) -> list[bytes]:
    if data[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                names = [n for n in zf.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
                if not names:
                    raise GradianError(
                        "a zip without data.pkl, so not a torch.save file",
                        where=where,
                        fix="pass the training_args.bin the HF Trainer wrote, or a training_args.json",
                    )
                return [zf.read(names[0])]
        except zipfile.BadZipFile as exc:
            raise GradianError(
                f"a damaged zip ({exc})", where=where, fix="copy the file again from the training machine"
            ) from exc
    return [data]


def read_training_args_bin(path: str | Path) -> PickledArgs:
    """The TrainingArguments (or SFTConfig, ...) fields saved in ``path``, read without executing anything."""
    path = Path(path)
    where = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GradianError(f"cannot read the file ({exc.strerror})", where=where, fix="check the path") from exc
    for payload in _pickle_payloads(data, where):
        stream = io.BytesIO(payload)
        for _ in range(_MAX_PICKLES):
            if stream.tell() >= len(payload):
                break
            try:
                obj = _InertUnpickler(stream).load()
            except Exception as exc:  # any malformed pickle: report it, never execute it
                raise GradianError(
                    f"not a readable pickle ({type(exc).__name__}: {exc})",
                    where=where,
                    fix="pass a training_args.json or the training config instead",
                ) from exc
            if isinstance(obj, _Stub):
                fields = _plain(obj)
                if isinstance(fields, dict) and fields:
                    return PickledArgs(class_path=f"{obj._module}.{obj._name}", fields=fields)
    raise GradianError(
        "no TrainingArguments object inside (the pickle holds something else)",
        where=where,
        fix="pass the training_args.bin the HF Trainer wrote, or a training_args.json",
    )
