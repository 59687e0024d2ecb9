import os
from pathlib import Path

# One kernel cache for the whole test run (nox sets it; plain pytest gets a repo-local one).
os.environ.setdefault("FUSELAB_CACHE_DIR", str(Path(__file__).parents[3] / ".cache" / "fuselab"))
