"""bind once per call signature (call/prepare.py): a repeated call reuses what the
checks derived from its shapes, and must give exactly what a full bind gives."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import vgpu
from field_examples import LORENZ, MATMUL
from vgpu_compiler.api import Source
from vgpu_compiler.call import prepare as bind_memo
from vgpu_compiler.call.bind import _bind, bind

RNG = np.random.default_rng(5)

# `rate` is computed from `k`: new values of k must give a new rate, never the old one.
DECAY = """
field decay {
    param k
    param rate = 2 * k
    input w[N]
    state x
    dx/dt = -rate * x + w[i]
    solve euler(dt = 0.1, steps = 3)
}
"""
# steps is read from a param's value.
STEPS = "field s { param n = 3\n state x\n dx/dt = 1\n solve euler(dt = 1, steps = int(n)) }"


def field_of(src):
    return vgpu.compile(src).select(None)


def same_bound(a, b):
    for name in ("dtype", "grid_shape", "dims", "output_shapes", "dt", "steps", "t0",
                 "save_every"):
        assert getattr(a, name) == getattr(b, name), name
    assert (a.h0 is None) == (b.h0 is None)
    if a.h0 is not None:
        np.testing.assert_array_equal(a.h0, b.h0)
        assert a.h0.dtype == b.h0.dtype and a.h0.flags.c_contiguous
    for d1, d2 in ((a.inputs, b.inputs), (a.params, b.params)):
        assert d1.keys() == d2.keys()
        for k in d1:
            np.testing.assert_array_equal(d1[k], d2[k])
            assert type(d1[k]) is type(d2[k])


CALLS = [
    (LORENZ, lambda n: dict(h0=RNG.normal(size=(n, 3)))),
    (LORENZ, lambda n: dict(h0=RNG.normal(size=(n, 3)).astype(np.float32), dtype="float64",
                            params={"sigma": float(RNG.uniform(5, 15))})),
    (MATMUL, lambda n: dict(inputs={"A": RNG.normal(size=(n, 4)), "B": RNG.normal(size=(4, 3))})),
    (DECAY, lambda n: dict(h0=RNG.normal(size=n), params={"k": float(RNG.uniform())},
                           inputs={"w": RNG.normal(size=n)})),
    (DECAY, lambda n: dict(h0=RNG.normal(size=n), params={"k": RNG.uniform(size=n)},
                           inputs={"w": RNG.normal(size=n).astype(np.float32)})),
    (STEPS, lambda n: dict(h0=np.zeros(n), params={"n": int(RNG.integers(1, 9))})),
    (STEPS, lambda n: dict(h0=np.zeros(n), steps=int(RNG.integers(0, 9)), dt=0.5)),
]


@pytest.mark.parametrize("which", range(len(CALLS)))
def test_a_repeated_call_binds_as_a_full_bind_would(which):
    src, make = CALLS[which]
    field = field_of(src)
    for n in (5, 5, 5, 7, 5):            # repeats with new data, and a new shape between
        kw = make(n)
        same_bound(bind(field, **kw), _bind(field, kw.get("h0"), kw.get("params"),
                                            kw.get("inputs"), kw.get("dims"),
                                            kw.get("dtype", "float32"), kw.get("dt"),
                                            kw.get("steps"), kw.get("t0"), None))


def test_new_param_values_reach_every_value_computed_from_them():
    w = np.zeros(4)
    for k in (0.5, 1.0, 2.0):
        got = vgpu.run_field(DECAY, np.ones(4), params={"k": k}, inputs={"w": w},
                             backend="numpy")
        np.testing.assert_allclose(got, (1 - 0.1 * 2 * k) ** 3, rtol=1e-6)
        ks = np.full(4, k)
        got = vgpu.run_field(DECAY, np.ones(4), params={"k": ks}, inputs={"w": w},
                             backend="numpy")
        np.testing.assert_allclose(got, (1 - 0.1 * 2 * k) ** 3, rtol=1e-6)
    for n in (2, 5, 3):
        assert vgpu.run_field(STEPS, np.zeros(2), params={"n": n}, backend="numpy")[0] == n


def test_repeated_calls_hit_the_memo_and_share_the_backends_scratch():
    field = field_of(LORENZ)
    first = bind(field, RNG.normal(size=(6, 3)))
    again = bind(field, RNG.normal(size=(6, 3)))
    assert again.prepared is first.prepared
    assert bind(field, RNG.normal(size=(7, 3))).prepared is not first.prepared   # new shape
    assert bind(field, RNG.normal(size=(6, 3)).tolist()).prepared is not first.prepared  # list


def test_the_memo_keeps_no_users_data():
    field = field_of(MATMUL)
    A, B = RNG.normal(size=(3, 3)).astype(np.float32), RNG.normal(size=(3, 3)).astype(np.float32)
    refs = [weakref.ref(A), weakref.ref(B)]
    bound = bind(field, inputs={"A": A, "B": B})
    assert bound.inputs["A"] is A            # already float32, C order: not copied
    del A, B, bound
    gc.collect()
    assert all(r() is None for r in refs)


def test_a_bad_call_is_an_error_every_time_even_after_a_good_one():
    field = field_of(DECAY)
    good = dict(params={"k": 1.0}, inputs={"w": np.zeros(3)})
    bind(field, np.zeros(3), **good)
    for _ in range(2):
        with pytest.raises(vgpu.ShapeError):
            bind(field, np.zeros(4), **good)
        with pytest.raises(vgpu.ArgumentTypeError):
            bind(field, np.zeros(3), dt=float("nan"), **good)


def test_the_same_text_under_another_file_name_is_another_field():
    a = vgpu.compile(Source(STEPS, "a.field")).select(None)
    b = vgpu.compile(Source(STEPS, "b.field")).select(None)
    assert bind(a, np.zeros(2)).field is a
    assert bind(b, np.zeros(2)).field is b


def test_the_memo_is_bounded():
    field = field_of(LORENZ)
    for n in range(1, bind_memo.CAPACITY + 20):
        bind(field, np.zeros((n, 3)))
    assert len(bind_memo._memo) <= bind_memo.CAPACITY


# No check reads k's value: every call with a scalar k has one signature.
PLAIN = DECAY.replace("param rate = 2 * k", "param rate = 2.0")

# Values a full bind refuses, for each argument; a call with one, after a good call of the
# same shapes (its signature memoised), must be refused with the very same error.
HUGE = 10**400
BAD = {
    "params": [HUGE, 2**64, -2**63 - 1, "1", 1j, np.complex64(1), [1, "a"], None, {}],
    "h0": [np.full(3, 1j), np.array(["1", "2", "3"]), np.array([HUGE] * 3, dtype=object),
           [HUGE] * 3, ["a", "b", "c"], 1j],
    "inputs": [np.full(3, 1j), np.array(["1", "2", "3"]), [HUGE] * 3, np.array([1, 2, HUGE])],
}


def _decay_call(what, bad):
    kw = dict(h0=np.zeros(3), params={"k": 1.0}, inputs={"w": np.zeros(3)})
    if what == "h0":
        kw["h0"] = bad
    else:
        kw[what] = {**kw[what], ("k" if what == "params" else "w"): bad}
    return kw


def _error_of(fn):
    with pytest.raises(vgpu.VgpuError) as info:
        fn()
    return type(info.value), str(info.value)


@pytest.mark.parametrize("what, bad", [(w, b) for w in BAD for b in BAD[w]],
                         ids=lambda v: v if isinstance(v, str) else type(v).__name__)
def test_a_repeated_call_refuses_what_the_first_refuses(what, bad):
    field = field_of(PLAIN)
    kw = _decay_call(what, bad)
    full = _error_of(lambda: _bind(field, kw["h0"], kw["params"], kw["inputs"], None,
                                   "float32", None, None, None, None))
    bind_memo._memo.clear()
    assert _error_of(lambda: bind(field, **kw)) == full                 # a first call
    bind(field, **_decay_call("h0", np.ones(3)))                         # a good one ...
    for _ in range(2):                                                    # ... then again
        assert _error_of(lambda: bind(field, **kw)) == full
        assert _error_of(lambda: vgpu.run_field(PLAIN, backend="numpy", **kw))[0] is full[0]


@pytest.mark.parametrize("value", [HUGE, 2**64, float("nan"), float("inf"), True])
def test_scalar_params_bind_alike_first_and_repeated(value):
    """What a first call accepts (nan, inf, True) a repeated one accepts alike."""
    field = field_of(PLAIN)
    bind(field, **_decay_call("h0", np.ones(3)))
    kw = _decay_call("params", value)
    try:
        full = _bind(field, kw["h0"], kw["params"], kw["inputs"], None, "float32",
                     None, None, None, None)
    except vgpu.VgpuError as err:
        assert _error_of(lambda: bind(field, **kw)) == (type(err), str(err))
        return
    same_bound(bind(field, **kw), full)


@pytest.mark.filterwarnings("ignore::vgpu.NonFiniteWarning")
@pytest.mark.parametrize("backend", ["numpy", "glsl"])
def test_minus_zero_is_another_signature(backend, request):
    """-0.0 == 0.0, but a default 1 / p (or t0 = -0.0) gives another result: a call with
    -0.0 after one with 0.0 must not reuse the first call's bind."""
    if backend == "glsl":
        request.getfixturevalue("glsl")
    src = "field z {\n param p\n param q = 1 / p\n state x\n dx/dt = q\n solve euler(dt = 1, steps = 1)\n}"
    h0 = np.zeros(4, np.float32)
    for p, sign in ((0.0, 1), (-0.0, -1), (0.0, 1), (-0.0, -1)):
        out = vgpu.run_field(src, h0, params={"p": p}, backend=backend)
        assert np.all(np.isinf(out)) and np.all(np.sign(out) == sign), (p, out)
    for t0, sign in ((0.0, 1.0), (-0.0, -1.0)):
        src_t = ("field t {\n state x = 1 / t\n dx/dt = 0\n"
                 " solve euler(dt = 1, steps = 1)\n}")        # t = t0 in a start value
        sol = vgpu.solve(src_t, dims={"N": 4}, t0=t0, backend=backend)
        assert np.all(np.sign(sol.states) == sign), (t0, sol.states)
