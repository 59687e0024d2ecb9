"""Hydra configuration of fuselab-rl: train.yaml (task + env + algo + run keys), play.yaml."""
