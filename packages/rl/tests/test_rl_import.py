from importlib.metadata import version

import fuselab_rl


def test_package_imports_and_reports_its_distribution_version():
    assert fuselab_rl.__version__ == version("fuselab-rl")
