"""VGPU's benchmark suite: `python -m benchmarks [NAME ...] [--quick] [--json PATH]`.

One module per benchmark (lorenz, dispatch, compile_latency, matmul,
kuramoto); the competing implementations ("peers": hand-written numpy, a
hand-written GLSL shader, Numba, torchdiffeq, diffrax) live in
benchmarks/peers/, one module each. A peer that is not installed is reported
as "not installed" in the table, never as an error.
"""
