"""policy.onnx (actor + normalizer) computes what the torch policy computes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from fuselab_rl.export import export_onnx, onnx_max_error
from fuselab_rl.networks import ActorCritic


def trained_looking_policy(clip=None):
    torch.manual_seed(0)
    policy = ActorCritic(12, 15, 4, actor_hidden_dims=[32, 16], critic_hidden_dims=[8])
    # Normalizer statistics far from (0, 1): a wrong normalization would show.
    policy.update_normalizers(torch.randn(500, 12) * 4.0 + 2.0, torch.randn(500, 15))
    return policy.policy(clip)


def test_onnx_export_matches_torch_within_1e_5_at_any_batch_size(tmp_path):
    policy = trained_looking_policy()
    path = export_onnx(policy, 12, tmp_path / "policy.onnx")
    onnx.checker.check_model(onnx.load(str(path)))
    assert [p.name for p in tmp_path.iterdir()] == ["policy.onnx"]  # one file, no temporaries
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (1, 7, 256):
        obs = torch.randn(batch, 12) * 5.0
        actions = np.asarray(session.run(["actions"], {"obs": obs.numpy()})[0])
        with torch.no_grad():
            expected = policy(obs).numpy()
        assert actions.shape == (batch, 4)
        assert abs(actions - expected).max() <= 1e-5
    assert onnx_max_error(path, policy, 12) <= 1e-5


def test_actions_clipped_in_training_are_clipped_in_the_export(tmp_path):
    policy = trained_looking_policy(clip=0.05)
    path = export_onnx(policy, 12, tmp_path / "policy.onnx")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    actions = np.asarray(session.run(["actions"], {"obs": np.random.randn(64, 12).astype("f4")})[0])
    assert np.abs(actions).max() == pytest.approx(0.05)  # the clip bites, in ONNX too


def test_a_policy_that_disagrees_with_its_export_is_refused(tmp_path, monkeypatch):
    policy = trained_looking_policy()
    monkeypatch.setattr("fuselab_rl.export.onnx_max_error", lambda *a, **k: 0.5)
    with pytest.raises(RuntimeError, match=r"ONNX export: output differs from torch by 5.00e-01"):
        export_onnx(policy, 12, tmp_path / "policy.onnx")
    assert list(tmp_path.iterdir()) == []
