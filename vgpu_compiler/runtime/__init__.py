"""The host side of a run that the compiled backends share, written once (glsl, wgpu and cpu
use it: cpu's "device" is its C library on numpy arrays, backends/cpu/target.py).

A stage between ``call/`` (what a call is) and ``backends/`` (what runs it): it may
import ``call`` and below, never a backend (tests/project/test_layering.py). Its modules:

- ``pacing.py``   how many steps (or attempts) each dispatch gets (a first dispatch of
                  a fixed budget of work, then paced by the measured time under a
                  watchdog budget) and where a run is split into dispatches
- ``progress.py`` ``progress(done, total)`` between dispatches, and which kernels this
                  thread is inside a progress callback of (re-entry)
- ``device.py``   the Device protocol (compile, buffer, write, dispatch, read,
                  release, limits, software); wgpu's WgpuDevice and glsl's GlDevice
                  implement it
- ``adaptive.py`` the one adaptive driver (glsl, wgpu, cpu): chunks, paced dispatches
                  until no trajectory runs, progress, the event log, the read-back,
                  over a backend's ``Target`` (begin, trip, read on named buffers)
- ``fixed.py``    the one fixed-step driver (glsl, wgpu, cpu) on the same ``Target``:
                  chunks, paced dispatches, saved steps (or the kernel's own history
                  buffer), progress, the read-back, deposits
- ``located.py``  the one rule of a fixed-step Simulation with an observer ``first``
                  (cpu's and the shaders' LocatedSession give their host part)
- ``adaptive_session.py``  an adaptive method's Simulation: its reads and
                  checkpoints and, over the adaptive ``Target``, its paced
                  advances (glsl, wgpu, cpu)
- ``session.py``  the host half of a fixed-step Simulation (glsl, wgpu, cpu): steps
                  taken, checkpoints and restores of its host arrays
- ``fixed_session.py``  the fixed-step Simulation of glsl, wgpu and cpu over the fixed-step
                  ``Target``: uploads of what changed, paced advances, reads
"""
