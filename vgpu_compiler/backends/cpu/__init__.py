"""The native CPU backend: the kernel description printed as C that the system compiler
vectorises across trajectories (backend.py, dialect.py, toolchain.py, library_cache.py,
runner.py)."""
