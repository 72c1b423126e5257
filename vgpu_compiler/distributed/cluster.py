"""A Dask client for ``vgpuc run --scheduler``: a running scheduler's address, or
``local`` for a LocalCluster on this machine (one worker process per core, one thread
each: a block holds its worker's GL context, or a core, for its whole run)."""
from __future__ import annotations

import contextlib
import math

from ..errors import BackendError


@contextlib.contextmanager
def client_for(address: str):
    """A connected ``distributed.Client`` (closed, with its LocalCluster, afterwards)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise BackendError("running on a Dask cluster needs dask.distributed: "
                           "pip install 'vgpu[cluster]'") from None
    cluster = None
    try:
        if address == "local":
            cluster = LocalCluster(threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            client = Client(cluster)
        else:
            client = Client(address, timeout=30)
    except (OSError, TimeoutError) as e:
        raise BackendError(f"cannot reach the Dask scheduler at {address!r}: {e}") from None
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def rows_per_block(rows: int, blocks: int, unit: int = 1) -> int:
    """Rows per block that split ``rows`` into at most ``blocks`` blocks of whole basins
    (``unit`` rows each)."""
    per = math.ceil(max(rows, 1) / max(blocks, 1))
    return max(unit, math.ceil(per / unit) * unit)


def worker_count(client) -> int:
    return max(1, len(client.scheduler_info().get("workers", {})))
