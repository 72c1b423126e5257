"""The cpu backend as the registry sees it: C kernels through the system compiler with
OpenMP, vectorised across trajectories. Unavailable, saying why, without a compiler."""
from __future__ import annotations

from .. import Backend, kernel_caches


def _available() -> tuple[bool, str]:
    from . import toolchain
    return toolchain.available()


def _start_probe() -> None:
    from . import toolchain
    toolchain.start_probe()


def _run(prepared, data, progress=None):
    from ..shader.history import fits
    from . import dispatch
    return dispatch.run(prepared, data, progress, history=fits(prepared.template))


def _open(prepared, data):
    from ...runtime.session import open_session
    return open_session(__package__, prepared, data)


BACKEND = Backend(
    name="cpu",
    description="native CPU code: C vectorised across trajectories, OpenMP over the cores "
                "(needs a C compiler)",
    available=_available,
    start_probe=_start_probe,
    run=_run,
    open=_open,
    dtypes=("float32", "float64"),
    features=frozenset({"observe_peak", "observe_first", "history", "flux", "reductions",
                        "progress", "events", "stiff", "stiff_events",
                        "adaptive", "noise", "save_at", "float64_functions"}),
    # its loaded kernels (and the libraries on disk: clear, info; evict: memory only, a
    # library's name does not say whose it is)
    caches=kernel_caches(f"{__package__}.kernel", disk=("cpu",)),
)
