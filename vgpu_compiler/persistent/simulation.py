"""``vgpu.Simulation``: a run that stays alive between calls.

The kernel is found (or compiled) once and the run's state stays where the backend
keeps it (device buffers; numpy arrays for the reference) between calls:
``advance`` runs more steps from where the last call ended and uploads nothing
unless something changed; ``states``, ``t``, ``status``, ``outputs`` and
``steps_taken`` are read back when asked for (and kept until the next change);
``set_params`` / ``set_state`` write only what changed; ``save`` / ``load``
checkpoint the whole run to a ``.npz`` file. Steps keep their numbers across calls
(``t_n = t0 + n * dt``, ``step``, the noise counter), so advancing in pieces gives,
bit for bit, what one run of the total number of steps gives. Every method holds
the simulation's lock: calls from several threads run one after another.

An adaptive method (bs3, dopri5, tsit5) runs the steps of one ``solve`` to t1:
``advance(until=u)`` runs each trajectory's attempts until a step's end reaches or
passes u, and the states at u come from that step's continuous extension (what
``solve(save_at=[..., u, ...])`` gives, bit for bit); the step itself is taken again
by the next advance, so the pieces never change the steps. Its checkpoints hold the
controller (call/session.py's ADAPTIVE); set_params, set_input and set_state are
errors there (they would change the steps of the one run).

Each backend opens its own session (call/session.py); this module only keeps the
run's arguments and counts steps.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from .. import backends as registry
from .. import spelling as S
from ..pipeline import Located, Source, _fell_back, _say_chosen, parsed, text_of
from ..call.adaptive import overrides as adaptive_overrides
from ..call.batch import require_flat
from ..call.bind import prepare
from ..call.bound import Solution
from ..call.session import Snapshot
from ..errors import ArgumentTypeError, BackendError, CallError

FORMAT = 1          # the checkpoint format's version


class Simulation:
    """``Simulation(src, h0, *, params, inputs, dims, field, backend, dtype, dt, t0,
    seed)``: the arguments of ``vgpu.run_field`` (``steps`` goes to ``advance``); for an
    adaptive method also ``t1, rtol, atol, dt0, dtmax, max_steps`` (as vgpu.solve's)."""

    def __init__(self, src, h0=None, *, params=None, inputs=None, dims=None, field=None,
                 backend="auto", dtype="float32", dt=None, t0=None, seed=0, t1=None,
                 rtol=None, atol=None, dt0=None, dtmax=None, max_steps=None):
        self._lock = threading.RLock()
        self._session = None
        text, filename = text_of(src)
        self._text, self._filename = text, filename
        self._args = dict(h0=h0, params=dict(params or {}), inputs=inputs, dims=dims,
                          field=field, dtype=dtype, dt=dt, t0=t0, seed=seed,
                          adaptive=adaptive_overrides(t1, rtol, atol, dt0, dtmax, max_steps))
        with Located(text, filename):
            self._field = parsed(text, filename).select(field)
            require_flat(self._field, h0, params, "a Simulation")
            prepared, data = self._prepare(self._args["params"])
            t = prepared.template
            if self._field.events:
                raise CallError(f"field {self._field.name} has events (when, stop when): a "
                                f"Simulation runs fields without events only so far (use "
                                f"vgpu.solve)")
            if self._field.solver.method == "rodas4":
                raise CallError(f"field {self._field.name} uses the stiff method rodas4: a "
                                f"Simulation runs explicit methods only so far (use "
                                f"vgpu.solve)")
            if 0 in t.grid_shape:
                raise CallError("a Simulation needs at least one trajectory "
                                f"(the grid has shape {t.grid_shape})")
            self._program_steps = t.steps
            self._adaptive = t.adaptive
            self._session, self.backend = _open(prepared, data, backend)
        self._prepared, self._step, self._cache = prepared, 0, {}
        if self._adaptive is None:
            self._session.advance(0, 0)         # the start values (and flux on them)
        else:
            self._until = float(t.dtype.type(t.t0))

    def _prepare(self, params):
        a = self._args
        return prepare(self._field, a["h0"], params or None, a["inputs"], a["dims"],
                       a["dtype"], a["dt"], None, a["t0"], None, a["adaptive"], None,
                       a["seed"])

    # --- running ---------------------------------------------------------------------
    def advance(self, steps=None, *, until=None) -> "Simulation":
        """Run ``steps`` more steps (None: the solve statement's ``steps``), or up to the
        first step time at or after ``until``; returns the simulation."""
        with self._lock, Located(self._text, self._filename):
            if self._adaptive is not None:
                return self._advance_adaptive(steps, until)
            if steps is not None and until is not None:
                raise ArgumentTypeError("advance() takes steps= or until=, not both")
            if until is not None:
                steps = self._steps_until(until)
            elif steps is None:
                steps = self._program_steps
            if type(steps) is not int and not isinstance(steps, np.integer) or steps < 0:
                raise ArgumentTypeError(f"{S.name('steps')} must be a whole number >= 0, "
                                        f"got {steps!r}")
            steps = int(steps)
            self._cache = {}
            self._session.advance(self._step, steps)
            self._step += steps
            return self

    def _advance_adaptive(self, steps, until) -> "Simulation":
        """The steps of one solve to t1 until each trajectory's step end reaches or passes
        ``until`` (a step is cut only at t1); the states at ``until`` from the step's
        continuous extension, as solve(save_at=[..., until, ...]) gives them."""
        f, t = self._field, self._prepared.template
        if steps is not None:
            raise CallError(f"field {f.name} uses the adaptive method {f.solver.method}, "
                            f"which chooses its own steps: advance(until=time), not "
                            f"advance(steps=...)")
        if until is None:
            raise CallError(f"field {f.name} uses the adaptive method {f.solver.method}: "
                            f"advance(until=time) (a time up to t1 = {self._adaptive.t1})")
        until = _number(until)
        cast = t.dtype.type
        u = float(cast(until))
        t1 = float(cast(self._adaptive.t1))
        if u > t1:
            raise CallError(f"until={until} is after t1 = {self._adaptive.t1}: an adaptive "
                            f"Simulation runs the steps of one solve to t1 (give a later "
                            f"t1 to the Simulation)")
        if u < self._until:
            raise CallError(f"until={until} is before the simulation's time "
                            f"({self._until}): a Simulation only runs forwards")
        self._cache = {}
        self._session.advance_to(u)
        self._until = u
        return self

    def _steps_until(self, until) -> int:
        t = self._prepared.template
        until = _number(until)
        cast = t.dtype.type
        target = (until - float(t.t0)) / float(t.dt)
        n = max(0, round(target))
        if float(cast(t.t0) + cast(n) * cast(t.dt)) < until:   # as the kernel computes t_n
            n = math.ceil(target)
        if n < self._step:
            raise CallError(f"until={until} is before the simulation's time "
                            f"({float(self._time(self._step))}): a Simulation only runs "
                            f"forwards")
        return n - self._step

    # --- reading (on access, kept until the next change) ------------------------------
    def _read(self, what: str, make):
        with self._lock:
            hit = self._cache.get(what)
            if hit is None:
                hit = self._cache[what] = make()
            return hit

    @property
    def states(self) -> np.ndarray:
        """The current states, grid_shape (+ (n_states,)), as run_field returns them."""
        return self._read("states", self._session.states).copy()

    @property
    def steps_taken(self) -> np.ndarray:
        return self._read("taken", self._session.steps_taken).copy()

    @property
    def outputs(self) -> dict:
        """Flux deposited on the current state (the outputs of a run that ended here); for
        an adaptive method, once every trajectory has ended (at t1 or earlier), the
        outputs of the one solve."""
        out = self._read("outputs", self._session.outputs)
        if out is None:
            raise CallError("an adaptive Simulation deposits flux as each trajectory ends: "
                            "its outputs are there once every one has (advance(until=t1)"
                            "; a run resumed from a checkpoint on a compiled backend has "
                            "them only if every trajectory was still running then)")
        return {k: v.copy() for k, v in out.items()}

    @property
    def t(self) -> np.ndarray:
        """The time each trajectory reached, grid_shape: t0 + steps_taken * dt; for an
        adaptive method the last advance's ``until`` (or the time a trajectory ended,
        with a status other than 0, or at t1)."""
        if self._adaptive is not None:
            return self._read("t", self._session.times).copy()
        return self._read("t", lambda: self._time(self.steps_taken)).copy()

    @property
    def status(self) -> np.ndarray:
        """int8, grid_shape: a Solution's status (fixed-step methods: 0, they end every
        step they take)."""
        if self._adaptive is not None:
            return self._read("status", self._session.status_codes).copy()
        return np.zeros(self._prepared.grid_shape, np.int8)

    @property
    def steps_rejected(self) -> np.ndarray:
        """int32, grid_shape: step attempts rejected so far (0 for fixed-step methods)."""
        if self._adaptive is not None:
            return self._read("rejected", self._session.steps_rejected).copy()
        return np.zeros(self._prepared.grid_shape, np.int32)

    @property
    def until(self) -> float:
        """An adaptive Simulation's time: the last advance's ``until`` (t0 at first)."""
        if self._adaptive is None:
            return float(self._time(self._step))
        return self._until

    @property
    def step(self) -> int:
        """Steps run so far (the next step's number); for an adaptive method (its
        trajectories take steps of their own) see steps_taken."""
        if self._adaptive is not None:
            raise CallError("an adaptive method's trajectories take steps of their own: "
                            "read sim.steps_taken (and sim.until)")
        return self._step

    def solution(self) -> Solution:
        """The current state as a Solution (what vgpu.solve over the steps so far returns)."""
        with self._lock:
            outputs = self._read("outputs", self._session.outputs)
            sol = Solution(states=self.states, outputs={k: v.copy() for k, v in
                                                        (outputs or {}).items()},
                           steps_taken=self.steps_taken, status=self.status, t=self.t,
                           steps_rejected=self.steps_rejected, backend=self.backend,
                           state_names=self._prepared.template.field.state_names)
            return sol

    def _time(self, n):
        t = self._prepared.template
        cast = t.dtype.type
        return (cast(t.t0) + np.asarray(n).astype(t.dtype) * cast(t.dt)).astype(t.dtype)

    # --- changing ----------------------------------------------------------------------
    def set_params(self, params=None, **more) -> "Simulation":
        """New values for some params (a scalar, or an array of the grid's shape), in
        force from the next step; the others keep theirs."""
        with self._lock, Located(self._text, self._filename):
            self._fixed_only("set_params")
            new = {**self._args["params"], **(params or {}), **more}
            prepared, data = self._prepare(new)
            self._args["params"] = new
            self._cache = {}
            if prepared is self._prepared:
                self._session.set_data(data)        # the same signature: values only
                self._session.advance(self._step, 0)    # (flux, with the new values)
                return self
            snap = self._session.snapshot(self._step)
            session, _ = _open(prepared, data, self.backend)
            session.restore(snap)
            session.advance(self._step, 0)      # (outputs: flux on the state restored)
            self._session.close()
            self._session, self._prepared = session, prepared
            return self

    def set_input(self, name: str, array) -> "Simulation":
        """A new value of input ``name`` (its shape unchanged), read from the next step."""
        with self._lock, Located(self._text, self._filename):
            self._fixed_only("set_input")
            t = self._prepared.template
            if name not in t.inputs:
                raise CallError(f"field {self._field.name} has no input {name!r} (inputs: "
                                f"{', '.join(t.inputs) or 'none'})")
            a = np.asarray(array, dtype=t.dtype)
            want = self._input_shape(name)
            if a.shape != want:
                raise CallError(f"input {name} has shape {want}; set_input got {a.shape}")
            self._args["inputs"] = {**(self._args["inputs"] or {}), name: a}
            self._session.set_input(name, a)
            self._cache = {}
            return self

    def _fixed_only(self, what: str) -> None:
        """An adaptive Simulation runs the steps of one solve: nothing may change them."""
        if self._adaptive is not None:
            f = self._field
            raise CallError(f"{what}: field {f.name} uses the adaptive method "
                            f"{f.solver.method}, and an adaptive Simulation runs exactly "
                            f"the steps of one solve to t1 (its step sizes and FSAL "
                            f"derivative belong to the values it started with); start a "
                            f"new Simulation (h0=sim.states, t0=sim.until) instead")

    def _input_shape(self, name: str) -> tuple:
        t = self._prepared.template
        decl = next(a for a in self._field.inputs if a.name == name)
        return tuple(t.dims[d] if isinstance(d, str) else int(d) for d in decl.dims)

    def _rerun(self, steps: int) -> None:
        """Run ``steps`` steps from step 0 again, from the state held now (a pipeline's
        stage: states with a start expression start from it, the others from their
        current values)."""
        with self._lock:
            self._fixed_only("a pipeline's stage")
            self._cache = {}
            self._session.advance(0, steps)
            self._step = steps

    def set_state(self, states) -> "Simulation":
        """Replace the current state: an array shaped as ``states`` (every state)."""
        with self._lock, Located(self._text, self._filename):
            self._fixed_only("set_state")
            t, f = self._prepared.template, self._field
            n_states = len(f.states)
            want = t.grid_shape + ((n_states,) if n_states > 1 else ())
            try:
                a = np.asarray(states, dtype=t.dtype)
            except (TypeError, ValueError) as e:
                raise ArgumentTypeError(f"set_state takes an array of numbers: {e}") from None
            if a.shape != want:
                raise CallError(f"set_state takes an array of shape {want} (the states of "
                                f"every trajectory), got {a.shape}")
            started = [s.name for s in f.states if s.init is not None]
            if self._step == 0 and started:
                raise CallError(f"set_state before the first step: states "
                                f"{', '.join(started)} start from their start expressions; "
                                f"advance first, or pass h0")
            snap = self._session.snapshot(self._step)
            snap.state = np.ascontiguousarray(a.reshape(-1, n_states).T)
            if self._step == 0:
                snap.init = snap.state.copy()
            self._cache = {}
            self._session.restore(snap)
            self._session.advance(self._step, 0)
            return self

    # --- checkpoints ---------------------------------------------------------------------
    def save(self, path) -> None:
        """Write a checkpoint (.npz): program text, arguments, state, step, counters and
        the noise position (the seed and the step: Philox is counter-based)."""
        with self._lock:
            a = self._args
            arrays = {"format": np.int64(FORMAT), "text": np.str_(self._text),
                      "filename": np.str_(self._filename),
                      "field": np.str_(a["field"] or ""), "dtype": np.str_(np.dtype(
                          self._prepared.dtype).name), "backend": np.str_(self.backend),
                      "seed": np.str_(str(int(a["seed"] or 0))),
                      "dt": np.float64(np.nan if a["dt"] is None else a["dt"]),
                      "t0": np.float64(np.nan if a["t0"] is None else a["t0"])}
            if a["h0"] is not None:
                arrays["h0"] = np.asarray(a["h0"])
            for k, v in a["adaptive"].items():
                arrays[f"adaptive:{k}"] = np.asarray(v)
            for group in ("params", "inputs", "dims"):
                for k, v in (a[group] or {}).items():
                    arrays[f"{group}:{k}"] = np.asarray(v)
            arrays.update(self._session.snapshot(self._step).arrays("snap:"))
            np.savez(path, **arrays)

    @classmethod
    def load(cls, path, *, backend=None) -> "Simulation":
        """A Simulation resumed from ``save``'s checkpoint (on its backend, or
        ``backend=``): it continues bit for bit as the saved one would have."""
        try:
            z = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise CallError(f"cannot read checkpoint {path!r}: {e}") from None
        with z:
            if "format" not in z or int(z["format"]) != FORMAT:
                raise CallError(f"{path!r} is not a vgpu Simulation checkpoint (format "
                                f"{FORMAT})")
            groups = {"params": {}, "inputs": {}, "dims": {}, "adaptive": {}}
            for name in z.files:
                group, _, key = name.partition(":")
                if group in groups:
                    v = z[name]
                    groups[group][key] = (int(v) if group == "dims" or key == "max_steps"
                                          else float(v) if v.ndim == 0 else v)
            opt = lambda k: None if math.isnan(float(z[k])) else float(z[k])   # noqa: E731
            sim = cls(Source(str(z["text"]), str(z["filename"])),
                      z["h0"] if "h0" in z else None, params=groups["params"],
                      inputs=groups["inputs"] or None, dims=groups["dims"] or None,
                      field=str(z["field"]) or None, backend=backend or str(z["backend"]),
                      dtype=str(z["dtype"]), dt=opt("dt"), t0=opt("t0"),
                      seed=int(str(z["seed"])), **groups["adaptive"])
            snap = Snapshot.of(z, "snap:")
        with sim._lock:
            if (snap.controller is None) != (sim._adaptive is None):
                raise CallError(f"{path!r}: the checkpoint's run and its field do not agree "
                                f"on the kind of method")
            sim._session.restore(snap)
            if sim._adaptive is None:
                sim._session.advance(snap.step, 0)
            else:
                sim._until = float(snap.controller["until"])
            sim._step = snap.step
            sim._cache = {}
        return sim

    # --- the end -------------------------------------------------------------------------
    def close(self) -> None:
        """Give back the device buffers now (also done when the simulation is collected)."""
        with self._lock:
            if self._session is not None:
                self._session.close()

    def __enter__(self) -> "Simulation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        where = (f"step {self._step}" if self._adaptive is None else
                 f"t = {self._until} of t1 = {self._adaptive.t1}")
        return (f"<Simulation of field {self._field.name} on {self.backend}: "
                f"{math.prod(self._prepared.grid_shape)} trajectories, {where}>")


def _number(until) -> float:
    try:
        until = float(until)
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"until must be a number, got {until!r}") from None
    if not math.isfinite(until):
        raise ArgumentTypeError(f"until must be finite, got {until!r}")
    return until


def _open(prepared, data, backend: str):
    """(the session, the backend's name): ``auto`` tries the registry's order."""
    if backend not in registry.choices():
        raise ArgumentTypeError(f"{S.name('backend')} must be one of "
                                f"{', '.join(map(repr, registry.choices()))}, got {backend!r}")
    if backend != "auto":
        chosen = registry.get(backend)
        ok, why = chosen.available()
        if not ok:
            raise BackendError(f"the {backend} backend is not available here ({why}); "
                               f"use {S.setting('backend', 'numpy')}")
        return _session(chosen, prepared, data), backend
    order = registry.auto_order()
    for i, candidate in enumerate(order):
        ok, why = candidate.available()
        if not ok:
            _fell_back(candidate, f"is not available ({why})", order[i + 1:])
            continue
        try:
            session = _session(candidate, prepared, data)
        except BackendError as e:
            if i == len(order) - 1:
                raise
            _fell_back(candidate, f"cannot run this: {e.message}", order[i + 1:])
            continue
        _say_chosen(candidate)
        return session, candidate.name
    raise BackendError("no backend is available here")


def _session(backend, prepared, data):
    if backend.open is None:
        raise BackendError(f"the {backend.name} backend has no Simulation sessions")
    return backend.open(prepared, data)
