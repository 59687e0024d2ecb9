from importlib.metadata import version

import fuselab_envs


def test_package_imports_and_reports_its_distribution_version():
    assert fuselab_envs.__version__ == version("fuselab-envs")
