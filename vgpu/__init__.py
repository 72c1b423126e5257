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
from vgpu_compiler.call.bound import Solution

# imported when first used (``import vgpu`` stays light: a run_field needs none of them)
_LAZY = {"Fit": "vgpu_compiler.fit", "fit": "vgpu_compiler.fit",
         "Pipeline": "vgpu_compiler.persistent.pipeline",
         "Simulation": "vgpu_compiler.persistent.simulation"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vgpu' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "run_field", "solve", "load", "compile", "cache_stats", "cache_info", "clear_cache", "evict",
    "Solution", "Fit", "fit", "Simulation", "Pipeline", "NonFiniteWarning", "StatusWarning",
    "ToleranceWarning", "philox",
    "VgpuError", "SourceError", "VgpuSyntaxError", "VgpuNameError", "VgpuTypeError",
    "DeclarationError", "VgpuIndexError", "VgpuZeroDivisionError", "CallError", "ShapeError",
    "MissingError", "UnknownNameError", "ArgumentTypeError", "BackendError", "CacheError",
    "SyntaxError_", "NameError_", "TypeError_", "ProgramIndexError", "ZeroDivision",
]
