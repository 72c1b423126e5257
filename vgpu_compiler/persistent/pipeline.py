"""``vgpu.Pipeline``: fields run one after another whose arrays feed each other.

Each stage is a Simulation (simulation.py) that a ``run`` restarts from step 0 for its
steps. ``link(dst, "X", src, "Y")`` makes input ``X`` of stage ``dst`` read output ``Y``
of stage ``src`` (``None``: its states, grid-shaped, for a field of one state): where
the backend can, the input *is* the source's buffer on the device (glsl: one storage
buffer bound to both kernels), so a run moves nothing through the host; elsewhere
(numpy keeps arrays in memory; cpu, wgpu) the array is handed over before the stage
runs. A link may point backwards (a later stage's states feeding an earlier stage at
the next run: weights that an update stage changes).
"""
from __future__ import annotations

import threading

import numpy as np

from ..errors import ArgumentTypeError, CallError
from .simulation import Simulation


class Stage:
    """One field of a pipeline: its Simulation and the steps a run takes."""

    def __init__(self, sim: Simulation, steps: int, name: str):
        self.sim, self.steps, self.name = sim, steps, name

    @property
    def states(self) -> np.ndarray:
        return self.sim.states

    @property
    def outputs(self) -> dict:
        return self.sim.outputs

    def __repr__(self) -> str:
        return f"<Stage {self.name}: {self.sim!r}, {self.steps} steps a run>"


class Pipeline:
    """``Pipeline(backend="auto")``; ``add`` stages (the arguments of vgpu.Simulation, and
    ``steps``), ``link`` them, ``run()``. Every stage runs on the first stage's backend."""

    def __init__(self, backend: str = "auto"):
        self.backend = backend
        self.stages: list[Stage] = []
        self.copies: list[tuple] = []      # links the host hands over: (dst, input, src, what)
        self.on_device = 0                 # links that are one buffer on the device
        self._lock = threading.RLock()

    def add(self, src, h0=None, *, steps=None, name=None, **kwargs) -> Stage:
        with self._lock:
            backend = self.stages[0].sim.backend if self.stages else self.backend
            sim = Simulation(src, h0, backend=backend, **kwargs)
            steps = sim._program_steps if steps is None else steps
            if type(steps) is not int or steps < 0:
                raise ArgumentTypeError(f"steps must be a whole number >= 0, got {steps!r}")
            stage = Stage(sim, steps, name or sim._field.name)
            self.stages.append(stage)
            return stage

    def link(self, dst: Stage, input: str, src: Stage, output: str | None = None) -> bool:
        """Input ``input`` of ``dst`` reads ``output`` of ``src`` (None: its states); True
        when that is one buffer on the device (no copy)."""
        with self._lock:
            want = dst.sim._input_shape(input) if input in dst.sim._prepared.template.inputs \
                else None
            if want is None:
                raise CallError(f"stage {dst.name} has no input {input!r}")
            have = self._shape(src, output)
            if tuple(have) != tuple(want):
                raise CallError(f"input {input} of stage {dst.name} has shape {want}, but "
                                f"{output or 'the states'} of stage {src.name} has shape "
                                f"{tuple(have)}")
            dst.sim.set_input(input, self._read(src, output))
            if dst.sim._session.alias_input(input, src.sim._session, output):
                self.on_device += 1
                return True
            self.copies.append((dst, input, src, output))
            return False

    @staticmethod
    def _shape(src: Stage, output) -> tuple:
        t = src.sim._prepared.template
        if output is None:
            if len(src.sim._field.states) != 1:
                raise CallError(f"stage {src.name} has {len(src.sim._field.states)} states: "
                                f"link one of its outputs, or a field of one state")
            return t.grid_shape
        if output not in t.output_shapes:
            raise CallError(f"stage {src.name} has no output {output!r}")
        return t.output_shapes[output]

    @staticmethod
    def _read(src: Stage, output) -> np.ndarray:
        return src.sim.states if output is None else src.sim.outputs[output]

    def run(self, times: int = 1) -> "Pipeline":
        """Run every stage in order, ``times`` times."""
        with self._lock:
            for _ in range(times):
                for stage in self.stages:
                    for dst, name, src, output in self.copies:
                        if dst is stage:
                            dst.sim.set_input(name, self._read(src, output))
                    stage.sim._rerun(stage.steps)
            return self

    def close(self) -> None:
        with self._lock:
            for stage in reversed(self.stages):
                stage.sim.close()

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
