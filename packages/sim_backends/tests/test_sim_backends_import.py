from importlib.metadata import version

import fuselab_sim_backends


def test_package_imports_and_reports_its_distribution_version():
    assert fuselab_sim_backends.__version__ == version("fuselab-sim-backends")
