"""Screenshots of fuselab-view for the docs, and the viewer's frame rate and real-time factor.

Each task's viewer (a run's policy when one is given, else zero actions) is served on
localhost, loaded in headless Chromium (Debian's package, driven by Playwright) for
``--seconds``, then photographed; the viewer's own frames/s and real-time factor at that moment
are written beside the PNGs as JSON:

    python tools/view_screenshots.py --walk-run runs/g1_walk_flat/DATE --out docs/figures
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from pathlib import Path

from fuselab_rl.view import Viewer, source_of


def photograph(viewer: Viewer, path: Path, seconds: float, chromium: str) -> dict:
    from playwright.sync_api import sync_playwright

    thread = threading.Thread(target=viewer.run, kwargs={"seconds": seconds + 20.0}, daemon=True)
    thread.start()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--use-angle=swiftshader"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"http://127.0.0.1:{viewer.server.get_port()}")
        page.locator("canvas").first.wait_for(timeout=30_000)
        time.sleep(seconds)
        figures = {"frames_per_s": viewer.fps, "realtime_factor": viewer.realtime_factor}
        page.screenshot(path=str(path))
        browser.close()
    viewer.stop()
    thread.join()
    return {**figures, "steps": viewer.steps, "screenshot": str(path)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walk-run", help="a g1_walk_flat run directory (else zero actions)")
    parser.add_argument("--tracking-run", help="a g1_motion_tracking run directory")
    parser.add_argument("--seconds", type=float, default=10.0, help="in the browser, then shoot")
    parser.add_argument("--out", type=Path, default=Path("docs/figures"))
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.stderr.write("view_screenshots: no Chromium (Debian: apt-get install chromium)\n")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    report = {}
    for task, run in (("g1_walk_flat", args.walk_run), ("g1_motion_tracking", args.tracking_run)):
        source = source_of(run=run) if run else source_of(task=task)
        viewer = Viewer(source, host="127.0.0.1", port=8200)
        try:
            report[task] = photograph(viewer, args.out / f"view_{task}.png", args.seconds, chromium)
        finally:
            viewer.close()
        print(task, report[task])
    (args.out / "view_figures.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
