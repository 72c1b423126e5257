"""Noise meets the adaptive methods: the contract allows noise with euler and milstein
only, and save_at (a continuous extension) not at all."""
import numpy as np
import pytest

import vgpu

OU = """
field ou {{
    param theta = 1.0
    param sigma = 0.3
    noise xi
    state x
    dx/dt = -theta * x + sigma * xi
    solve {solve}
}}
"""


@pytest.mark.parametrize("method", ["bs3", "dopri5", "tsit5"])
def test_adaptive_method_with_noise_is_an_error(method):
    with pytest.raises(vgpu.VgpuError) as err:
        vgpu.run_field(OU.format(solve=f"{method}(t1 = 1)"), np.zeros(4), backend="numpy")
    assert method in str(err.value) and "noise" in str(err.value)
    assert err.value.line == 8


def test_save_at_with_noise_is_an_error_naming_it():
    with pytest.raises(vgpu.VgpuError, match="save_at") as err:
        vgpu.solve(OU.format(solve="euler(dt = 0.01, steps = 10)"), np.zeros(4),
                   backend="numpy", save_at=[0.0, 0.05])
    assert "xi" in str(err.value)
