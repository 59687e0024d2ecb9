"""Hydra configuration of fuselab's tasks (config.yaml and the task/ group)."""
