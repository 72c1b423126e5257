"""The cpu backend as the registry sees it: C kernels through the system compiler with
OpenMP, vectorised across trajectories. Unavailable, saying why, without a compiler."""
from __future__ import annotations

from .. import Backend


def _available() -> tuple[bool, str]:
    from . import toolchain
    return toolchain.available()


def _run(prepared, data, progress=None):
    from . import dispatch
    return dispatch.run(prepared, data, progress)


BACKEND = Backend(
    name="cpu",
    description="native CPU code: C vectorised across trajectories, OpenMP over the cores "
                "(needs a C compiler)",
    available=_available,
    run=_run,
    dtypes=("float32", "float64"),
    features=frozenset({"history", "flux", "reductions", "progress"}),
)
