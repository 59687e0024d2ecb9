"""Bad configuration raises an error naming the field, the value and what is accepted."""

from dataclasses import dataclass

import numpy as np
import pytest
from env_core_test_terms import random_state, terms_cfg

from fuselab_env_core.numpy_runtime import NumpyTerms
from fuselab_env_core.plan import PlanError, resolve_plan
from fuselab_env_core.ranges import Fraction, Interval, PositiveFloat, Section, build_section
from fuselab_env_core.runtime import FusedTerms, state_specs
from fuselab_env_core.terms import reward

STATE = random_state(4)


def resolve(cfg):
    return resolve_plan(cfg, state_specs(STATE), dt=0.02)


def test_unknown_term_suggests_the_nearest_name():
    with pytest.raises(
        PlanError, match=r"rewards\.r: unknown term 'speed_ex'; did you mean 'speed_exp'"
    ):
        resolve({"rewards": {"r": {"term": "speed_ex"}}})


def test_term_of_the_wrong_kind():
    with pytest.raises(
        PlanError, match="'too_fast' is a termination term; this section takes reward"
    ):
        resolve({"rewards": {"r": {"term": "too_fast"}}})


@pytest.mark.parametrize(
    "params, message",
    [
        ({"std": "wide"}, r"rewards\.r\.params\.std: expected a float, got 'wide'"),
        ({"std": True}, r"rewards\.r\.params\.std: expected a float, got True"),
        ({"stdd": 0.1}, r"term 'speed_exp' has no parameter 'stdd'; did you mean 'std'"),
    ],
)
def test_wrong_or_unknown_parameter(params, message):
    with pytest.raises(PlanError, match=message):
        resolve(
            {
                "preamble": {"s": {"term": "planar_speed_sq"}},
                "rewards": {"r": {"term": "speed_exp", "params": params}},
            }
        )


def test_wrong_int_parameter_and_weight_types():
    with pytest.raises(
        PlanError, match=r"terminations\.t\.params\.max_steps: expected int, got 2\.5"
    ):
        resolve({"terminations": {"t": {"term": "episode_over", "params": {"max_steps": 2.5}}}})
    with pytest.raises(PlanError, match=r"rewards\.r\.weight: expected a float, got 'heavy'"):
        resolve({"rewards": {"r": {"term": "not_a_number", "weight": "heavy"}}})


def test_missing_parameter():
    @reward(name="needs_gain")
    def needs_gain(i, vel, gain: float):
        return vel[i, 0] * gain

    with pytest.raises(
        PlanError,
        match=r"rewards\.r\.params\.gain: missing parameter of term 'needs_gain' \(expected float\)",
    ):
        resolve({"rewards": {"r": {"term": "needs_gain"}}})


def test_reading_a_workspace_field_before_its_preamble_names_the_input():
    with pytest.raises(
        PlanError, match=r"rewards\.r: term 'speed_exp' reads 'speed_sq', which is no state buffer"
    ):
        resolve({"rewards": {"r": {"term": "speed_exp"}}})


def test_duplicate_workspace_name():
    cfg = {"preamble": {"a": {"term": "planar_speed_sq"}, "b": {"term": "planar_speed_sq"}}}
    with pytest.raises(
        PlanError,
        match=r"preamble\.b: workspace output 'speed_sq' is already a workspace field \(duplicate name\)",
    ):
        resolve(cfg)


def test_duplicate_term_registration_from_another_function():
    with pytest.raises(ValueError, match="term name 'speed_exp' is already registered"):

        @reward(name="speed_exp")
        def other(i, vel):
            return 0.0


def test_unknown_config_key_suggests_the_nearest():
    with pytest.raises(KeyError, match=r"rewards\.r: unknown key 'wieght'; did you mean 'weight'"):
        resolve({"rewards": {"r": {"term": "not_a_number", "wieght": 1.0}}})
    with pytest.raises(KeyError, match=r"terms: unknown key 'reward'; did you mean 'rewards'"):
        resolve({"reward": {}})


def test_observation_size_mismatch_of_a_twin_is_named():
    cfg = {"observations": {"actor": {"terms": {"v": {"term": "wrong_width_twin"}}}}}
    plan = resolve(cfg)
    assert plan.observations["actor"].width == 2
    with pytest.raises(
        PlanError,
        match=r"observations\.actor\.v: NumPy twin of 'wrong_width_twin' returned shape \(4, 3\), expected \(4, 2\)",
    ):
        NumpyTerms(plan, STATE)()


def test_state_buffer_of_the_wrong_shape_or_dtype_is_named():
    fused = FusedTerms.build(terms_cfg(), STATE, dt=0.02)
    bad = dict(STATE, vel=np.zeros((4, 2), np.float32))
    with pytest.raises(
        PlanError,
        match=r"state buffer 'vel': expected shape \(4, 3\) and dtype float32, got \(4, 2\) float32",
    ):
        FusedTerms(fused.plan, fused.kernels, fused.report, bad)
    mixed = dict(STATE, step=np.zeros(5, np.int32))
    with pytest.raises(PlanError, match="must share a leading num_envs"):
        FusedTerms.build(terms_cfg(), mixed, dt=0.02)


def test_bad_dt_and_term_signatures():
    with pytest.raises(PlanError, match=r"dt: expected > 0, got -0.01"):
        resolve_plan({}, state_specs(STATE), dt=-0.01)
    with pytest.raises(TypeError, match="first argument must be the env index 'i'"):

        @reward(name="no_index")
        def no_index(vel):
            return 0.0

    with pytest.raises(TypeError, match="parameter 'gain' is annotated"):

        @reward(name="bad_annotation")
        def bad_annotation(i, gain: list):
            return 0.0


def test_dataclass_config_resolves_like_the_dict_form():
    from fuselab_env_core import (
        ObservationCfg,
        ObservationGroupCfg,
        RewardCfg,
        TaskTermsCfg,
        TermCfg,
    )

    cfg = TaskTermsCfg(
        preamble={"speed": TermCfg("planar_speed_sq")},
        rewards={"speed": RewardCfg("speed_exp", {"std": 0.7}, weight=1.5)},
        observations={"critic": ObservationGroupCfg({"vel": ObservationCfg("scaled_velocity")})},
    )
    plan = resolve(cfg)
    assert plan.slot_names == [
        "dt",
        "rewards.speed.weight",
        "rewards.speed.std",
        "observations.critic.vel.scale",
    ]
    np.testing.assert_allclose(plan.slot_values, [0.02, 1.5, 0.7, 1.0], rtol=1e-6)
    assert plan.observations["critic"].slices() == {"vel": slice(0, 3)}


def test_a_parameter_outside_its_declared_range_is_named_with_the_range():
    with pytest.raises(PlanError, match=r"rewards\.speed\.params\.std: expected > 0, got 0\.0"):
        resolve(terms_cfg(std=0.0))
    fused = FusedTerms.build(terms_cfg(), STATE, dt=0.02)
    with pytest.raises(
        PlanError, match=r"runtime scalar 'rewards\.speed\.std': expected > 0, got -1"
    ):
        fused.set_scalar("rewards.speed.std", -1)
    with pytest.raises(PlanError, match=r"runtime scalar 'dt': expected > 0, got 0"):
        fused.set_scalar("dt", 0)
    fused.set_scalar("rewards.speed.std", 0.25)  # inside the range: tuned, no recompilation
    assert fused.scalar("rewards.speed.std") == 0.25


def test_a_range_declared_on_a_non_number_is_refused_when_the_term_is_registered():
    from typing import Annotated

    from fuselab_env_core.ranges import Range

    with pytest.raises(TypeError, match="parameter 'name': Annotated takes float or int and one"):

        @reward(name="badly_ranged")
        def badly_ranged(i, vel, name: Annotated[str, Range(gt=0)] = "x"):
            return 0.0


def test_declared_types_check_and_convert_values_naming_the_key():
    from fuselab_env_core.ranges import LayerSizes, check_value

    assert check_value("k", [64, 32], LayerSizes) == (64, 32)
    for value in ([], [0], "64", [1.5]):
        with pytest.raises(ValueError, match=r"^k: expected a non-empty list, each (an int )?>= 1"):
            check_value("k", value, LayerSizes)
    assert check_value("k", [-1, 1], Interval) == (-1.0, 1.0)
    assert check_value("k", None, PositiveFloat | None) is None
    with pytest.raises(ValueError, match=r"^k: expected > 0 or null, got 0$"):
        check_value("k", 0, PositiveFloat | None)
    with pytest.raises(ValueError, match=r"^k: expected a finite number >= 0 and <= 1, got nan$"):
        check_value("k", float("nan"), Fraction)


@dataclass
class _WindowCfg(Section):
    KEY = "window"
    seconds: PositiveFloat = 1.0
    share: Fraction = 0.5
    span: Interval = (0.0, 1.0)


def test_a_section_is_checked_however_it_is_built_naming_its_key():
    built = build_section(_WindowCfg, {"span": [-1, 2]})
    assert built.span == (-1.0, 2.0) and built.seconds == 1.0  # converted: a list to a pair
    with pytest.raises(ValueError, match=r"^window\.share: expected >= 0 and <= 1, got 2$"):
        _WindowCfg(share=2)  # built in Python, not from a config
    with pytest.raises(ValueError, match=r"^window\.seconds: expected > 0, got 0$"):
        build_section(_WindowCfg, {"seconds": 0})
    with pytest.raises(ValueError, match=r"^window: unknown keys \['secs'\]; accepted: \["):
        build_section(_WindowCfg, {"secs": 2})


def test_a_curriculum_that_cannot_begin_at_a_level_is_refused_when_registered():
    from fuselab_env_core.curriculum import CURRICULA, Curriculum, curriculum

    with pytest.raises(TypeError, match="curriculum 'no_start': its constructor must take start"):

        @curriculum("no_start")
        class NoStart(Curriculum):
            def __init__(self, context, step: Fraction = 0.1): ...

    assert "no_start" not in CURRICULA.names()
