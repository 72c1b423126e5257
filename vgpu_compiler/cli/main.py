"""``vgpuc``: the command line of VGPU.

    vgpuc compile FILE.field [-o OUT] [--field NAME] [--dim N=1024 ...] [--target glsl|wgsl|c|ir]
    vgpuc run FILE.field [--h0 h0.npy] [--param k=0.5 | k=k.npy] [--input A=a.npy] ...
    vgpuc check FILE...
    vgpuc ir FILE [--field NAME] [--jacobian] [--sensitivities NAMES]
    vgpuc cache info|clear
    vgpuc info

Exit status: 0 success, 1 an error in the program or while running it, 2 a
usage error (bad options, a file that cannot be read). Errors are one clean
message on stderr, never a traceback (set VGPU_DEBUG=1 to see one).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
import warnings

from .. import spelling
from ..backends import choices as backend_choices
from .common import (EXIT_ERROR, EXIT_OK, EXIT_USAGE, UsageError, all_fields, attach_file,
                         compile_source, describe_error, parse_dims, read_text,
                         select_field)
from ..errors import VgpuError

PROG = "vgpuc"

RUN_EPILOG = """\
default h0: when --h0 is not given and the field has states that start from h0,
vgpuc draws them at random: standard-normal values (numpy's default_rng(--seed),
seed 0 unless given) of shape grid_shape + (n_free,), or grid_shape when one
state starts from h0. The grid's size must then be known from --dim or from
--input / --param arrays (a field without a grid statement has `grid i < N`:
give --dim N=...). Fields whose states all have `= expr` starts need no h0.

output: -o out.npy writes the final states; -o out.npz writes `states`,
`steps_taken`, every output under its own name (output_NAME if it clashes) and,
with --save-every, `history` and `times`; -o out.nc writes a netCDF file of
the labelled Dataset (sol.to_xarray(): needs xarray). Without -o a summary is
printed.
"""


# --- compile / ir / check -----------------------------------------------------
def cmd_compile(args: argparse.Namespace) -> int:
    source = read_text(args.file)
    field = select_field(compile_source(source, args.file), args.field)
    if args.emit == "ir":
        text = _dump(field)
    else:
        from .system import emit_glsl_text

        try:
            text = emit_glsl_text(field, dtype=args.dtype, dims=parse_dims(args.dim),
                                  per_trajectory=args.per_trajectory or (), source=source,
                                  language=args.emit)
        except VgpuError as err:        # located in the text: show the file, line and caret
            raise attach_file(err, source, args.file)
    _write_text(text, args.output)
    return EXIT_OK


def cmd_ir(args: argparse.Namespace) -> int:
    compiled = compile_source(read_text(args.file), args.file)
    fields = (select_field(compiled, args.field),) if args.field else all_fields(compiled)
    jac = getattr(args, "jacobian", False)
    names = getattr(args, "sensitivities", None)
    if names is not None:           # each field joined with its sensitivity equations
        fields = tuple(_joined(f, names, args.file) for f in fields)
    print("\n".join(_dump(f, jac).rstrip("\n") for f in fields))
    return EXIT_OK


def _joined(field, names: str, path: str):
    """The field with its forward sensitivity equations (ir/sensitivity.py)."""
    from ..ir.sensitivity import joined

    try:
        return joined(field, [n for n in names.split(",") if n.strip()]).field
    except VgpuError as err:
        raise attach_file(err, read_text(path), path)


def cmd_check(args: argparse.Namespace) -> int:
    missing = errors = False
    for path in args.files:
        try:
            compiled = compile_source(read_text(path), path)
        except UsageError as exc:
            print(f"{PROG} check: error: {exc}", file=sys.stderr)
            missing = True
            continue
        except VgpuError as err:
            print(describe_error(err, path), file=sys.stderr)
            errors = True
            continue
        if not args.quiet:
            names = ", ".join(f.name for f in all_fields(compiled))
            print(f"{path}: ok ({names})")
    return EXIT_USAGE if missing else EXIT_ERROR if errors else EXIT_OK


def _dump(field, jacobian: bool = False) -> str:
    from ..ir.dump import dump

    return dump(field, jacobian)


def _write_text(text: str, path: str | None) -> None:
    if not text.endswith("\n"):
        text += "\n"
    if path in (None, "-"):
        sys.stdout.write(text)
        return
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


# --- run, info, cache live in their own modules -------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from .run import run_command

    return run_command(args)


def cmd_info(args: argparse.Namespace) -> int:
    from .system import info_command

    return info_command(args)


def cmd_cache(args: argparse.Namespace) -> int:
    from .system import cache_command

    return cache_command(args)


# --- the parser ------------------------------------------------------------------
def _add_field_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--field", metavar="NAME",
                   help="the field to use when the program has several")


def _add_compile(sub) -> None:
    p = sub.add_parser("compile", help="emit the GLSL compute shader (or the WGSL, the C, the "
                                       "CUDA or the IR) of a field",
                       description="Lower a field to a GLSL compute shader (--emit wgsl: "
                                   "the wgpu backend's WGSL; c: the cpu backend's C; cuda: "
                                   "the cuda backend's CUDA C++), "
                                   "printed to stdout or written to -o. No data or shapes "
                                   "are needed: grid extents, dims, dt, steps and t0 are "
                                   "uniforms.")
    p.add_argument("file", metavar="FILE.field")
    p.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    _add_field_options(p)
    p.add_argument("--dim", action="append", metavar="N=1024",
                   help="a dim symbol's size (repeatable); checked against the field, the "
                        "shader is the same for every size (sizes are uniforms)")
    p.add_argument("--per-trajectory", action="append", metavar="PARAM",
                   help="emit the variant where PARAM is one value per trajectory (an array)")
    p.add_argument("--emit", "--target", dest="emit", choices=("glsl", "wgsl", "c", "cuda", "ir"),
                   default="glsl",
                   help="what to emit: glsl (OpenGL), wgsl (wgpu), c (the cpu backend's "
                        "kernel), cuda (the cuda backend's) or ir (default: glsl)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="the working float type of the shader (default: float32)")
    p.set_defaults(func=cmd_compile)


def _add_run(sub) -> None:
    p = sub.add_parser("run", help="integrate an ensemble and save or print the result",
                       description="Run a field on an ensemble of trajectories.",
                       epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE.field")
    _add_field_options(p)
    p.add_argument("--h0", metavar="H0.npy",
                   help="starting states (.npy, or .npz[:NAME]); default: see below")
    p.add_argument("--param", action="append", metavar="k=0.5|k=k.npy",
                   help="a param: a number, or an array file of the grid's shape (repeatable)")
    p.add_argument("--input", action="append", metavar="A=a.npy",
                   help="an input array from .npy or .npz (repeatable)")
    p.add_argument("--dim", action="append", metavar="N=1024",
                   help="bind a dim symbol that no array binds (repeatable)")
    p.add_argument("--dt", type=float, help="override the solve statement's dt")
    p.add_argument("--steps", type=int, help="override the solve statement's steps")
    p.add_argument("--t0", type=float, help="override the solve statement's t0")
    for name, what in (("t1", "the end time"), ("rtol", "the relative tolerance"),
                       ("atol", "the absolute tolerance"), ("dt0", "the first step"),
                       ("dtmax", "the largest step")):
        p.add_argument(f"--{name}", type=float,
                       help=f"adaptive methods: override {what} of the solve statement")
    p.add_argument("--max-steps", type=int, dest="max_steps",
                   help="adaptive methods: override the most accepted steps per trajectory")
    p.add_argument("--save-at", metavar="T0:T1:N|t,t,...", dest="save_at",
                   help="keep the states at these times (N evenly spaced from T0 to T1, or "
                        "a comma-separated list), from the method's continuous extension")
    p.add_argument("--backend", choices=backend_choices(), default="auto",
                   help="cuda: NVIDIA GPUs (CUDA C++ through NVRTC); "
                        "glsl: OpenGL compute shaders; wgpu: WGSL through Vulkan, Metal or "
                        "Direct3D 12 (float32); cpu: native code for this CPU (C, needs a C "
                        "compiler); numpy: the reference interpreter; auto (default): the "
                        "first backend that can run the call (GPU backends on a real GPU, "
                        "then cpu, then GPU backends on a CPU renderer, then numpy), with "
                        "one warning when it moves on (`vgpuc info` lists the order here)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="the working float type of states and params (default: float32)")
    p.add_argument("--save-every", type=int, metavar="K",
                   help="keep every K-th state (first and last included)")
    p.add_argument("-o", "--output", metavar="OUT.npy|OUT.npz|OUT.nc",
                   help="where to save the result")
    p.add_argument("--plot", metavar="OUT.png",
                   help="draw a phase portrait / distribution (needs vgpu[plot])")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the default h0 and of the field's noise (default 0)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run on a Dask cluster: a scheduler's address (tcp://host:8786), or "
                        "'local' to start a LocalCluster here (needs vgpu[cluster])")
    p.add_argument("--chunks", type=int, metavar="N",
                   help="with --scheduler: split the grid's first axis into N blocks of whole "
                        "basins, one task each (default: 2 per worker)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary")
    p.set_defaults(func=cmd_run)


def _add_check(sub) -> None:
    p = sub.add_parser("check", help="report errors in .field files, nothing else",
                       description="Parse and check programs. Errors are printed as "
                                   "file:line:col: error: message, with the source line and "
                                   "a caret. Exit 0: clean; 1: errors; 2: a file is missing.")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing for clean files")
    p.set_defaults(func=cmd_check)


def _add_ir(sub) -> None:
    p = sub.add_parser("ir", help="print the IR of a program (every field, or --field)",
                       description="Print the checked and optimised intermediate "
                                   "representation of every field of a program (or of "
                                   "--field NAME), as readable, deterministic text.")
    p.add_argument("file", metavar="FILE")
    _add_field_options(p)
    p.add_argument("--jacobian", action="store_true",
                   help="also print the Jacobian dF/dh (and dF/dt) derived for a stiff "
                        "method (rosenbrock23, rodas4, rodas5p)")
    p.add_argument("--sensitivities", metavar="NAMES",
                   help="print the field joined with its forward sensitivity equations "
                        "for these comma-separated names (params, init(x)); the state "
                        "d_x_d_p is dx/dp")
    p.set_defaults(func=cmd_ir)


def _add_system(sub) -> None:
    p = sub.add_parser("cache", help="show or clear the kernel cache",
                       description="The kernel cache: `vgpuc cache info` prints its disk "
                                   "folder and entries, `vgpuc cache clear` removes every "
                                   "kernel from it (always safe: kernels are rebuilt on "
                                   "demand).")
    p.add_argument("action", choices=("info", "clear"), nargs="?",
                   help="info: show the cache; clear: empty it")
    p.set_defaults(func=cmd_cache)
    p = sub.add_parser("info", help="the backends, and the OpenGL device's limits and "
                                    "extensions",
                       description="Print the OpenGL renderer, vendor and version VGPU "
                                   "uses, the limits that matter to it and the extensions "
                                   "of note, or why there is no context; then every backend, "
                                   "in the order backend=auto tries them, whether it is "
                                   "available here and why not.")
    p.set_defaults(func=cmd_info)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="VGPU: compile and run ensembles of ODE fields "
                               "(GLSL compute shaders, or the numpy reference).")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in (_add_compile, _add_run, _add_check, _add_ir, _add_system):
        add(sub)
    parser.set_defaults(subparsers=sub.choices)
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; a usage error (exit 2) names the subcommand's own usage."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    command = args.subparsers[args.command]
    if extra:
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "cache" and args.action is None:
        command.error("say what to do: `vgpuc cache info` shows the cache, "
                      "`vgpuc cache clear` empties it")
    return args


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("vgpu")
    except Exception:   # not installed: running from the checkout
        return "0.1.0 (checkout)"


# --- warnings and errors as clean messages ------------------------------------------
def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


class _LogFormat(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{PROG}: {record.levelname.lower()}: {record.getMessage()}"


def _quiet_reporting() -> None:
    """Library warnings (the numpy fallback, non-finite trajectories) as one line each."""
    warnings.showwarning = _show_warning
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LogFormat())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)      # usage errors exit 2 here
    _quiet_reporting()
    try:
        with spelling.command_line():       # errors name --param, not params=
            return args.func(args)
    except UsageError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except VgpuError as err:
        text = describe_error(err, getattr(args, "file", None))
        print(text, file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:     # `vgpuc compile ... | head`: the reader left, not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:    # a failure of the machine or a bug: still no traceback
        if os.environ.get("VGPU_DEBUG"):
            traceback.print_exc()
        print(f"{PROG} {args.command}: error: {type(exc).__name__}: {exc} "
              f"(set VGPU_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
