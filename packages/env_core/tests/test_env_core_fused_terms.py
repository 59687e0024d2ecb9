"""The fused kernel against the NumPy oracle, runtime scalars, and plan-key sharing."""

import logging
import re

import env_core_synthetic_task as synthetic
import numba
import numpy as np
import pytest
from env_core_test_terms import random_state, terms_cfg

from fuselab_env_core.numpy_runtime import NumpyTerms
from fuselab_env_core.plan import Input, PlanError
from fuselab_env_core.plan_key import plan_key
from fuselab_env_core.runtime import FusedTerms

RTOL, ATOL = 1e-5, 1e-6  # float32


def run_both(cfg, state, dt, seed=0):
    fused = FusedTerms.build(cfg, state, dt=dt)
    oracle = NumpyTerms(fused.plan, state)
    fused.seed_noise(seed)
    fused.next_step()
    oracle.buffers.noise_key[:] = fused.buffers.noise_key
    fused()
    oracle()
    return fused, oracle


def assert_same_outputs(fused, oracle):
    f, o = fused.buffers, oracle.buffers
    np.testing.assert_allclose(f.reward_terms, o.reward_terms, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(f.reward, o.reward, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(f.termination_terms, o.termination_terms)
    np.testing.assert_array_equal(f.terminated, o.terminated)
    np.testing.assert_array_equal(f.truncated, o.truncated)
    for name in f.workspace:
        np.testing.assert_allclose(f.workspace[name], o.workspace[name], rtol=RTOL, atol=ATOL)
    for group in f.obs:
        np.testing.assert_allclose(f.obs[group], o.obs[group], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tracking_shaped_plan_matches_numpy_oracle(seed):
    state = synthetic.random_state(384, np.random.default_rng(seed))
    fused, oracle = run_both(synthetic.task_terms(), state, dt=0.02, seed=seed)
    assert_same_outputs(fused, oracle)
    # The random states exercise both outcomes of every termination.
    assert 0 < fused.buffers.terminated.mean() < 1
    assert 0 < fused.buffers.truncated.mean() < 1
    actor, critic = fused.plan.observations["actor"], fused.plan.observations["critic"]
    noisy_obs = fused.buffers.obs["actor"].copy()
    std = fused.observation_noise_std("actor")  # per observation column, 0 where clean
    for call in actor.noisy_terms():
        fused.set_scalar(f"observations.actor.{call.entry}.noise_std", 0.0)
    fused.observe()
    noise = noisy_obs - fused.buffers.obs["actor"]
    assert "command" not in {t.entry for t in actor.noisy_terms()}  # noise_std 0: a clean term
    for call in actor.terms:
        configured = synthetic.task_terms()["observations"]["actor"]["terms"][call.entry]
        columns = actor.slices()[call.entry]
        if call in actor.noisy_terms():
            # uniform in +- sqrt(3) std, with the configured std
            assert np.std(noise[:, columns]) == pytest.approx(configured["noise_std"], rel=0.1)
            assert np.abs(noise[:, columns]).max() <= np.sqrt(3) * configured["noise_std"] + 1e-5
            np.testing.assert_array_equal(std[columns], np.float32(configured["noise_std"]))
        else:
            np.testing.assert_array_equal(noise[:, columns], 0.0)
            np.testing.assert_array_equal(std[columns], 0.0)
    assert not fused.observation_noise_std("actor").any()  # the std is a runtime slot
    assert not fused.observation_noise_std("critic").any()
    np.testing.assert_array_equal(  # the clean command is the same in the noisy group
        fused.buffers.obs["actor"][:, actor.slices()["command"]],
        fused.buffers.obs["critic"][:, critic.slices()["command"]],
    )


def test_small_plan_matches_numpy_oracle_and_reports_terminations_apart():
    state = random_state(257)
    fused, oracle = run_both(terms_cfg(), state, dt=0.01)
    assert_same_outputs(fused, oracle)
    b = fused.buffers
    speed_sq = state["vel"][:, 0] ** 2 + state["vel"][:, 1] ** 2
    np.testing.assert_array_equal(b.terminated, speed_sq > 1.0)
    np.testing.assert_array_equal(b.truncated, state["step"] >= 10)  # time-out apart


def test_float_variants_share_one_kernel_and_compute_their_own_values():
    state = random_state(64)
    base = FusedTerms.build(terms_cfg(), state, dt=0.02)
    variant = FusedTerms.build(
        terms_cfg(std=0.9, weight=-3.5, limit=0.7, scale=2.5), state, dt=0.005
    )
    assert variant.report.key == base.report.key == plan_key(variant.plan)
    assert variant.kernels is base.kernels
    assert variant.report.cache == "in-process" and not variant.report.compiled
    for fused in (base, variant):
        oracle = NumpyTerms(fused.plan, state)
        fused()
        oracle()
        assert_same_outputs(fused, oracle)
    expected = np.exp(-base.buffers.workspace["speed_sq"] / 0.81) * -3.5 * 0.005
    np.testing.assert_allclose(variant.buffers.reward, expected, rtol=RTOL, atol=ATOL)
    assert not np.allclose(variant.buffers.reward, base.buffers.reward)


def test_runtime_scalars_retune_without_rebuild():
    state = random_state(32)
    fused = FusedTerms.build(terms_cfg(), state, dt=0.02)
    fused.set_scalar("rewards.speed.std", 2.0)
    fused.set_scalar("rewards.speed.weight", 1.0)
    fused.set_scalar("dt", 0.1)
    fused()
    speed_sq = fused.buffers.workspace["speed_sq"]
    np.testing.assert_allclose(fused.buffers.reward, np.exp(-speed_sq / 4.0) * 0.1, rtol=RTOL)
    assert fused.scalar("rewards.speed.std") == 2.0
    with pytest.raises(KeyError, match="did you mean 'rewards.speed.std'"):
        fused.set_scalar("rewards.speed.stdd", 1.0)
    with pytest.raises(PlanError, match="finite float"):
        fused.set_scalar("dt", float("nan"))


def test_zero_weight_skips_the_term():
    state = random_state(16)
    fused = FusedTerms.build(terms_cfg(nan_weight=0.0), state, dt=0.02)
    fused()
    assert np.all(fused.buffers.reward_terms[:, 1] == 0)  # the NaN term was never added
    assert np.all(np.isfinite(fused.buffers.reward))
    fused.set_scalar("rewards.nan.weight", 1.0)
    fused()
    assert np.all(np.isnan(fused.buffers.reward))


def test_editing_a_term_source_changes_the_key(tmp_path, monkeypatch):
    module = tmp_path / "editable_terms.py"
    template = (
        "from fuselab_env_core.terms import reward\n\n"
        "@reward(name='editable_reward')\n"
        "def editable_reward(i, vel, gain: float = 1.0):\n"
        "    return vel[i, 0] * gain{extra}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    module.write_text(template.format(extra=""))
    import editable_terms

    cfg = {"rewards": {"r": {"term": "editable_reward"}}}
    state = random_state(8)
    from fuselab_env_core.plan import resolve_plan
    from fuselab_env_core.runtime import state_specs

    first = plan_key(resolve_plan(cfg, state_specs(state), dt=0.02))
    tuned = {"rewards": {"r": {"term": "editable_reward", "weight": 3.0, "params": {"gain": 7.0}}}}
    assert plan_key(resolve_plan(tuned, state_specs(state), dt=0.5)) == first
    module.write_text(template.format(extra=" + 1.0  # edited"))
    importlib.reload(editable_terms)
    assert plan_key(resolve_plan(cfg, state_specs(state), dt=0.02)) != first


def test_thread_budget_is_applied_to_numba_only_and_validated():
    state = random_state(16)
    fused = FusedTerms.build(terms_cfg(), state, dt=0.02, num_threads=1)
    fused()
    assert numba.get_num_threads() == 1
    assert (
        FusedTerms.build(terms_cfg(), state, dt=0.02).num_threads == numba.config.NUMBA_NUM_THREADS
    )
    with pytest.raises(PlanError, match="num_threads: expected 1.."):
        FusedTerms.build(terms_cfg(), state, dt=0.02, num_threads=10_000)


def test_build_logs_every_step_with_milliseconds(caplog):
    caplog.set_level(logging.INFO, logger="fuselab_env_core")
    FusedTerms.build(terms_cfg(scale=3.0), random_state(8), dt=0.02)
    text = caplog.text
    for step in (r"resolve plan: [\d.]+ ms", r"bind: [\d.]+ ms, warm up: [\d.]+ ms"):
        assert re.search(step, text), step
    assert re.search(r"plan [0-9a-f]+: (in-process cache hit|disk cache|cache miss)", text)


def test_state_buffers_in_another_order_get_another_kernel():
    state = random_state(16)
    swapped = {"step": state["step"], "vel": state["vel"]}
    first = FusedTerms.build(terms_cfg(), state, dt=0.02)
    second = FusedTerms.build(terms_cfg(), swapped, dt=0.02)  # kernel arguments follow the order
    assert first.report.key != second.report.key
    second()
    np.testing.assert_array_equal(second.buffers.truncated, state["step"] >= 10)


def test_kernel_prefetches_the_rows_later_terms_read():
    """Ahead of each env, the kernel prefetches the state rows that terms after the first one
    read; the first term's rows and rows shorter than a cache line it leaves to the hardware."""
    state = synthetic.random_state(64, np.random.default_rng(0))
    fused = FusedTerms.build(synthetic.task_terms(), state, dt=0.02)
    source = fused.report.source_path.read_text()
    prefetched = set(re.findall(r"prefetch_row\((\w+), i \+ 2, 0\)", source))
    calls = fused.plan.terms()
    reads = [
        {b.name for b in c.args if isinstance(b, Input) and b.source == "state"} for c in calls
    ]
    later = set().union(*reads[1:]) - reads[0]
    long_rows = {name for name in later if state[name][0].nbytes >= 64}
    assert long_rows and prefetched == {f"state_{name}" for name in long_rows}


def test_observation_noise_is_a_function_of_seed_draw_row_and_column():
    """The kernel's noise: reproduced by the same seed and draw, new at every draw, another
    stream for another seed, and a row's values the same when it is observed alone."""
    state = synthetic.random_state(64, np.random.default_rng(0))
    fused = FusedTerms.build(synthetic.task_terms(), state, dt=0.02)

    def actor_obs(seed, draws, rows=None):
        fused.seed_noise(seed)
        for _ in range(draws):
            fused.next_step()
        fused.observe(rows)
        return fused.buffers.obs["actor"].copy()

    first = actor_obs(seed=0, draws=1)
    np.testing.assert_array_equal(actor_obs(seed=0, draws=1), first)
    assert not np.allclose(actor_obs(seed=0, draws=2), first)
    assert not np.allclose(actor_obs(seed=1, draws=1), first)
    fused.buffers.obs["actor"][:] = 0.0
    alone = actor_obs(seed=0, draws=1, rows=np.array([5]))  # only row 5 observed
    np.testing.assert_array_equal(alone[5], first[5])
