"""The plain steps of the cpu backend's fixed-step kernel with events (templates/adaptive.c.j2,
fixed_lean_fast) laid out in chunks of lanes: a layout pass, never a second algorithm.

Each attempt of fixed_lean_fast is one loop over the block's VG_W lanes, every lane's
values in the block's arrays (``A_s_v[l]``, ``vg_taken[l]``, ...): a step loads and stores
them all (about 40 instructions for one vector of LIF lanes, 4.4x the bare step with no
spike at all). ``chunked`` turns the same lane body into a loop over chunks of ``chunk``
lanes: each chunk copies the arrays its body names into local arrays of ``chunk`` values
(load once), takes its attempts there (the compiler keeps them in vector registers) and
stores back the ones it writes (store once). A lane's numbers are its own in both
layouts; the attempts a block counts (vg_q) are the most any chunk took: in one loop, an
attempt keeps some lane's step exactly while some lane has kept every step before it, so
the block's count is the longest run of kept steps, whichever chunk holds it.
"""
from __future__ import annotations

import re

_INDEXED = re.compile(r"\b((?:A|vg)_[A-Za-z0-9_]*)\[l\]")
_WRITTEN = re.compile(r"\b((?:A|vg)_[A-Za-z0-9_]*)\[l\]\s*(?:=(?!=)|\|=|&=|\+=|-=|\+\+)")
_BARE_LANE = re.compile(r"\bl\b(?!\])")
# the block-wide names the loop itself keeps (declared per chunk below)
_OWN = ("vg_more", "vg_kept", "vg_q")


def chunked(step: str, chunk: int, commit: str, fast: str = "", indent: int = 16) -> str:
    """The attempts of fixed_lean_fast over chunks of ``chunk`` lanes. ``step`` + ``commit``
    is the text of one lane's attempt (lane ``l``, its values ``NAME[l]``, setting
    ``vg_more`` and ``vg_kept``), run while ``vg_q < vg_m && vg_more``; ``vg_q`` holds the
    attempts the block took before and is left with the most any chunk took. ``fast``
    (optional): ``step``'s commit where every lane goes (no masks: it sets ``vg_any`` where
    a lane's step has an event): a chunk whose lanes all go takes its steps so until one
    has an event or a lane reaches its stop; the step with the event is undone there
    (its values copied before it) and taken again by the masked attempts, which go on."""
    body = step.rstrip("\n") + "\n" + commit.strip("\n")
    pad = " " * indent
    if not chunk:       # one loop over the block's lanes, its values in the block's arrays
        return (f"{pad}while (vg_q < vg_m && vg_more) {{\n{pad}    vg_more = 0;\n"
                f"{pad}    vg_kept = 0;\n{pad}    for (int l = 0; l < VG_W; l++) {{\n"
                + body + f"\n{pad}    }}\n{pad}    vg_q += vg_kept;\n{pad}}}\n")
    fast = fast.strip("\n")
    quick = step.rstrip("\n") + "\n" + fast if fast else ""
    names = sorted(set(_INDEXED.findall(body + quick)))
    written = sorted(set(_WRITTEN.findall(body)))
    undo = sorted(set(_WRITTEN.findall(quick)))
    if _BARE_LANE.search(_INDEXED.sub("", body + quick)) or any(n in _OWN for n in names):
        raise ValueError("fixed_lean_fast's lane body reads its lane other than as NAME[l]")

    def lines(level: int, texts) -> str:
        return "".join(f"{pad}{'    ' * level}{t}\n" for t in texts)

    def shifted(text: str, by: str) -> str:
        return "".join(by + line + "\n" if line.strip() else "\n" for line in text.splitlines())

    out = lines(0, ["const int vg_q0 = vg_q;  // the chunks' attempts start here",
                    "int vg_qmax = vg_q;",
                    "{"])
    out += lines(1, [f"__typeof__(&{n}[0]) const vgo_{n} = {n};" for n in names])
    out += lines(1, [f"for (int vg_cb = 0; vg_cb < VG_W; vg_cb += {chunk}) {{  "
                     f"// {chunk} lanes: their values in locals, loaded once, stored once"])
    out += lines(2, [f"__typeof__(vgo_{n}[0]) {n}[{chunk}];" for n in names])
    out += lines(2, [f"for (int l = 0; l < {chunk}; l++) {{"])
    out += lines(3, [f"{n}[l] = vgo_{n}[vg_cb + l];" for n in names])
    out += lines(2, ["}", "int vg_more = 0, vg_kept = 0, vg_q = vg_q0;"])
    if quick:
        out += lines(2, ["{  // every lane goes: plain steps with no masks, until an event or a stop",
                         "    int vg_all = 1, vg_nf = vg_m - vg_q, vg_s = 0;",
                         f"    for (int l = 0; l < {chunk}; l++) {{",
                         "        vg_all &= vg_go[l];",
                         "        const int vg_r = vg_stop[l] - vg_taken[l];",
                         "        vg_nf = vg_r < vg_nf ? vg_r : vg_nf;",
                         "    }",
                         "    while (vg_all && vg_s < vg_nf) {"])
        out += lines(4, [f"__typeof__(vgo_{n}[0]) vgs_{n}[{chunk}];" for n in undo])
        out += lines(4, ["int vg_any = 0;", f"for (int l = 0; l < {chunk}; l++) {{"])
        out += lines(5, [f"vgs_{n}[l] = {n}[l];" for n in undo])
        out += shifted(quick, "            ")
        out += lines(4, ["}", "if (vg_any) {  // the masked attempts take this step",
                         f"    for (int l = 0; l < {chunk}; l++) {{"])
        out += lines(6, [f"{n}[l] = vgs_{n}[l];" for n in undo])
        out += lines(4, ["    }", "    break;", "}", "vg_s++;"])
        out += lines(2, ["    }",
                         "    vg_q += vg_s;",
                         f"    for (int l = 0; l < {chunk}; l++) {{",
                         "        vg_go[l] = vg_go[l] & (vg_taken[l] < vg_stop[l]);",
                         "    }",
                         "}"])
    out += lines(2, [f"for (int l = 0; l < {chunk}; l++) {{"])
    out += lines(3, ["vg_more |= vg_go[l];"])
    out += lines(2, ["}", "while (vg_q < vg_m && vg_more) {"])
    out += lines(3, ["vg_more = 0;", "vg_kept = 0;", f"for (int l = 0; l < {chunk}; l++) {{"])
    out += shifted(body, "        ")
    out += lines(3, ["}", "vg_q += vg_kept;"])
    out += lines(2, ["}", "vg_qmax = vg_q > vg_qmax ? vg_q : vg_qmax;",
                     f"for (int l = 0; l < {chunk}; l++) {{"])
    out += lines(3, [f"vgo_{n}[vg_cb + l] = {n}[l];"
                     for n in sorted(set(written) | set(undo) | {"vg_go"})])
    out += lines(2, ["}"])
    out += lines(1, ["}"])
    out += lines(0, ["}", "vg_q = vg_qmax;"])
    return out
