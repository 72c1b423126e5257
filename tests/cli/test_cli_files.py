"""vgpuc run's files: damaged array files are usage errors (exit 2) in .npz as in .npy,
an output that cannot be written is refused before the run, a failed write (a full
disk) leaves no partial file, and --seed out of range is a usage error."""
from __future__ import annotations

import errno
import importlib
import os
import warnings
import zipfile

import numpy as np
import pytest

cli_main = importlib.import_module("vgpu_compiler.cli.main")   # (the package's main is
                                                               # the function)

from test_cli import EXAMPLES, vgpuc, write  # noqa: F401  (the subprocess fixture)

SCALE = EXAMPLES / "scale.field"
# A run that fails (exit 1, index out of range): a usage error found first is exit 2.
OOB = ("field oob {\n  input A[K]\n  grid i < N\n  state x = 0\n"
       "  dx/dt = A[i]\n  solve euler(dt = 1, steps = 2)\n}\n")


# --- damaged array files ------------------------------------------------------------
def _truncated_npz(path):
    np.savez(path, states=np.ones(8))
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _object_npz(path):
    np.savez(path, states=np.array([1.0, "a", None], dtype=object))


def _corrupt_npz(path):
    """A whole zip whose entry's bytes changed: its CRC no longer matches."""
    np.savez(path, states=np.arange(64.0))
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))


def _corrupt_compressed_npz(path):
    """A compressed entry whose deflate stream is damaged (zlib's own error)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        import io
        buf = io.BytesIO()
        np.save(buf, np.arange(256.0))
        z.writestr("states.npy", buf.getvalue())
    data = bytearray(path.read_bytes())
    start = 30 + len("states.npy")          # the local header, then the deflate data
    for i in range(start + 2, start + 12):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def _empty_npz(path):
    path.write_bytes(b"")


def _truncated_npy(path):
    np.save(path, np.ones(8))
    data = path.read_bytes()
    path.write_bytes(data[:-8])


def _object_npy(path):
    np.save(path, np.array([1.0, "a", None], dtype=object))


DAMAGED = {"truncated.npz": _truncated_npz, "object.npz": _object_npz,
           "crc.npz": _corrupt_npz, "deflate.npz": _corrupt_compressed_npz,
           "empty.npz": _empty_npz, "truncated.npy": _truncated_npy,
           "object.npy": _object_npy}


@pytest.mark.parametrize("name", DAMAGED)
@pytest.mark.parametrize("option", ["--h0", "--input"])
def test_a_damaged_array_file_is_a_usage_error(vgpuc, tmp_path, name, option):  # noqa: F811
    DAMAGED[name](tmp_path / name)
    if option == "--h0":
        proc = vgpuc("run", SCALE, "--h0", name, "--backend", "numpy")
    else:
        write(tmp_path, "oob.field", OOB)
        proc = vgpuc("run", "oob.field", "--input", f"A={name}", "--dim", "N=2",
                     "--backend", "numpy")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"vgpuc run: error: {name}"), proc.stderr
    assert "Error:" not in proc.stderr          # no internal error's class name
    if name.startswith("object"):
        assert "object array" in proc.stderr


# --- outputs checked before the run -------------------------------------------------
@pytest.mark.parametrize("option,target", [("-o", "missing/out.npz"), ("-o", "missing/out.npy"),
                                           ("--plot", "missing/p.png")])
def test_an_output_into_a_missing_folder_fails_before_the_run(vgpuc, tmp_path,  # noqa: F811
                                                              option, target):
    if option == "--plot":
        pytest.importorskip("matplotlib")
    write(tmp_path, "oob.field", OOB)
    np.save(tmp_path / "a.npy", np.ones(3, np.float32))
    proc = vgpuc("run", "oob.field", "--input", "A=a.npy", "--dim", "N=5",
                 "--backend", "numpy", option, target)
    assert proc.returncode == 2, proc.stderr        # not the run's error (exit 1)
    assert f"{option} {target}: the folder" in proc.stderr
    assert "does not exist" in proc.stderr and "index out of range" not in proc.stderr


def test_an_output_that_is_a_folder_fails_before_the_run(vgpuc, tmp_path):  # noqa: F811
    (tmp_path / "out.npz").mkdir()
    write(tmp_path, "oob.field", OOB)
    np.save(tmp_path / "a.npy", np.ones(3, np.float32))
    proc = vgpuc("run", "oob.field", "--input", "A=a.npy", "--dim", "N=5", "-o", "out.npz")
    assert proc.returncode == 2, proc.stderr
    assert "-o out.npz: is a folder" in proc.stderr


def test_a_plot_format_matplotlib_cannot_write_fails_before_the_run(vgpuc,  # noqa: F811
                                                                    tmp_path):
    pytest.importorskip("matplotlib")
    proc = vgpuc("run", SCALE, "--dim", "N=4", "--plot", "p.xyz", "-o", "y.npy")
    assert proc.returncode == 1, proc.stderr
    assert "matplotlib cannot write .xyz files" in proc.stderr
    assert not (tmp_path / "y.npy").exists()


# --- in this process: a folder that cannot be written, a full disk --------------------
@pytest.fixture
def run_cli(monkeypatch, tmp_path):
    """``vgpuc ARGS`` in this process (so numpy or matplotlib can be made to fail), in
    tmp_path; returns the exit status (stderr: capsys)."""
    monkeypatch.setattr(cli_main, "_quiet_reporting", lambda: None)
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    monkeypatch.chdir(tmp_path)

    def call(*args):
        return cli_main.main([str(a) for a in args])
    return call


def test_a_folder_that_cannot_be_written_fails_before_the_run(run_cli, monkeypatch,
                                                              tmp_path, capsys):
    """(os.access is made to say no: this test may run as root, who may write anywhere.)"""
    from vgpu_compiler.cli import common
    (tmp_path / "ro").mkdir()
    ran = []
    real = os.access
    monkeypatch.setattr(common.os, "access", lambda path, mode: False if str(path).endswith(
        "ro") else real(path, mode))
    monkeypatch.setattr("vgpu_compiler.cli.run._solve", lambda *a: ran.append(a))
    for option, target in (("-o", "ro/out.npz"), ("--plot", "ro/p.png")):
        rc = run_cli("run", SCALE, "--dim", "N=4", option, target)
        err = capsys.readouterr().err
        assert rc == 2 and not ran, err
        assert f"{option} {target}: the folder" in err and "is not writable" in err


def _full_disk(write_some):
    """A writer that writes some bytes, then finds the disk full."""
    def fail(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)):
            with open(file, "wb") as fh:
                write_some(fh)
        else:
            write_some(file)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return fail


@pytest.mark.parametrize("target", ["out.npz", "out.npy"])
def test_a_full_disk_leaves_no_partial_output(run_cli, monkeypatch, tmp_path, capsys, target):
    fail = _full_disk(lambda fh: fh.write(b"PK\x03\x04" + bytes(100)))
    monkeypatch.setattr(np, "savez", fail)
    monkeypatch.setattr(np, "save", fail)
    rc = run_cli("run", SCALE, "--dim", "N=4", "--backend", "numpy", "-o", target, "-q")
    err = capsys.readouterr().err
    assert os.listdir(tmp_path) == []           # no output, no temporary file
    assert rc == 2, err
    assert f"cannot write {target} (-o): No space left on device" in err


def test_a_failed_write_keeps_the_old_output(run_cli, monkeypatch, tmp_path, capsys):
    rc = run_cli("run", SCALE, "--dim", "N=4", "--backend", "numpy", "-o", "out.npz", "-q")
    assert rc == 0
    before = (tmp_path / "out.npz").read_bytes()
    with np.load(tmp_path / "out.npz") as z:
        np.testing.assert_array_equal(z["states"], 2 * np.random.default_rng(0)
                                      .standard_normal(4).astype(np.float32))
    monkeypatch.setattr(np, "savez", _full_disk(lambda fh: fh.write(b"PK")))
    rc = run_cli("run", SCALE, "--dim", "N=4", "--backend", "numpy", "-o", "out.npz", "-q")
    assert rc == 2
    assert (tmp_path / "out.npz").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["out.npz"]


def test_the_output_file_has_the_usual_mode(run_cli, tmp_path):
    """(The temporary file is made 0600; the output gets what open() would give.)"""
    mask = os.umask(0o022)
    try:
        assert run_cli("run", SCALE, "--dim", "N=4", "--backend", "numpy", "-o", "y.npy",
                       "-q") == 0
    finally:
        os.umask(mask)
    assert (tmp_path / "y.npy").stat().st_mode & 0o777 == 0o644
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), 2 * np.random.default_rng(0)
                                  .standard_normal(4).astype(np.float32))


def test_a_full_disk_leaves_no_partial_plot(run_cli, monkeypatch, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    monkeypatch.setattr(Figure, "savefig", lambda fig, fh, **kw: _full_disk(
        lambda f: f.write(b"\x89PNG" + bytes(64)))(fh))
    rc = run_cli("run", SCALE, "--dim", "N=4", "--backend", "numpy", "--plot", "p.png",
                 "-o", "y.npy", "-q")
    err = capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["y.npy"]       # the arrays were written
    assert rc == 2, err
    assert "cannot write p.png (--plot): No space left on device" in err


# --- the seed ------------------------------------------------------------------------
@pytest.mark.parametrize("seed", ["-1", str(2 ** 64)])
@pytest.mark.parametrize("with_h0", [False, True])
def test_a_seed_out_of_range_is_a_usage_error(vgpuc, tmp_path, seed, with_h0):  # noqa: F811
    extra = ()
    if with_h0:
        np.save(tmp_path / "x.npy", np.ones(4, np.float32))
        extra = ("--h0", "x.npy")
    proc = vgpuc("run", SCALE, "--dim", "N=4", "--seed", seed, *extra)
    assert proc.returncode == 2, proc.stderr
    assert f"--seed must be a whole number in [0, 2^64), got {seed}" in proc.stderr


def test_the_largest_seed_runs(vgpuc, tmp_path):  # noqa: F811
    proc = vgpuc("run", SCALE, "--dim", "N=3", "--seed", str(2 ** 64 - 1), "-o", "y.npy",
                 "--backend", "numpy")
    assert proc.returncode == 0, proc.stderr
    want = 2 * np.random.default_rng(2 ** 64 - 1).standard_normal(3).astype(np.float32)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)
