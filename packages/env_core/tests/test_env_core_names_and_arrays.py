"""Body names, task arrays and persistent preamble terms: resolved by name once, compiled as
constants and data, checked against the NumPy oracle, and misnamed ones reported."""

import numpy as np
import pytest
from env_core_test_terms import BODY_NAMES, NAMED_ARRAYS, named_cfg, named_state

from fuselab_env_core.numpy_runtime import NumpyTerms
from fuselab_env_core.plan import Const, Data, PlanError
from fuselab_env_core.runtime import FusedTerms

NAMES = {"body_names": BODY_NAMES, "contact_body_names": ()}


def build(cfg=None, n=8, **kwargs):
    state = named_state(n)
    fused = FusedTerms.build(
        cfg or named_cfg(), state, dt=0.02, arrays=NAMED_ARRAYS, names=NAMES, **kwargs
    )
    return fused, state


def test_body_names_become_row_constants_and_task_arrays_kernel_data():
    fused, state = build()
    (height,) = fused.plan.rewards
    assert Const(1) in height.args  # body "b" is row 1
    assert Data(0) in height.args and fused.plan.data_names == ["floor_m"]
    heights = fused.plan.observations["policy"].terms[0]
    assert Const((2, 0)) in heights.args  # bodies [c, a]
    oracle = NumpyTerms(fused.plan, state)
    fused()
    oracle()
    np.testing.assert_allclose(fused.buffers.reward_terms, oracle.buffers.reward_terms, rtol=1e-6)
    np.testing.assert_array_equal(fused.buffers.obs["policy"], oracle.buffers.obs["policy"])
    np.testing.assert_allclose(
        fused.buffers.reward, (state["body_z"][:, 1] - 0.2) * 0.02, rtol=1e-5
    )


def test_persistent_outputs_advance_in_score_only_and_restart_at_their_reset_value():
    fused, _ = build()
    assert [c.entry for c in fused.plan.observed_preamble()] == []  # the clock is persistent
    for _ in range(3):
        fused.score()
    fused.observe()
    fused.observe()  # observing again advances nothing
    np.testing.assert_allclose(fused.buffers.obs["policy"][:, 2], 0.06, rtol=1e-5)
    fused.reset_rows(np.array([1, 4]))
    fused.observe(np.array([1, 4], np.intp))
    elapsed = fused.buffers.obs["policy"][:, 2]
    assert elapsed[1] == elapsed[4] == 0.0 and elapsed[0] == pytest.approx(0.06)


def test_observe_reruns_the_preamble_terms_observations_read():
    cfg = named_cfg()
    cfg["observations"]["policy"]["terms"]["speed"] = {"term": "speed_sq_observation"}
    fused, state = build(cfg)
    assert [c.entry for c in fused.plan.observed_preamble()] == ["speed"]
    fused()
    state["vel"][:] = 1.0  # the state moved (a reset, a push): observe sees it without score
    fused.observe()
    np.testing.assert_allclose(fused.buffers.obs["policy"][:, 3], 2.0)


@pytest.mark.parametrize(
    "body, bodies, message",
    [
        ("x", ("c",), r"rewards\.height\.params\.body: 'x' is not among the entity's body_names"),
        ("bb", ("c",), r"'bb' is not among the entity's body_names; did you mean 'b'"),
        (3, ("c",), r"rewards\.height\.params\.body: expected one body name, got 3"),
        ("b", (), r"params\.bodies: expected a non-empty list of body names, got \[\]"),
    ],
)
def test_misnamed_bodies_are_reported_with_the_entitys_names(body, bodies, message):
    with pytest.raises(PlanError, match=message):
        build(named_cfg(body, bodies))


def test_a_term_reading_a_missing_task_array_names_the_known_ones():
    state = named_state(4)
    with pytest.raises(PlanError, match="reads 'floor_m', which is no state buffer, task array"):
        FusedTerms.build(named_cfg(), state, dt=0.02, names=NAMES)


def test_a_task_array_of_another_length_shares_the_kernel_and_reads_its_own_values():
    """A data array's length is a runtime value (another motion clip is another table of the
    same kind): one kernel for both lengths; another dtype is another kernel."""
    fused, state = build()
    longer = {"floor_m": np.array([0.1, 0.5, 0.3, 0.4], np.float32)}
    other = FusedTerms.build(named_cfg(), state, dt=0.02, arrays=longer, names=NAMES)
    assert other.report.key == fused.report.key and other.kernels is fused.kernels
    other()
    np.testing.assert_allclose(
        other.buffers.reward, (state["body_z"][:, 1] - 0.5) * 0.02, rtol=1e-5
    )
    as_float64 = {"floor_m": longer["floor_m"].astype(np.float64)}
    wider = FusedTerms.build(named_cfg(), state, dt=0.02, arrays=as_float64, names=NAMES)
    assert wider.report.key != fused.report.key
