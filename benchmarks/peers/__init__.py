"""The peers VGPU is compared with, one module each.

numpy_rk4  hand-vectorised numpy RK4 (always available)
glsl_hand  hand-written GLSL compute shaders run with raw moderngl
numba_rk4  a Numba parallel=True float32 kernel            (optional: numba)
torch_rk4  torchdiffeq.odeint(method="rk4") on CPU tensors  (optional: torch, torchdiffeq)
diffrax_rk4  diffrax.diffeqsolve under jax.vmap on CPU      (optional: jax, diffrax)

Every Lorenz peer offers ``make(rho, u0, dt, steps, sigma, beta) -> run`` where
``run()`` returns the final states as a float32 numpy array of shape (N, 3);
making and the first call together are the "first call" (compile / JIT) time.
"""
