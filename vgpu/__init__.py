"""VGPU: ensembles of ODE fields, compiled to GPU compute shaders (with a numpy reference).

    import vgpu
    h = vgpu.run_field(vgpu.load("lorenz.field"), h0)      # final states
    sol = vgpu.solve(src, h0, save_every=10)               # states, outputs, steps_taken, history
"""
from vgpu_compiler.api import (cache_info, cache_stats, clear_cache, compile, evict, load,
                              run_field, solve)
from vgpu_compiler.errors import (ArgumentTypeError, BackendError, CacheError, CallError,
                                  DeclarationError, MissingError, NameError_, NonFiniteWarning,
                                  StatusWarning, ToleranceWarning, ProgramIndexError, ShapeError, SourceError, SyntaxError_,
                                  TypeError_, UnknownNameError, VgpuError, VgpuIndexError,
                                  VgpuNameError, VgpuSyntaxError, VgpuTypeError,
                                  VgpuZeroDivisionError, ZeroDivision)
from vgpu_compiler.noise.philox import philox
from vgpu_compiler.fit import Fit, fit
from vgpu_compiler.call.bound import Solution
from vgpu_compiler.persistent.pipeline import Pipeline
from vgpu_compiler.persistent.simulation import Simulation

__all__ = [
    "run_field", "solve", "load", "compile", "cache_stats", "cache_info", "clear_cache", "evict",
    "Solution", "Fit", "fit", "Simulation", "Pipeline", "NonFiniteWarning", "StatusWarning",
    "ToleranceWarning", "philox",
    "VgpuError", "SourceError", "VgpuSyntaxError", "VgpuNameError", "VgpuTypeError",
    "DeclarationError", "VgpuIndexError", "VgpuZeroDivisionError", "CallError", "ShapeError",
    "MissingError", "UnknownNameError", "ArgumentTypeError", "BackendError", "CacheError",
    "SyntaxError_", "NameError_", "TypeError_", "ProgramIndexError", "ZeroDivision",
]
