"""The contract's example programs (and two more), shared by the front-end tests."""
LORENZ = """# lorenz.field — an ensemble of Lorenz trajectories
field lorenz {
    param sigma = 10.0
    param rho   = 28.0
    param beta  = 8.0 / 3.0
    state x, y, z
    dx/dt = sigma * (y - x)
    dy/dt = x * (rho - z) - y
    dz/dt = x * y - beta * z
    solve rk4(dt = 0.01, steps = 1000)
}
"""
MATMUL = """
field matmul {                      # C = A @ B, one trajectory per C[i, j]
    input A[M, K], B[K, N]
    grid i < M, j < N
    state c = 0
    dc/dt = A[i, step] * B[step, j]
    solve euler(dt = 1, steps = K)
}
"""
KURAMOTO = """
field kuramoto {                    # coupled oscillators, one population per basin
    param K = 2.0
    input omega[N]
    grid i < N
    basin l < 256
    state theta
    coupled s = sin(theta), c = cos(theta)
    dtheta/dt = omega[i] + K * (mean(s) * cos(theta) - mean(c) * sin(theta))
    solve rk4(dt = 0.01, steps = 2000)
}
"""
HISTOGRAM = """
field histogram {
    output counts[32]
    state x
    dx/dt = -x + 1
    solve rk4(dt = 0.1, steps = 50)
    flux counts[clamp(int(x * 16), 0, 31)] += 1
}
"""
HEAT = """
field heat {
    param kappa = 0.5
    grid i < N
    basin l < 64
    state u
    coupled v = u edge zero
    let lap = v[l - 1] - 2 * v + v[l + 1]
    du/dt = kappa * lap
    solve euler(dt = 0.1, steps = 10)
}
"""
COLLAPSE = """
field settle {
    grid i < M, j < P
    basin a < 8, b < 8
    state x = float(i) / M, y = x + j
    coupled e = abs(x - y) edge wrap, f = x
    dx/dt = -x + e[a + 1, b] * 0.1 + max(f)
    dy/dt = -(y - init(x))
    collapse when abs(x) < 1e-3 and (t > 1.0 or step >= 10)
    solve heun(dt = 0.05, steps = 400, t0 = 0)
}
"""


def zero_shift(w, dr, dc):
    """w[r + dr, c + dc] of a 2-D array, 0 outside it (a 2-D coupled read, edge zero,
    written out by hand for the tests)."""
    import numpy as np
    out = np.zeros_like(w)
    rows, cols = w.shape
    for r in range(rows):
        for c in range(cols):
            if 0 <= r + dr < rows and 0 <= c + dc < cols:
                out[r, c] = w[r + dr, c + dc]
    return out


# Basins that settle at different steps (collapse), counted by the step they stopped at
# (flux): the grid index i and the whole grid's N enter the start values.
SETTLE_COUNT = """
field settle_count {
    param rate = 1.0
    grid i < N, j < 8
    basin a < 4, b < 8
    output hist[16]
    state x = float(i) / float(N) + float(j) * 0.1
    coupled m = x
    dx/dt = -rate * (x - 0.5 * mean(m))
    collapse when max(m) < 1e-2
    solve rk4(dt = 0.05, steps = 400)
    flux hist[clamp(step // 10, 0, 15)] += 1
}
"""
