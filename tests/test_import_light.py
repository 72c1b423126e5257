"""``import vgpu`` loads numpy and VGPU's own modules, nothing heavy: the parser (lark),
the templates (jinja2), the GPU drivers' bindings (moderngl, wgpu, cffi), the optional
xarray, dask, tqdm, scipy, nor the modules of Fit, Simulation and Pipeline (loaded when
first named)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("lark", "jinja2", "moderngl", "wgpu", "cffi", "xarray", "dask", "distributed",
         "tqdm", "scipy", "platformdirs", "vgpu_compiler.fit",
         "vgpu_compiler.persistent.simulation", "vgpu_compiler.persistent.pipeline")


def _fresh(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_import_vgpu_loads_nothing_heavy():
    out = _fresh("import sys, vgpu\n"
                 f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules) or 'none')\n")
    assert out.split() == ["none"], f"import vgpu imported {out.strip()}"


def test_the_lazy_names_are_there_when_named():
    out = _fresh("import vgpu\n"
                 "from vgpu_compiler.fit import Fit, fit\n"
                 "from vgpu_compiler.persistent.simulation import Simulation\n"
                 "from vgpu_compiler.persistent.pipeline import Pipeline\n"
                 "assert (vgpu.Fit, vgpu.fit, vgpu.Simulation, vgpu.Pipeline) == "
                 "(Fit, fit, Simulation, Pipeline)\n"
                 "assert set(vgpu.__all__) <= set(dir(vgpu))\n"
                 "ns = {}\n"
                 "exec('from vgpu import *', ns)\n"
                 "assert ns['Simulation'] is Simulation and ns['fit'] is fit\n"
                 "try:\n"
                 "    vgpu.no_such_name\n"
                 "except AttributeError as e:\n"
                 "    print(e)\n")
    assert "no_such_name" in out
