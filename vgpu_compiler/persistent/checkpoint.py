"""Reading a Simulation checkpoint (``Simulation.save``'s ``.npz``) and checking it.

A file that is not a whole checkpoint (not a zip, cut short, a member missing or not
decodable, an object array) and a run whose arrays do not fit the field (another
number of trajectories or states, a negative or too large step, a controller missing
or of other shapes) are a CallError naming the file, before anything of it is used:
nothing is broadcast or truncated into the run.
"""
from __future__ import annotations

import math
import zipfile
import zlib

import numpy as np

from ..call.session import ADAPTIVE, Snapshot
from ..errors import CallError
from ..ir.ops import INT32_MAX

GROUPS = ("params", "inputs", "dims", "adaptive")
# what reading a damaged .npz raises (numpy's own format errors are ValueErrors)
DAMAGED = (OSError, EOFError, KeyError, ValueError, TypeError, IndexError,
           zipfile.BadZipFile, zlib.error, UnicodeDecodeError)


def read_checkpoint(path, version: int) -> tuple[dict, Snapshot]:
    """(Simulation's arguments: text, filename, h0 and the keywords; the run's Snapshot)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {name: np.asarray(z[name]) for name in z.files}
    except DAMAGED as e:
        raise CallError(f"cannot read checkpoint {_name(path)}: {_reason(e)}") from None
    try:
        if "format" not in arrays or int(arrays["format"]) != version:
            raise CallError(f"{_name(path)} is not a vgpu Simulation checkpoint (format "
                            f"{version})")
        groups: dict = {g: {} for g in GROUPS}
        for name, v in arrays.items():
            group, _, key = name.partition(":")
            if group in groups:
                groups[group][key] = (int(v) if group == "dims" or key == "max_steps"
                                      else float(v) if v.ndim == 0 else v)
        opt = lambda k: None if math.isnan(float(arrays[k])) else float(arrays[k])  # noqa: E731
        args = dict(text=str(arrays["text"]), filename=str(arrays["filename"]),
                    h0=arrays.get("h0"), params=groups["params"],
                    inputs=groups["inputs"] or None, dims=groups["dims"] or None,
                    field=str(arrays["field"]) or None, backend=str(arrays["backend"]),
                    dtype=str(arrays["dtype"]), dt=opt("dt"), t0=opt("t0"),
                    seed=int(str(arrays["seed"])), **groups["adaptive"])
        snap = Snapshot.of(arrays, "snap:")
    except CallError:
        raise
    except DAMAGED as e:
        raise CallError(f"checkpoint {_name(path)} is damaged: {_reason(e)}") from None
    return args, snap


def check_snapshot(snap: Snapshot, path, n_states: int, n: int, adaptive: bool) -> None:
    """The run's arrays fit a field of ``n_states`` states on ``n`` trajectories."""
    where = f"checkpoint {_name(path)}"
    if (snap.controller is None) == adaptive:
        raise CallError(f"{where}: the checkpoint's run and its field do not agree on the "
                        f"kind of method")
    if not 0 <= snap.step <= INT32_MAX:
        raise CallError(f"{where} is damaged: its step {snap.step} is not in 0 .. "
                        f"{INT32_MAX}")
    want = {"state": (n_states, n), "init": (n_states, n), "taken": (n,), "done": (n,)}
    if snap.slope is not None:
        want["slope"] = (n_states, n)
    for name, shape in want.items():
        _shape(where, name, getattr(snap, name), shape)
    taken = snap.taken
    if taken.size and (taken.min() < 0 or (not adaptive and taken.max() > snap.step)):
        raise CallError(f"{where} is damaged: its steps taken are not in 0 .. "
                        f"{'its step' if not adaptive else INT32_MAX}")
    if adaptive:
        missing = sorted(set(ADAPTIVE) - set(snap.controller))
        if missing:
            raise CallError(f"{where} is damaged: its adaptive controller has no "
                            f"{', '.join(missing)}")
        for key, what in ADAPTIVE.items():
            spec = what[:what.index(")") + 1]       # "()", "(N,)", "(n_states, N)"
            shape = {"()": (), "(N,)": (n,), "(n_states, N)": (n_states, n)}[spec]
            _shape(where, f"controller's {key}", snap.controller[key], shape)


def _shape(where: str, name: str, a: np.ndarray, shape: tuple) -> None:
    if a.shape != shape or a.dtype.kind not in "biuf":
        raise CallError(f"{where} does not fit this run: its {name} has shape {a.shape} "
                        f"({a.dtype}), the field's run needs {shape} of numbers (states x "
                        f"trajectories); it belongs to another call, or is damaged")


def _name(path) -> str:
    return repr(str(path)) if not isinstance(path, str) else repr(path)


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__
