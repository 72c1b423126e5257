"""Ensembles on a Dask cluster: one block of whole basins per task, each run by VGPU on a
worker exactly as that window of a local run (call/window.py), assembled lazily.

``vgpu.run_field`` / ``vgpu.solve`` come here when h0 or a param is a dask array, or
when ``chunks=`` is given (ensemble.py builds the graph, block.py is what a worker
runs, cluster.py finds or starts a cluster for ``vgpuc run --scheduler``). Nothing
here imports dask until it is used: ``import vgpu`` stays fast without it.
"""
