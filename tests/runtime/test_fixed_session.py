"""runtime/fixed_session.py's FixedSession on a Target with no device (a numpy kernel of
named buffers): the same driver glsl's and wgpu's Simulation run on, checked where no
GPU is. The kernel: x <- x * (1 - k dt) each step, the flux S = sum(x) at the final
step; its buffers hold the run between trips, as a device's do."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from vgpu_compiler.runtime import fixed
from vgpu_compiler.runtime.fixed_session import FixedSession

DT = 0.125
N = 5


class HostTarget:
    """The Target a FixedSession drives: begin (sizes, writes), trip, check, read."""

    def __init__(self, bound, chunks):
        self.bound, self.chunks, self.cap, self.aim = bound, chunks, 3, 0.2
        self.layout = fixed.Layout(N, 1, np.dtype(np.float64), 0, 0, False, False, (),
                                   bound.output_shapes)
        self.kernel = SimpleNamespace(meta={"uses_init": False, "n_deposits": 0})
        self.inputs, self.pt, self.outputs = [], ["k"], [("b_out", "S", 8)]
        self.buffers, self.written, self.trips = {}, [], []

    def first(self, ci):
        return 2

    def begin(self, ci, sizes, writes):
        self.chunk = self.chunks[ci]
        for name, size in sizes.items():
            if len(self.buffers.get(name, b"")) < size:
                self.buffers[name] = bytearray(size)
        for name, data in writes:
            self.buffers[name] = bytearray(bytes(data))
            self.written.append(name)

    def trip(self, uniforms, sizes, writes, reads):
        a, b = self.chunk
        x = np.frombuffer(self.buffers["b_state"], np.float64)[:b - a].copy()
        k = np.frombuffer(self.buffers["b_params"], np.float64)[:b - a]
        for _ in range(uniforms["u_nsteps"]):
            x = x * (1 - k * DT)
        self.buffers["b_state"][:x.nbytes] = x.tobytes()
        if uniforms["u_final"]:
            out = np.frombuffer(self.buffers["b_out"], np.float64) + x.sum()
            self.buffers["b_out"][:] = out.tobytes()
        self.trips.append(uniforms["u_nsteps"])
        return [bytes(16)] + self.read(reads)

    def check(self, err):
        assert err == bytes(16)

    def read(self, reads):
        return [bytes(self.buffers[name][:size]) for name, size in reads]

    def rebind(self, bound):
        self.bound = bound


def _bound(k):
    prepared = SimpleNamespace()
    prepared.bound = lambda data: _bound(data)
    return SimpleNamespace(h0=np.linspace(1, 2, N), n_trajectories=N, grid_shape=(N,),
                           field=SimpleNamespace(states=[SimpleNamespace(init=None)]),
                           dtype=np.dtype(np.float64), inputs={}, output_shapes={"S": ()},
                           params={"k": np.asarray(k, np.float64)}, prepared=prepared)


def _session(chunks):
    bound = _bound(np.linspace(0.5, 1.5, N))
    return FixedSession(HostTarget(bound, chunks), bound)


@pytest.mark.parametrize("chunks", [[(0, N)], [(0, 2), (2, N)]])
def test_an_advance_runs_its_steps_paced_and_uploads_what_changed(chunks):
    s = _session(chunks)
    h0, k = np.linspace(1, 2, N), np.linspace(0.5, 1.5, N)
    s.advance(0, 4)
    s.advance(4, 7)
    assert s.step == 11
    np.testing.assert_allclose(s.states(), h0 * (1 - k * DT) ** 11)
    np.testing.assert_allclose(s.outputs()["S"], (h0 * (1 - k * DT) ** 11).sum())
    t = s.target
    assert max(t.trips) <= t.cap and sum(t.trips) == 11 * len(chunks)
    if len(chunks) == 1:    # the device holds the run: the second advance zeroes the flux
        assert t.written == ["b_out", "b_state", "b_params", "b_out"]
    else:                   # each chunk's arrays wait on the host
        assert t.written.count("b_state") == 4 and t.written.count("b_out") == 2
    snap = s.snapshot(11)
    s.set_data(np.full(N, 2.0))             # new per-trajectory params: written once
    del t.written[:]
    s.advance(11, 2)
    np.testing.assert_allclose(s.states(), snap.state[0] * (1 - 2.0 * DT) ** 2)
    assert t.written.count("b_params") == len(chunks)
    s.restore(snap)                          # a checkpoint: the state written again
    assert s.step == 11
    np.testing.assert_allclose(s.states(), snap.state[0])
    np.testing.assert_array_equal(s.steps_taken(), np.full(N, 11))
