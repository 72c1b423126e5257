"""The dispatch pacing and splitting rules, once for every compiled backend
(vgpu_compiler/runtime/pacing.py): pure functions, checked against hand loops."""
import pytest

from vgpu_compiler.runtime import pacing
from vgpu_compiler.runtime.pacing import (Pacer, capped, first_steps, history_end, overhead_of,
                                          paced, segments)


def _covered(segs, steps, start=0):
    ends = [s1 for s0, s1 in segs if s1 > s0]
    starts = [s0 for s0, s1 in segs if s1 > s0]
    assert starts == ([start] + ends[:-1] if ends else []), segs     # contiguous, in order
    assert (ends[-1] if ends else start) == steps


@pytest.mark.parametrize("steps,per,history", [(10, 3, None), (10, 20, None), (0, 5, None),
                                               (12, 5, [0, 4, 8, 12]), (7, 2, [0, 3, 6, 7])])
def test_segments_cover_every_step_once_and_stop_at_saved_steps(steps, per, history):
    segs = list(segments(steps, Pacer(per, None), history))
    _covered(segs, steps)
    assert all(s1 - s0 <= per for s0, s1 in segs)
    if history:
        assert segs[0] == (0, 0)                    # the start is saved on its own
        assert set(history) <= {s1 for _, s1 in segs}
    if steps == 0:
        assert segs == [(0, 0)]


@pytest.mark.parametrize("step0,total,per", [(0, 10, 3), (5, 17, 4), (8, 8, 3), (3, 4, 9)])
def test_segments_of_an_advance_start_where_it_left_off(step0, total, per):
    """A Simulation's advance: steps [step0, total), an empty one when there are none
    (the loop a session wrote by hand)."""
    segs = list(segments(total, Pacer(per, None), start=step0))
    want, s0 = [], step0
    while True:
        s1 = min(s0 + per, total)
        want.append((s0, s1))
        s0 = s1
        if s0 >= total:
            break
    assert segs == want
    _covered(segs, total, step0)


def test_the_pacer_sizes_dispatches_by_time_grows_gently_and_keeps_its_cap():
    p = Pacer(10, None)
    p.record(10, 0.001)                 # far too short: grows, but at most 4x at a time
    assert p.steps == 40
    p.record(40, 1.0)                   # too long: shrinks to the target at once
    assert p.steps == int(40 * pacing.TARGET_SECONDS / 1.0)
    limited = Pacer(100, 7)
    assert limited.steps == 7
    limited.record(7, 1e-6)
    assert limited.steps == 7
    p.record(0, 0.0)                    # an empty dispatch teaches nothing
    assert p.steps >= 1


def test_segments_follow_the_pacer_as_it_changes():
    pacer = Pacer(2, None)
    segs = []
    for s0, s1 in segments(30, pacer, None):
        segs.append((s0, s1))
        pacer.record(s1 - s0, 1e-4)     # fast dispatches: the next ones are longer
    _covered(segs, 30)
    assert segs[0] == (0, 2) and segs[1] == (2, 10)


@pytest.mark.parametrize("steps,seconds,current,aim,cap", [
    (100, 0.05, 100, 0.2, None), (100, 2.0, 100, 0.2, None), (100, 0.2, 100, 1.0, 150),
    (1, 10.0, 1, 0.2, None), (0, 1.0, 33, 0.2, None), (5, 0.0, 33, 0.2, 8),
    (64, 0.01, 64, 1.0, 0)])
def test_paced_is_the_formula_the_drivers_wrote_by_hand(steps, seconds, current, aim, cap):
    """The arithmetic each of the six drivers had inline: aim at ``aim`` seconds, at
    most 4x the last and ``cap``, at least 1, unchanged when nothing was measured."""
    if steps > 0 and seconds > 0:
        want = int(steps * aim / seconds)
        hand = max(1, min(want, 4 * current, cap or want))
    else:
        hand = current
    assert paced(steps, seconds, current, aim, cap) == hand


def test_first_steps_and_caps():
    assert first_steps(1 << 20, 1024, 4, None) == (1 << 20) // (1024 * 4)
    assert first_steps(1 << 20, 1024, 4, 100) == 100                 # the cap wins
    assert first_steps(0, 1024, 4, None) == 1                        # at least one step
    assert first_steps(100, 0, 0, None) == 100                       # no divide by zero
    assert capped(50, 7) == 7 and capped(50, None) == 50 and capped(0, None) == 1
    assert pacing.target(True) == pacing.TARGET_CPU_SECONDS
    assert pacing.target(False) == pacing.TARGET_SECONDS


@pytest.mark.parametrize("steps,every,room,pace", [(100, 7, 3, 50), (100, 7, 100, 13),
                                                   (20, 1, 4, 100), (9, 10, 1, 100)])
def test_history_end_walks_a_history_run_in_blocks_that_fit(steps, every, room, pace):
    s0, ends = 0, []
    while s0 < steps:
        s1 = history_end(s0, steps, every, room, pace)
        assert s0 < s1 <= steps and s1 - s0 <= pace
        assert s1 // every - s0 // every <= room            # the slots it writes fit
        ends.append(s1)
        s0 = s1
    assert ends[-1] == steps


def test_a_dispatch_overhead_is_measured_and_not_let_starve_the_steps():
    """A device whose dispatch costs 0.5 s whatever its steps, plus 1 ms a step (llvmpipe's
    load and store of a million trajectories' carried state): aimed at 0.2 s, the old rule
    fell to one step a dispatch (0.501 s a step); the Pacer finds the overhead from two
    sizes and runs dispatches of (OVERHEAD_RATIO + 1) x 0.5 s, at most MAX_STRETCH x aim."""
    fixed, per = 0.5, 1e-3
    assert overhead_of((10, fixed + 10 * per), (40, fixed + 40 * per)) == pytest.approx(fixed)
    assert overhead_of((10, 1.0), (11, 2.0)) is None           # sizes too close to tell
    assert overhead_of((10, 1.0), (40, 0.5)) is None           # per-step time <= 0: noise
    p = Pacer(33, None, 0.2)
    for _ in range(12):
        p.record(p.steps, fixed + p.steps * per)
    assert p.overhead == pytest.approx(fixed)
    goal = min((pacing.OVERHEAD_RATIO + 1) * fixed, pacing.MAX_STRETCH * 0.2)
    assert goal > 3 * fixed
    assert p.steps == pytest.approx((goal - fixed) / per, rel=0.01)
    assert paced(1, fixed + per, 1, 0.2, None) == 1            # the rule without it: starved
    # bounded: MAX_STRETCH x aim, and the cap, still hold; no overhead: the plain rule
    assert paced(10, 1.01, 10, 0.1, None, overhead=1.0) == 1
    assert paced(10, 0.6, 10, 0.2, 7, overhead=0.5) == 7
    assert paced(100, 2.0, 100, 0.2, None, overhead=0.0) == paced(100, 2.0, 100, 0.2, None)
    half = p.steps // 2                       # a noisy read: the estimate at most halves
    p.record(half, half * per + 0.01)
    assert p.overhead == pytest.approx(fixed / 2)
