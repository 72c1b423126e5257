"""call/progress.py: the tqdm bar behind `vgpuc run` and solve(progress=True).

The bar is fed what the backends feed it, so the backends' calls are checked
here too: cumulative, never decreasing, one total, ending at (total, total).
"""
from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

import vgpu
from vgpu_compiler.call import progress
from vgpu_compiler.call.progress import bar

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def _lines(text: str) -> list[str]:
    """What a terminal shows: each \\r-separated redraw, in order."""
    return [part for line in text.split("\n") for part in line.split("\r") if part]


def test_draws_the_label_and_done_over_total_on_a_terminal():
    stream = FakeTTY()
    with bar("lorenz", stream=stream, delay=0.0) as steps:
        for done in (0, 250, 500, 1000):
            steps(done, 1000)
    text = stream.getvalue()
    last = _lines(text)[-1]
    assert last.startswith("lorenz:") and "100%" in last and "1000/1000" in last
    assert "steps/s" in last                            # the unit
    assert text.endswith("\n") and text.count("\n") == 1   # close() ended the one line


def test_redraws_mid_run_once_the_delay_has_passed():
    stream = FakeTTY()
    steps = bar("heat", stream=stream, delay=0.05)
    steps(0, 10)
    assert stream.getvalue() == ""                      # before the delay: nothing
    time.sleep(0.15)                                    # past delay and tqdm's 0.1 s throttle
    steps(4, 10)
    mid = stream.getvalue()
    assert "4/10" in mid and "heat:" in mid and not mid.endswith("\n")
    steps(10, 10)
    steps.close()
    assert "10/10" in _lines(stream.getvalue())[-1]
    assert stream.getvalue().endswith("\n")


def test_a_quick_run_prints_nothing_with_the_default_delay():
    stream = FakeTTY()
    with bar("quick", stream=stream) as steps:
        steps(5, 10)
        steps(10, 10)
    assert stream.getvalue() == ""
    assert progress.DELAY > 0


def test_nothing_off_a_terminal_or_when_disabled():
    plain = io.StringIO()
    with bar("x", stream=plain, delay=0.0) as steps:
        steps(5, 10)
        steps(10, 10)
    silenced = FakeTTY()
    with bar("x", stream=silenced, enabled=False, delay=0.0) as steps:
        steps(5, 10)
        steps(10, 10)
    assert plain.getvalue() == "" and silenced.getvalue() == ""


def test_enabled_forces_a_bar_off_a_terminal():
    plain = io.StringIO()
    with bar("forced", stream=plain, enabled=True, delay=0.0) as steps:
        steps(10, 10)
    assert "10/10" in _lines(plain.getvalue())[-1]


def test_default_stream_is_stderr_at_call_time(monkeypatch):
    stream = FakeTTY()
    monkeypatch.setattr(sys, "stderr", stream)
    with bar("err", delay=0.0) as steps:
        steps(3, 3)
    assert "3/3" in stream.getvalue()


def test_a_repeated_final_call_and_a_second_close_change_nothing():
    # The GLSL runner reports (total, total) after its last chunk already did.
    stream = FakeTTY()
    steps = bar("g", stream=stream, delay=0.0)
    steps(7, 7)
    steps(7, 7)
    steps.close()
    once = stream.getvalue()
    steps.close()
    steps(7, 7)                                          # after close: ignored
    assert stream.getvalue() == once
    assert steps.tqdm.n == 7 and once.count("\n") == 1


def test_a_run_of_no_steps_draws_nothing():
    stream = FakeTTY()
    with bar("empty", stream=stream) as steps:
        steps(0, 0)
    assert stream.getvalue() == "" and steps.tqdm.n == 0


def test_total_given_up_front_or_by_the_first_call():
    up_front = bar("a", total=50, stream=FakeTTY())
    assert up_front.tqdm.total == 50
    up_front.close()
    later = bar("b", stream=FakeTTY())
    later(10, 40)
    assert (later.tqdm.total, later.tqdm.n) == (40, 10)
    later.close()


def test_a_decrease_follows_the_caller():
    # No backend does this (see below); the counter still tracks `done` exactly.
    steps = bar("d", stream=FakeTTY(), delay=0.0)
    steps(8, 10)
    steps(3, 10)
    assert steps.tqdm.n == 3
    steps(10, 10)
    assert steps.tqdm.n == 10
    steps.close()


def _drain(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:                     # EIO: the other side is closed and read
            return out
        if not chunk:
            return out
        out += chunk


@pytest.mark.parametrize("size", [(0, 0), (24, 100)])
def test_draws_on_a_real_terminal_even_one_that_reports_no_size(size, monkeypatch):
    # A bare pty says 0 x 0, and tqdm alone then draws nothing at all on stderr
    # (it asks stderr and stdout, not other streams, for their size).
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *size, 0, 0))
    with os.fdopen(slave, "w") as stream, monkeypatch.context() as patch:
        patch.setattr(sys, "stderr", stream)          # put back before the pty closes
        with bar("pty", delay=0.0) as steps:
            assert stream.isatty()
            steps(6, 10)
            steps(10, 10)
    text = _drain(master).decode()
    os.close(master)
    assert "pty:" in text and "10/10" in _lines(text.replace("\r\n", "\n"))[-1]
    assert text.endswith("\r\n")           # close() ended the line (the pty adds the \r)


def test_importing_vgpu_does_not_import_tqdm():
    code = "import sys, vgpu; print('tqdm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# --- what the backends feed a bar ----------------------------------------------------
RUNS = {
    # lorenz in several dispatches (save_every) and barrier's early collapse
    "lorenz": (EXAMPLES / "lorenz.field", np.zeros((8, 3), np.float32) + 1.0,
               dict(steps=400, save_every=100)),
    "barrier": (EXAMPLES / "barrier.field",
                np.random.default_rng(0).uniform(-2, 2, 128).astype(np.float32), {}),
}


@pytest.mark.parametrize("backend", ["numpy", "glsl", "wgpu"])
@pytest.mark.parametrize("name", sorted(RUNS))
def test_backends_report_cumulative_steps_ending_at_the_total(name, backend, request):
    if backend != "numpy":
        request.getfixturevalue(backend)        # conftest: fails without the device (CI)
    path, h0, kw = RUNS[name]
    calls = []
    sol = vgpu.solve(vgpu.load(path), h0, backend=backend,
                     progress=lambda done, total: calls.append((done, total)), **kw)
    totals = {t for _, t in calls}
    dones = [d for d, _ in calls]
    assert len(totals) == 1 and calls[-1] == (totals.pop(),) * 2
    assert dones == sorted(dones) and dones[0] > 0
    if name == "barrier":          # collapsed early, yet the bar still ends full
        assert int(np.max(sol.steps_taken)) < calls[-1][1]
    stream = FakeTTY()
    with bar(name, stream=stream, delay=0.0) as steps:
        for call in calls:
            steps(*call)
    total = calls[-1][1]
    assert f"{total}/{total}" in _lines(stream.getvalue())[-1]


@pytest.mark.parametrize("backend", ["numpy", "glsl", "wgpu"])
def test_solve_with_progress_true_draws_a_bar_named_for_the_field(backend, monkeypatch,
                                                                   request):
    if backend != "numpy":
        request.getfixturevalue(backend)
    stream = FakeTTY()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(progress, "DELAY", 0.0)
    src = (EXAMPLES / "lorenz.field").read_text()
    h0 = np.ones((64, 3), np.float32)
    sol = vgpu.solve(src, h0, backend=backend, steps=300, progress=True)
    want = vgpu.run_field(src, h0, backend=backend, steps=300)
    np.testing.assert_array_equal(sol.states, want)
    shown = _lines(stream.getvalue())
    assert shown and shown[-1].startswith("lorenz") and "300/300" in shown[-1]
    assert stream.getvalue().endswith("\n")         # the bar was closed


def test_solve_with_progress_false_draws_nothing(monkeypatch):
    stream = FakeTTY()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(progress, "DELAY", 0.0)
    src = (EXAMPLES / "lorenz.field").read_text()
    vgpu.solve(src, np.ones((4, 3)), backend="numpy", steps=50, progress=False)
    assert stream.getvalue() == ""
