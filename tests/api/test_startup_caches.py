"""The parser's tables and the compiled templates on disk (frontend/parser_cache.py,
backends/shader/template_cache.py): a new process loads them instead of rebuilding the
parser from the grammar (0.4-0.8 s per process before) and compiling the templates
(0.3-0.65 s); the loaded parser parses, and fails, exactly as the built one; a damaged,
foreign or untrusted file is never used (built or compiled again, and written again)."""
from __future__ import annotations

import hashlib
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vgpu_compiler.errors import SyntaxError_
from vgpu_compiler.frontend import parse as P
from vgpu_compiler.frontend import parser_cache
from vgpu_compiler.resources import grammar_path

ROOT = Path(__file__).resolve().parents[2]
GRAMMAR = (grammar_path() / "field.lark").read_text(encoding="utf-8")
EXAMPLES = sorted((ROOT / "examples").glob("*.field"))
BAD = ["field f { state x\n dx/dt = 1 < 2 < 3\n solve euler(dt = 1, steps = 1) }",
       "field f { state x\n dx/dt = (x + \n solve euler(dt = 1, steps = 1) }",
       "field { }"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    built = []

    def get():
        return parser_cache.load_or_build(
            GRAMMAR, P.OPTIONS, P.BracketPostlex(),
            lambda: (built.append(1), P.build(GRAMMAR))[1])
    return get, built, tmp_path / "parser"


def _error(parser, src):
    monkey = P.parser
    P.parser = lambda: parser           # parse() and its messages through this parser
    try:
        with pytest.raises(SyntaxError_) as info:
            P.parse(src)
        return str(info.value)
    finally:
        P.parser = monkey


def test_the_loaded_parser_parses_and_fails_as_the_built_one(cache):
    get, built, folder = cache
    first = get()
    assert built == [1] and len(list(folder.glob("field-*.tables"))) == 1
    second = get()
    assert built == [1], "the second parser was built again instead of loaded"
    assert second is not first
    for path in EXAMPLES:
        text = path.read_text()
        assert second.parse(text) == first.parse(text), path.name
    for src in BAD:
        assert _error(second, src) == _error(first, src)
    assert (folder.stat().st_mode & 0o777) == 0o700


def _damage(path: Path, how: str) -> None:
    raw = path.read_bytes()
    head = len(parser_cache.HEADER)
    if how == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "garbage":
        path.write_bytes(os.urandom(2000))
    elif how == "checksum":                 # one byte of the tables changed
        body = bytearray(raw[head + 32:])
        body[len(body) // 2] ^= 0xFF
        path.write_bytes(raw[:head + 32] + bytes(body))
    elif how == "forged":                   # a consistent checksum over tables lark refuses
        body = marshal.dumps({"data": {"options": {}}, "memo": {}})
        path.write_bytes(raw[:head] + hashlib.sha256(body).digest() + body)
    elif how == "not-tables":               # a consistent checksum over something else
        body = marshal.dumps([1, 2, 3])
        path.write_bytes(raw[:head] + hashlib.sha256(body).digest() + body)
    elif how == "format":
        path.write_bytes(b"vgpu-lark-999\0" + raw[head:])
    elif how == "empty":
        path.write_bytes(b"")


@pytest.mark.parametrize("how", ["truncated", "garbage", "checksum", "forged", "not-tables",
                                 "format", "empty"])
def test_a_damaged_file_is_rebuilt(cache, how):
    get, built, folder = cache
    good = get()
    path, = folder.glob("field-*.tables")
    _damage(path, how)
    again = get()
    assert built == [1, 1], "a damaged file was used"
    text = EXAMPLES[0].read_text()
    assert again.parse(text) == good.parse(text)
    get()                                   # the file was written again, whole
    assert built == [1, 1]


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_a_folder_others_can_write_is_neither_read_nor_written(cache):
    get, built, folder = cache
    get()
    folder.chmod(0o777)
    try:
        get()
        assert built == [1, 1], "tables from a folder others can write were used"
        for p in folder.glob("field-*.tables"):
            p.unlink()
        get()
        assert not list(folder.glob("field-*.tables")), "written into an untrusted folder"
    finally:
        folder.chmod(0o700)


def test_a_new_grammar_or_lark_makes_a_new_file():
    one = parser_cache.key(GRAMMAR, P.OPTIONS)
    assert parser_cache.key(GRAMMAR + "\n", P.OPTIONS) != one
    assert parser_cache.key(GRAMMAR, dict(P.OPTIONS, maybe_placeholders=True)) != one


def test_the_shipped_tables_are_the_grammars_and_parse_as_the_built_one(tmp_path):
    """The tables shipped beside the grammar are this grammar's (else: python -m
    vgpu_compiler.frontend.parse writes them again), parse and fail exactly as the
    built parser, and a fresh process on an empty cache folder loads them: it builds
    nothing and writes nothing. A damaged shipped file is not used."""
    shipped = list(grammar_path().glob("field-*.tables"))
    assert [p.name.split("-")[-1] for p in shipped] == \
        [parser_cache.key(GRAMMAR, P.OPTIONS) + ".tables"], (
        "grammar/field.lark changed: run `python -m vgpu_compiler.frontend.parse`")
    lark_version = shipped[0].name.split("-")[1]
    import lark
    if lark_version == lark.__version__:        # (under another lark they are not read)
        loaded = parser_cache._load(shipped[0], P.BracketPostlex(), owned=False)
        built = P.build(GRAMMAR)
        for path in EXAMPLES:
            text = path.read_text()
            assert loaded.parse(text) == built.parse(text), path.name
        for src in BAD:
            assert _error(loaded, src) == _error(built, src)
        code = ("from vgpu_compiler.frontend import parse as P\n"
                "P.build = lambda text: (_ for _ in ()).throw(SystemExit('built'))\n"
                "P.parser().parse(open(%r).read()); print('loaded')\n" % str(EXAMPLES[0]))
        env = dict(os.environ, VGPU_CACHE_DIR=str(tmp_path / "empty"),
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.stdout.strip() == "loaded", out.stderr[-2000:]
        assert not (tmp_path / "empty" / "parser").exists()
    bad = tmp_path / shipped[0].name
    bad.write_bytes(shipped[0].read_bytes()[:-100])
    assert parser_cache._load(bad, P.BracketPostlex(), owned=False) is None


def test_a_fresh_process_loads_the_tables(tmp_path):
    """Two fresh processes (the shipped tables left aside): the first builds and writes
    the tables, the second loads them (it never calls build)."""
    code = ("from vgpu_compiler.frontend import parse as P\n"
            "P.SHIPS = None\n"
            "P.build = lambda text: (_ for _ in ()).throw(SystemExit('built'))\n"
            "P.parser().parse(open(%r).read()); print('loaded')\n" % str(EXAMPLES[0]))
    env = dict(os.environ, VGPU_CACHE_DIR=str(tmp_path),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=120)
    assert "built" in first.stderr                      # nothing on disk yet
    subprocess.run([sys.executable, "-c", "from vgpu_compiler.frontend import parse as P; "
                    "P.SHIPS = None; P.parser()"], env=env, check=True, timeout=120)
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120)
    assert second.stdout.strip() == "loaded", second.stderr[-2000:]


# --- the compiled templates (backends/shader/template_cache.py) -----------------------

def _env(tmp_path):
    import jinja2
    from vgpu_compiler.backends.shader.template_cache import TemplateCodeCache
    (tmp_path / "t").mkdir(exist_ok=True)
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(tmp_path / "t")),
                              bytecode_cache=TemplateCodeCache())


def test_a_template_is_compiled_once_then_loaded(tmp_path, monkeypatch):
    import jinja2
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.j2").write_text("{% for i in range(n) %}{{ i }},{% endfor %}")
    assert _env(tmp_path).get_template("a.j2").render(n=3) == "0,1,2,"
    files = list((tmp_path / "cache" / "templates").glob("*.code"))
    assert len(files) == 1
    compiled = []
    real = jinja2.Environment.compile
    monkeypatch.setattr(jinja2.Environment, "compile",
                        lambda self, *a, **k: (compiled.append(1), real(self, *a, **k))[1])
    assert _env(tmp_path).get_template("a.j2").render(n=2) == "0,1,"
    assert not compiled, "the template was compiled again"
    (tmp_path / "t" / "a.j2").write_text("{{ n }}!")           # a new text: compiled
    assert _env(tmp_path).get_template("a.j2").render(n=2) == "2!" and compiled
    for how in ("truncated", "garbage", "checksum", "empty"):  # damaged: compiled
        compiled.clear()
        path, = (tmp_path / "cache" / "templates").glob("*.code")
        raw = path.read_bytes()
        path.write_bytes({"truncated": raw[: len(raw) // 2], "garbage": os.urandom(500),
                          "checksum": raw[:-1] + bytes([raw[-1] ^ 1]), "empty": b""}[how])
        assert _env(tmp_path).get_template("a.j2").render(n=5) == "5!", how
        assert compiled, how


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_compiled_templates_from_a_folder_others_can_write_are_not_used(tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.j2").write_text("{{ n }}")
    _env(tmp_path).get_template("a.j2").render(n=1)
    folder = tmp_path / "cache" / "templates"
    folder.chmod(0o777)
    try:
        for p in folder.glob("*.code"):
            p.unlink()
        assert _env(tmp_path).get_template("a.j2").render(n=1) == "1"
        assert not list(folder.glob("*.code")), "written into a folder others can write"
    finally:
        folder.chmod(0o700)


def test_clear_cache_removes_the_tables_and_the_compiled_templates(cache, tmp_path):
    import vgpu
    get, built, folder = cache
    get()
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.j2").write_text("{{ n }}")
    _env(tmp_path).get_template("a.j2").render(n=1)
    stored = [p for sub in ("parser", "templates") for p in (tmp_path / sub).glob("*")]
    assert len(stored) == 2
    assert vgpu.clear_cache(memory=False)["startup"] == 2
    assert not [p for sub in ("parser", "templates") for p in (tmp_path / sub).glob("*")]


def test_a_template_compiled_under_other_options_is_not_reused(tmp_path, monkeypatch):
    """The compiled code depends on the environment's whitespace options, not only on
    the template's text."""
    import jinja2
    from vgpu_compiler.backends.shader.template_cache import TemplateCodeCache
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.j2").write_text("{% if n %}\n  x\n{% endif %}\n")

    def render(**options):
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(tmp_path / "t")),
                                 bytecode_cache=TemplateCodeCache(), **options)
        return env.get_template("a.j2").render(n=1)
    assert render() == "\n  x\n"
    assert render(trim_blocks=True, lstrip_blocks=True) == "  x\n"
    assert render() == "\n  x\n"
