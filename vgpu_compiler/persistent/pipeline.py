"""``vgpu.Pipeline``: fields run one after another whose arrays feed each other.

Each stage is a Simulation (simulation.py) that a ``run`` restarts from step 0 for its
steps. ``link(dst, "X", src, "Y")`` makes input ``X`` of stage ``dst`` read output ``Y``
of stage ``src`` (``None``: its states, grid-shaped, for a field of one state): where
the backend can, the input *is* the source's buffer on the device (glsl: one storage
buffer bound to both kernels), so a run moves nothing through the host; elsewhere
(numpy keeps arrays in memory; cpu, wgpu) the array is handed over before the stage
runs. A link may point backwards (a later stage's states feeding an earlier stage at
the next run: weights that an update stage changes). Linking an input again replaces
its link. A stage whose ``set_params`` changes its call's signature gets a new session
(new buffers): before each stage runs, a link whose stages' sessions are not the ones
it joined is made again (the array handed over, the buffer shared if the new sessions
can), so it never reads a buffer the link no longer means.
"""
from __future__ import annotations

import threading
import weakref

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


class Link:
    """Input ``input`` of stage ``dst`` reads ``output`` of stage ``src``; ``device``: one
    buffer on the device, between the sessions ``joined`` names (weakly)."""

    def __init__(self, dst: Stage, input: str, src: Stage, output):
        self.dst, self.input, self.src, self.output = dst, input, src, output
        self.device = False
        self.joined: tuple = ()

    def current(self) -> bool:
        """Whether both stages still run on the sessions the link joined."""
        return bool(self.joined) and self.joined[0]() is self.dst.sim._session \
            and self.joined[1]() is self.src.sim._session


class Pipeline:
    """``Pipeline(backend="auto")``; ``add`` stages (the arguments of vgpu.Simulation, and
    ``steps``), ``link`` them, ``run()``. Every stage runs on the first stage's backend."""

    def __init__(self, backend: str = "auto"):
        self.backend = backend
        self.stages: list[Stage] = []
        self.links: dict = {}              # (dst stage, input) -> its Link
        self._lock = threading.RLock()

    @property
    def copies(self) -> list[tuple]:
        """The links the host hands over: (dst, input, src, output)."""
        return [(k.dst, k.input, k.src, k.output) for k in self.links.values()
                if not k.device]

    @property
    def on_device(self) -> int:
        """How many links are one buffer on the device."""
        return sum(k.device for k in self.links.values())

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
        """Input ``input`` of ``dst`` reads ``output`` of ``src`` (None: its states), in
        place of any earlier link of that input; True when that is one buffer on the
        device (no copy)."""
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
            link = self.links[(dst, input)] = Link(dst, input, src, output)
            self._join(link)
            return link.device

    def _join(self, link: Link) -> None:
        """Hand the array over and share the buffer where the sessions can (an earlier
        alias of the input is undone either way)."""
        dst, src = link.dst.sim, link.src.sim
        dst.set_input(link.input, self._read(link.src, link.output))
        link.device = dst._session.alias_input(link.input, src._session, link.output)
        link.joined = (weakref.ref(dst._session), weakref.ref(src._session))

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
                    for link in self.links.values():
                        if link.dst is not stage:
                            continue
                        if not link.current():      # a stage's session was replaced
                            self._join(link)
                        elif not link.device:
                            stage.sim.set_input(link.input, self._read(link.src,
                                                                       link.output))
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
