"""Build a small plan in a fresh process and print its BuildReport as JSON (for cache tests).

Usage: python env_core_build_once.py [MODULE TERM]  -- with MODULE, a one-reward plan of TERM.
"""

import importlib
import json
import logging
import sys
import time

started = time.perf_counter()
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")

from env_core_test_terms import random_state, terms_cfg  # noqa: E402

from fuselab_env_core.runtime import FusedTerms  # noqa: E402

if len(sys.argv) == 3:
    importlib.import_module(sys.argv[1])
    cfg = {"rewards": {"r": {"term": sys.argv[2]}}}
else:
    cfg = terms_cfg()
imported = time.perf_counter()
fused = FusedTerms.build(cfg, random_state(16), dt=0.02)
report = fused.report
print(
    json.dumps(
        {
            "key": report.key,
            "cache": report.cache,
            "compiled": report.compiled,
            "source_path": str(report.source_path),
            "build_ms": (time.perf_counter() - imported) * 1e3,
            "process_ms": (time.perf_counter() - started) * 1e3,
        }
    )
)
