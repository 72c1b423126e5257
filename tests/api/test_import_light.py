"""``import vgpu`` loads numpy and VGPU's own modules, nothing heavy: the parser (lark),
the templates (jinja2), the GPU drivers' bindings (moderngl, wgpu, cffi), the optional
xarray, dask, tqdm, scipy, nor the modules of Fit, Simulation and Pipeline (loaded when
first named), nor the tableaus of dop853, vern7 and vern9 (loaded when first looked up),
nor the pipeline, the front end and the IR (loaded by the first call)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("lark", "jinja2", "moderngl", "wgpu", "cffi", "xarray", "dask", "distributed",
         "tqdm", "scipy", "platformdirs", "vgpu_compiler.fit",
         "vgpu_compiler.persistent.simulation", "vgpu_compiler.persistent.pipeline",
         "vgpu_compiler.ir.dop853", "vgpu_compiler.ir.verner",
         # the pipeline, the front end and the IR: imported by a program's first call
         "vgpu_compiler.pipeline", "vgpu_compiler.frontend", "vgpu_compiler.ir.nodes")


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


def test_the_lazy_tableaus_are_the_modules_own():
    out = _fresh("import sys\n"
                 "from vgpu_compiler.ir import embedded\n"
                 "assert 'vgpu_compiler.ir.verner' not in sys.modules\n"
                 "assert list(embedded.ADAPTIVE) == ['bs3', 'dopri5', 'tsit5', 'dop853', "
                 "'vern7', 'vern9']\n"
                 "v9 = embedded.ADAPTIVE['vern9']\n"
                 "from vgpu_compiler.ir.verner import VERN7, VERN9\n"
                 "from vgpu_compiler.ir.dop853 import DOP853\n"
                 "assert v9 is VERN9 and embedded.ADAPTIVE['vern9'] is VERN9\n"
                 "assert embedded.VERN7 is VERN7 and embedded.DOP853 is DOP853\n"
                 "assert all(t.name == n for n, t in embedded.ADAPTIVE.items())\n"
                 "print(len(embedded.ADAPTIVE), 'dop853' in embedded.ADAPTIVE, "
                 "'rk4' in embedded.ADAPTIVE)\n")
    assert out.split() == ["6", "True", "False"]
