"""fuselab's tasks: envs on FusedEnv, configured by the Hydra YAML in fuselab_envs/configs."""
