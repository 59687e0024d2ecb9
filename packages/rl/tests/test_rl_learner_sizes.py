"""Learner sizes by device (fuselab_rl.learner_sizes) on a config of nested keys."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from fuselab_rl.learner_sizes import choose_learner_sizes, describe_sizes, keep_saved_sizes


def config(**algo):
    tables = {
        "learner_sizes": {
            "cpu": {"net": {"dims": [8], "heads": 1}, "batch": 64},
            "cuda": {"net": {"dims": [64], "heads": 4}, "batch": 512},
        },
    }
    base = {"net": {"dims": "auto", "heads": "auto"}, "batch": "auto"}
    return OmegaConf.create({"task_name": "walk", "algo": {**base, **tables, **algo}})


def test_auto_keys_at_any_depth_take_the_devices_table():
    cfg = config()
    chosen = choose_learner_sizes(cfg, "cpu")
    assert chosen == {"net.dims": [8], "net.heads": 1, "batch": 64}
    assert cfg.algo.net.heads == 1 and cfg.algo.batch == 64
    assert describe_sizes(cfg, chosen, "cpu") == "cpu learner: net.dims [8], net.heads 1, batch 64"
    cuda = config()
    assert choose_learner_sizes(cuda, "cuda") == {"net.dims": [64], "net.heads": 4, "batch": 512}


def test_a_value_given_is_kept_and_named_as_set():
    cfg = config(batch=16)
    assert choose_learner_sizes(cfg, "cpu") == {"net.dims": [8], "net.heads": 1}
    assert describe_sizes(cfg, {"net.dims": [8], "net.heads": 1}, "cpu").endswith(
        "batch 16 (set in the config)"
    )


def test_a_resume_keeps_the_saved_sizes_nested_or_not():
    cfg = config(batch=16)
    keep_saved_sizes(cfg, {"net": {"dims": [32], "heads": None}, "batch": 99})
    assert cfg.algo.net.dims == [32] and cfg.algo.net.heads is None  # a saved null is a value
    assert cfg.algo.batch == 16  # given on resume: wins


def test_a_misspelt_table_key_and_a_size_no_table_holds_are_named():
    cfg = config()
    cfg.algo.learner_sizes.cpu.bacth = 32
    with pytest.raises(ValueError, match=r"algo.learner_sizes.cpu.bacth: algo has no key bacth"):
        choose_learner_sizes(cfg, "cpu")
    cfg = config()
    del cfg.algo.learner_sizes.cpu["batch"]
    with pytest.raises(ValueError, match=r"algo.batch: 'auto', but algo.learner_sizes.cpu does"):
        choose_learner_sizes(cfg, "cpu")
