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

A Ctrl-C during ``advance`` keeps the steps that ran (the session counts each dispatch
with it): step, t, the noise counter and the state agree, and the flux on that state is
deposited when next read. The arguments are copies (the caller's arrays may change);
a closed simulation, one on a GPU backend in a forked process, a step past 2^31 - 1, a
checkpoint that does not fit (persistent/checkpoint.py) and pickling are errors that
say so.

Each backend opens its own session (call/session.py); this module only keeps the
run's arguments and counts steps.
"""
from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping

import numpy as np

from .. import backends as registry
from .. import spelling as S
from ..pipeline import (Located, Source, _fell_back, _out_of_memory, _say_chosen,
                        parsed, refuse_observers, text_of)
from ..call import labelled
from ..call.adaptive import overrides as adaptive_overrides
from ..call.batch import require_flat
from ..call.bind import prepare
from ..call.bound import Solution
from ..call.observers import split as split_observers
from ..ir import observers
from ..errors import ArgumentTypeError, BackendError, CallError
from ..ir.ops import INT32_MAX
from ..ir.rosenbrock import STIFF
from .checkpoint import check_snapshot, read_checkpoint

FORMAT = 1          # the checkpoint format's version


class NotPicklable(ArgumentTypeError, TypeError):
    """pickle (or copy) of a Simulation: its run lives in a backend's buffers."""


class Simulation:
    """``Simulation(src, h0, *, params, inputs, dims, field, backend, dtype, dt, t0,
    seed)``: the arguments of ``vgpu.run_field`` (``steps`` goes to ``advance``); for an
    adaptive method also ``t1, rtol, atol, dt0, dtmax, max_steps`` (as vgpu.solve's)."""

    def __init__(self, src, h0=None, *, params=None, inputs=None, dims=None, field=None,
                 backend="auto", dtype="float32", dt=None, t0=None, seed=0, t1=None,
                 rtol=None, atol=None, dt0=None, dtmax=None, max_steps=None):
        self._lock = threading.RLock()
        self._session = None
        self._pid = os.getpid()     # a forked child cannot use a GPU backend's buffers
        self._closed = False
        self._flux_due = False      # an interrupted advance deposited no flux yet
        self._pending = None        # the until of an interrupted adaptive advance
        text, filename = text_of(src)
        self._text, self._filename = text, filename
        # the arguments are copied: an array changed in place later changes neither the
        # run nor what save() writes
        self._args = dict(h0=_own(h0), params=_own_all(params or {}),
                          inputs=None if inputs is None else _own_all(inputs),
                          dims=dims, field=field, dtype=dtype, dt=dt, t0=t0, seed=seed,
                          adaptive=adaptive_overrides(t1, rtol, atol, dt0, dtmax, max_steps))
        self._field = self._prepared = None
        with Located(text, filename), self._memory():
            self._field = parsed(text, filename).select(field)
            # observers: hidden states of the field run (ir/observers.py), so advances
            # and checkpoints carry them with the states
            self._lowered = observers.lower(self._field) if self._field.observers else None
            require_flat(self._field, h0, params, "a Simulation")
            prepared, data = self._prepare(self._args["params"])
            self._prepared = prepared
            t = prepared.template
            if self._field.events:
                raise CallError(f"field {self._field.name} has events (when, stop when): a "
                                f"Simulation runs fields without events only so far (use "
                                f"vgpu.solve)")
            if self._field.solver.method in STIFF:
                raise CallError(f"field {self._field.name} uses the stiff method "
                                f"{self._field.solver.method}: a "
                                f"Simulation runs explicit methods only so far (use "
                                f"vgpu.solve)")
            if 0 in t.grid_shape:
                raise CallError("a Simulation needs at least one trajectory "
                                f"(the grid has shape {t.grid_shape})")
            self._program_steps = t.steps
            self._adaptive = t.adaptive
            self._session, self.backend = _open(prepared, data, backend)
            self._step, self._cache = 0, {}
            if self._adaptive is None:
                self._session.advance(0, 0)         # the start values (and flux on them)
            else:
                self._until = float(t.dtype.type(t.t0))

    def _memory(self):
        """MemoryError as run_field reports it: a CallError naming the size."""
        return _OutOfMemory(self)

    def _live(self):
        """The session, once it is sure to be usable here."""
        session = self._session
        if session is None:
            if self._closed:
                raise CallError(f"this Simulation of field {self._field.name} is closed "
                                f"(close() gave its buffers back): start a new one, or "
                                f"Simulation.load a checkpoint saved before")
            raise CallError("this Simulation was not made (its construction failed)")
        if self._pid != os.getpid():
            chosen = registry.get(self.backend)
            if chosen.gpu:
                ok, why = chosen.available()
                why = why if not ok else "GPU drivers do not survive a fork"
                raise BackendError(
                    f"this Simulation's {self.backend} buffers belong to process "
                    f"{self._pid}, of which this process ({os.getpid()}) is a fork: "
                    f"{why}. save() a checkpoint there and Simulation.load it here, or "
                    f"start workers with multiprocessing's \"spawn\" method")
        return session

    @property
    def _run_field(self):
        """The field the session runs: the lowered one when it has observers."""
        return self._field if self._lowered is None else self._lowered.field

    def _prepare(self, params):
        a = self._args
        return prepare(self._run_field, a["h0"], params or None, a["inputs"], a["dims"],
                       a["dtype"], a["dt"], None, a["t0"], None, a["adaptive"], None,
                       a["seed"])

    # --- running ---------------------------------------------------------------------
    def advance(self, steps=None, *, until=None) -> "Simulation":
        """Run ``steps`` more steps (None: the solve statement's ``steps``), or up to the
        first step time at or after ``until``; returns the simulation."""
        with self._lock, Located(self._text, self._filename):
            self._live()
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
            if self._step + steps > INT32_MAX:
                raise CallError(f"advance({steps}) would run past step {INT32_MAX}: a "
                                f"Simulation numbers its steps with 32-bit ints (the "
                                f"builtin step, the noise counter), so step + steps must be "
                                f"at most {INT32_MAX} (the simulation is at step "
                                f"{self._step}); go on in a new Simulation from sim.states "
                                f"with t0=sim.until (and another seed: its noise counter "
                                f"starts again at 0)")
            self._run(self._step, steps)
            return self

    def _run(self, step0: int, steps: int) -> None:
        """The session's steps [step0, step0 + steps). Interrupted (Ctrl-C) part way, the
        simulation counts the steps the session finished (or none, where the session went
        back to the state before the advance), and deposits the flux on that state when
        it is next read."""
        session = self._live()
        self._cache = {}
        try:
            session.advance(step0, steps)
        except BaseException:
            self._step, self._flux_due = session.step, True
            raise
        self._step, self._flux_due = step0 + steps, False

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
        if self._pending is not None and u < self._pending:
            raise CallError(f"until={until} is before {self._pending}, where the "
                            f"interrupted advance was going (some trajectories may be "
                            f"past {until} already): advance(until=t) with t >= "
                            f"{self._pending}")
        session = self._live()
        self._cache = {}
        try:
            session.advance_to(u)
        except BaseException:
            self._pending = max(u, self._pending or u)
            raise
        self._until, self._pending = u, None
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
        return min(n, INT32_MAX + 1) - self._step      # (past the last step: refused)

    # --- reading (on access, kept until the next change) ------------------------------
    def _read(self, what: str, make):
        """``make()``'s value (a session reader's name, or a function of the session),
        kept until the next change."""
        with self._lock:
            session = self._live()
            if self._pending is not None:
                raise CallError(f"the last advance(until={self._pending}) was interrupted "
                                f"part way (each trajectory is somewhere before it): "
                                f"advance(until=t) with t >= {self._pending} again before "
                                f"reading the simulation")
            hit = self._cache.get(what)
            if hit is None:
                if what == "outputs" and self._flux_due:
                    self._cache = {}
                    session.advance(self._step, 0)      # flux on the state reached
                    self._flux_due = False
                hit = self._cache[what] = (getattr(session, make)() if isinstance(make, str)
                                           else make())
            return hit

    @property
    def states(self) -> np.ndarray:
        """The current states, grid_shape (+ (n_states,)), as run_field returns them."""
        states = self._read("states", "states")
        if self._lowered is None:
            return states.copy()
        n = self._lowered.first_row
        return np.array(states[..., 0] if n == 1 else states[..., :n])

    @property
    def observed(self) -> dict:
        """The observers (``observe`` statements) so far: name -> grid_shape array, as
        Solution.observed (an average over t0 to the simulation's time)."""
        if self._lowered is None:
            return {}
        sol = Solution(states=self._read("states", "states"), outputs={},
                       steps_taken=self.steps_taken, t=self.t)
        t = self._prepared.template
        return split_observers(sol, self._lowered, t.t0, t.dtype).observed

    @property
    def steps_taken(self) -> np.ndarray:
        return self._read("taken", "steps_taken").copy()

    @property
    def outputs(self) -> dict:
        """Flux deposited on the current state (the outputs of a run that ended here); for
        an adaptive method, once every trajectory has ended (at t1 or earlier), the
        outputs of the one solve."""
        out = self._read("outputs", "outputs")
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
            return self._read("t", "times").copy()
        return self._read("t", lambda: self._time(self.steps_taken)).copy()

    @property
    def status(self) -> np.ndarray:
        """int8, grid_shape: a Solution's status (fixed-step methods: 0, they end every
        step they take)."""
        if self._adaptive is not None:
            return self._read("status", "status_codes").copy()
        return self._read("status", lambda: np.zeros(self._prepared.grid_shape,
                                                     np.int8)).copy()

    @property
    def steps_rejected(self) -> np.ndarray:
        """int32, grid_shape: step attempts rejected so far (0 for fixed-step methods)."""
        if self._adaptive is not None:
            return self._read("rejected", "steps_rejected").copy()
        return self._read("rejected", lambda: np.zeros(self._prepared.grid_shape,
                                                       np.int32)).copy()

    @property
    def until(self) -> float:
        """An adaptive Simulation's time: the last advance's ``until`` (t0 at first)."""
        self._live()
        if self._adaptive is None:
            return float(self._time(self._step))
        return self._until

    @property
    def step(self) -> int:
        """Steps run so far (the next step's number); for an adaptive method (its
        trajectories take steps of their own) see steps_taken."""
        self._live()
        if self._adaptive is not None:
            raise CallError("an adaptive method's trajectories take steps of their own: "
                            "read sim.steps_taken (and sim.until)")
        return self._step

    def solution(self) -> Solution:
        """The current state as a Solution (what vgpu.solve over the steps so far returns)."""
        with self._lock:
            outputs = self._read("outputs", "outputs")
            sol = Solution(states=self.states, outputs={k: v.copy() for k, v in
                                                        (outputs or {}).items()},
                           steps_taken=self.steps_taken, status=self.status, t=self.t,
                           steps_rejected=self.steps_rejected, backend=self.backend,
                           labels=labelled.of(self._field, self._args["params"]),
                           state_names=self._field.state_names, observed=self.observed)
            return sol

    def _time(self, n):
        t = self._prepared.template
        cast = t.dtype.type
        return (cast(t.t0) + np.asarray(n).astype(t.dtype) * cast(t.dt)).astype(t.dtype)

    # --- changing ----------------------------------------------------------------------
    def set_params(self, params=None, **more) -> "Simulation":
        """New values for some params (a scalar, or an array of the grid's shape), in
        force from the next step; the others keep theirs."""
        with self._lock, Located(self._text, self._filename), self._memory():
            self._live()
            self._fixed_only("set_params")
            new = {**self._args["params"], **_own_all({**(params or {}), **more})}
            prepared, data = self._prepare(new)
            self._args["params"] = new
            self._cache = {}
            if prepared is self._prepared:
                self._session.set_data(data)        # the same signature: values only
                self._run(self._step, 0)            # (flux, with the new values)
                return self
            snap = self._session.snapshot(self._step)
            snap.slope = None                   # (F at the state: of the old values)
            session, _ = _open(prepared, data, self.backend)
            session.restore(snap)
            session.advance(self._step, 0)      # (outputs: flux on the state restored)
            self._session.close()
            self._session, self._prepared, self._flux_due = session, prepared, False
            return self

    def set_input(self, name: str, array) -> "Simulation":
        """A new value of input ``name`` (its shape unchanged), read from the next step."""
        with self._lock, Located(self._text, self._filename):
            self._live()
            self._fixed_only("set_input")
            t = self._prepared.template
            if name not in t.inputs:
                raise CallError(f"field {self._field.name} has no input {name!r} (inputs: "
                                f"{', '.join(t.inputs) or 'none'})")
            a = np.array(array, dtype=t.dtype)      # (a copy: never the caller's array)
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
            self._run(0, steps)

    def set_state(self, states) -> "Simulation":
        """Replace the current state: an array shaped as ``states`` (every state)."""
        with self._lock, Located(self._text, self._filename):
            self._live()
            self._fixed_only("set_state")
            t, f = self._prepared.template, self._field
            n_states = len(f.states)        # (the observers keep their values)
            want = t.grid_shape + ((n_states,) if n_states > 1 else ())
            try:
                a = np.array(states, dtype=t.dtype)     # (a copy: never the caller's)
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
            snap.slope = None                   # (F at the state: of the old state)
            snap.state = np.concatenate([np.ascontiguousarray(a.reshape(-1, n_states).T),
                                         snap.state[n_states:]]).astype(snap.state.dtype)
            if self._step == 0:
                snap.init = snap.state.copy()
            self._cache = {}
            self._session.restore(snap)
            self._run(self._step, 0)
            return self

    # --- checkpoints ---------------------------------------------------------------------
    def save(self, path) -> None:
        """Write a checkpoint (.npz): program text, arguments, state, step, counters and
        the noise position (the seed and the step: Philox is counter-based)."""
        with self._lock:
            self._live()
            if self._pending is not None:
                raise CallError(f"the last advance(until={self._pending}) was interrupted "
                                f"part way: advance(until=t) with t >= {self._pending} "
                                f"again before saving")
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
        ``backend=``): it continues bit for bit as the saved one would have. A file that
        is not a whole checkpoint (damaged, cut short, arrays of other shapes than its
        run's) is a CallError naming it."""
        args, snap = read_checkpoint(path, FORMAT)
        if backend is not None:
            args["backend"] = backend
        sim = cls(Source(args.pop("text"), args.pop("filename")), args.pop("h0"), **args)
        with sim._lock, sim._memory():
            check_snapshot(snap, path, len(sim._run_field.states),
                           math.prod(sim._prepared.grid_shape), sim._adaptive is not None)
            sim._session.restore(snap)
            if sim._adaptive is None:
                sim._run(snap.step, 0)
            else:
                sim._until = float(snap.controller["until"])
            sim._step = snap.step
            sim._cache = {}
        return sim

    # --- the end -------------------------------------------------------------------------
    def close(self) -> None:
        """Give back the device buffers now (also done when the simulation is collected);
        every use after it is a CallError. Closing again does nothing."""
        with self._lock:
            session, self._session, self._closed = self._session, None, True
            if session is None:
                return
            if self._pid != os.getpid() and registry.get(self.backend).gpu:
                return      # a fork's copy of another process's buffers: only forgotten
            session.close()

    def __enter__(self) -> "Simulation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __reduce_ex__(self, protocol):
        raise NotPicklable(
            f"a Simulation cannot be pickled or copied: its run lives in the {self.backend} "
            f"backend's buffers; sim.save(path) writes a checkpoint and "
            f"vgpu.Simulation.load(path) resumes it (bit for bit, on any backend)")

    def __repr__(self) -> str:
        if self._session is None:
            state = "closed" if self._closed else "not made"
            return f"<Simulation of field {self._field.name}: {state}>"
        where = (f"step {self._step}" if self._adaptive is None else
                 f"t = {self._until} of t1 = {self._adaptive.t1}")
        return (f"<Simulation of field {self._field.name} on {self.backend}: "
                f"{math.prod(self._prepared.grid_shape)} trajectories, {where}>")


class _OutOfMemory:
    """A MemoryError inside: a CallError naming the size, as run_field's."""

    def __init__(self, sim: Simulation):
        self.sim = sim

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if kind is None or not issubclass(kind, MemoryError):
            return False
        sim = self.sim
        if sim._field is None:
            return False
        raise CallError(_out_of_memory(sim._field, sim._prepared)).with_source(
            sim._text, sim._filename) from None


def _own_all(arrays):
    """A mapping's arrays copied (anything else is left to the call's own checks)."""
    if not isinstance(arrays, Mapping):
        return arrays
    return {k: _own(v) for k, v in arrays.items()}


def _own(value):
    """A copy of an array argument (a scalar as it is; what does not convert is left to
    the call's own checks)."""
    if value is None or isinstance(value, (int, float, complex, str, bytes, np.generic)):
        return value
    try:
        return np.array(value)
    except (TypeError, ValueError):
        return value


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
    refuse_observers(backend, prepared.template.field)
    return backend.open(prepared, data)
