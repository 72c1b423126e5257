"""Ensembles on a Dask cluster (vgpu_compiler/distributed): a LocalCluster of 2 worker
processes with 1 thread each, on the loopback interface, shared by the module.

Every result is compared with a local run of the same call, bit for bit: a block runs
its window of the grid with global indices and the whole grid's dims (call/window.py,
tested on its own in test_window.py), so its rows are exactly the local run's."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

import dask
import dask.array as da
from distributed import Client, LocalCluster

import vgpu
from field_examples import LORENZ, SETTLE_COUNT
from vgpu_compiler.distributed.ensemble import compute

ROOT = Path(__file__).resolve().parents[2]
HISTOGRAM = (ROOT / "examples" / "histogram.field").read_text()
CONVERGE = (ROOT / "examples" / "converge.field").read_text()
RNG = np.random.default_rng(1616)


@pytest.fixture(scope="module")
def client():
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           host="127.0.0.1", dashboard_address=None, worker_dashboard_address=None)
    c = Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def test_a_lorenz_sweep_on_dask_arrays_is_the_local_run(client):
    h0 = RNG.normal(size=(4096, 3)).astype(np.float32)
    rho = np.linspace(0, 30, 4096).astype(np.float32)
    local = vgpu.solve(LORENZ, h0, params={"rho": rho}, steps=300, save_every=100)
    lazy = vgpu.solve(LORENZ, da.from_array(h0, chunks=(1024, 3)),
                      params={"rho": da.from_array(rho, chunks=512)}, steps=300, save_every=100)
    assert lazy.states.chunks == ((1024,) * 4, (3,))        # like h0 (the first dask array)
    got = compute(lazy)
    np.testing.assert_array_equal(got.states, local.states)
    np.testing.assert_array_equal(got.history, local.history)
    np.testing.assert_array_equal(got.times, local.times)
    np.testing.assert_array_equal(got.steps_taken, local.steps_taken)
    assert list(got.backend) == [local.backend] * 4       # each block says where it ran
    # run_field gives the states alone; numpy inputs with chunks= give the same
    states = vgpu.run_field(LORENZ, h0, params={"rho": rho}, steps=300, chunks=1000)
    assert isinstance(states, da.Array) and states.chunks[0] == (1000, 1000, 1000, 1000, 96)
    np.testing.assert_array_equal(states.compute(), local.states)


def test_basins_with_collapse_and_flux_on_the_cluster_are_the_local_run(client):
    """Blocks of whole basins (4 rows): a chunk boundary inside a basin moves down to
    one; steps taken and states side by side, counts summed by a tree reduction."""
    local = vgpu.solve(SETTLE_COUNT, dims={"N": 64})
    lazy = vgpu.solve(SETTLE_COUNT, dims={"N": 64}, chunks=(6, 10, 16, 32))
    assert lazy.states.chunks[0] == (4, 12, 16, 32)
    got = compute(lazy)
    assert len(set(local.steps_taken[:, 0].tolist())) > 3
    np.testing.assert_array_equal(got.states, local.states)
    np.testing.assert_array_equal(got.steps_taken, local.steps_taken)
    np.testing.assert_array_equal(got.outputs["hist"], local.outputs["hist"])
    # and a field reading the global i and the whole N, its counts from many blocks
    local = vgpu.solve(HISTOGRAM, dims={"N": 5000}, steps=400)
    counts = vgpu.solve(HISTOGRAM, dims={"N": 5000}, steps=400, chunks=250).outputs["counts"]
    np.testing.assert_array_equal(counts.compute(), local.outputs["counts"])


def test_one_compile_per_kernel_on_each_worker(client):
    """Eight equal blocks of a field no other test runs: a worker compiles its kernel
    once and every later block on it is a memory hit (cache_stats through client.run)."""
    x0 = np.linspace(-3, 3, 8 * 512).astype(np.float32)
    before = client.run(vgpu.cache_stats)
    got = vgpu.run_field(CONVERGE, x0, chunks=512, steps=50).compute()
    after = client.run(vgpu.cache_stats)
    np.testing.assert_array_equal(got, vgpu.run_field(CONVERGE, x0, steps=50))
    ran = {w: after[w]["dispatches"] - before[w]["dispatches"] for w in after}
    compiles = {w: after[w]["compiles"] - before[w]["compiles"] for w in after}
    hits = {w: after[w]["memory_hits"] - before[w]["memory_hits"] for w in after}
    assert sum(ran.values()) >= 8
    for w in after:
        if ran[w]:
            assert compiles[w] == 1, (compiles, ran)
            assert hits[w] == ran[w] - 1, (hits, ran)   # every later block: a memory hit
        else:
            assert compiles[w] == 0


def test_an_error_in_a_block_reaches_the_caller_as_the_same_vgpu_error(client):
    """A read out of range only in the second block: the caller gets ProgramIndexError
    with its message, and no result."""
    src = """
field reader {
    input w[4]
    grid i < N
    state x = 0
    dx/dt = w[i]
    solve euler(dt = 1, steps = 1)
}
"""
    w = np.arange(4, dtype=np.float32)
    with pytest.raises(vgpu.ProgramIndexError) as local:
        vgpu.run_field(src, inputs={"w": w}, dims={"N": 8})
    lazy = vgpu.run_field(src, inputs={"w": w}, dims={"N": 8}, chunks=4)
    with pytest.raises(vgpu.ProgramIndexError) as remote:
        lazy.compute()
    assert remote.value.message == local.value.message
    assert "index out of range: w[4]" in remote.value.message
    # a mistake in the call itself is raised at once, on the client, as locally
    with pytest.raises(vgpu.ShapeError, match="h0 must have shape"):
        vgpu.run_field(LORENZ, da.zeros((10, 2), chunks=5))


def test_a_worker_killed_during_a_run_leaves_the_result_identical(client):
    """SIGKILL to a worker while it runs a block: Dask runs its blocks again on the
    workers left (and the nanny's new one), and the result is the local run's."""
    n, steps = 4 * 4096, 30000
    h0 = RNG.normal(size=(n, 3)).astype(np.float32)
    began = time.perf_counter()             # steps for a block of about a second here,
    vgpu.run_field(LORENZ, h0[:4096], steps=steps)      # whatever the backend's speed
    steps = int(steps * min(100.0, max(1.0, 1.0 / (time.perf_counter() - began))))
    local = vgpu.run_field(LORENZ, h0, steps=steps)
    lazy = vgpu.run_field(LORENZ, h0, steps=steps, chunks=4096)
    future = client.compute(lazy)
    deadline = time.monotonic() + 60
    victim = None
    while victim is None and time.monotonic() < deadline:
        busy = [w for w, keys in client.processing().items() if keys]
        if busy:
            victim = busy[0]
        else:
            time.sleep(0.02)
    assert victim is not None, "no block started within a minute"
    pid = client.run(os.getpid, workers=[victim])[victim]
    time.sleep(0.1)                         # inside the block's run
    assert client.processing()[victim] and not future.done()
    os.kill(pid, signal.SIGKILL)
    got = future.result(timeout=300)
    np.testing.assert_array_equal(got, local)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)                     # that worker is gone: others did its work


def test_vgpuc_run_on_a_scheduler_and_on_a_local_cluster(client, tmp_path, capsys):
    """--scheduler ADDRESS --chunks N: the same arrays as a local `vgpuc run`; the
    summary says where the blocks ran; --scheduler local starts a cluster of its own."""
    from vgpu_compiler.cli.main import main
    field = str(ROOT / "examples" / "histogram.field")
    common = [field, "--dim", "N=3000", "--steps", "300"]
    assert main(["run", *common, "-o", str(tmp_path / "local.npz")]) == 0
    address = client.scheduler.address
    assert main(["run", *common, "-o", str(tmp_path / "cluster.npz"),
                 "--scheduler", address, "--chunks", "5"]) == 0
    local, cluster = np.load(tmp_path / "local.npz"), np.load(tmp_path / "cluster.npz")
    assert sorted(local.files) == sorted(cluster.files)
    for name in local.files:
        np.testing.assert_array_equal(cluster[name], local[name])
    capsys.readouterr()
    assert main(["run", *common, "--scheduler", "local", "--chunks", "3"]) == 0
    out = capsys.readouterr().out
    assert "blocks: 3 (3 on " in out and "output counts" in out
    assert main(["run", *common, "--chunks", "3"]) == 2         # --chunks needs --scheduler
    assert "give --scheduler" in capsys.readouterr().err


def test_vgpu_never_imports_dask_for_a_local_call():
    """dask is imported only by a call given dask arrays or chunks=."""
    import subprocess
    import sys
    code = ("import sys, numpy as np, vgpu\n"
            "vgpu.run_field('field f { state x\\n dx/dt = -x\\n solve euler(dt = 0.1, steps = 2) }',"
            " np.ones(4, np.float32), backend='numpy')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_noisy_field_and_an_adaptive_one_on_the_cluster_are_the_local_run(client):
    """Noise: each block's Philox counters take the global trajectory index; tsit5: every
    per-trajectory array of the Solution (t, status, steps rejected) comes back blocked."""
    ou = (ROOT / "examples" / "ou.field").read_text()
    x0 = np.zeros(3000, np.float32)
    local = vgpu.run_field(ou, x0, steps=100, seed=42)
    got = vgpu.run_field(ou, da.from_array(x0, chunks=700), steps=100, seed=42).compute()
    np.testing.assert_array_equal(got, local)
    tsit5 = (ROOT / "examples" / "lorenz_tsit5.field").read_text()
    h0 = RNG.normal(size=(1000, 3)).astype(np.float32)
    local = vgpu.solve(tsit5, h0, t1=0.3)
    lazy = vgpu.solve(tsit5, h0, t1=0.3, chunks=300)
    assert lazy.t.chunks == ((300, 300, 300, 100),)
    got = compute(lazy)
    for name in ("states", "t", "status", "steps_taken", "steps_rejected"):
        np.testing.assert_array_equal(getattr(got, name), getattr(local, name), err_msg=name)
