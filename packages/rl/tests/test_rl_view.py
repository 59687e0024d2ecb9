"""fuselab-view: the viewer's sources refuse bad input; a real Chromium loads the page, draws the
robot and drives the env's velocity command through a slider; a clip plays, scrubs and shows
its reference; a run's checkpoints swap."""

from __future__ import annotations

import io
import shutil
import threading
import time

import numpy as np
import pytest
from rl_fake_env import cartpole_run_overrides

from fuselab_rl.runner import compose_config, create_training_handle
from fuselab_rl.view import Viewer, source_of

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "expected exactly one"),
        ({"task": "g1_walk_flat", "clip": "a.npz"}, "expected exactly one"),
        ({"task": "g1_walk_flat", "num_envs": 0}, "num_envs: expected an int in 1..64"),
        ({"task": "g1_walk_flat", "events": "all"}, "events: expected one of nominal, train"),
        ({"task": "g1_walk"}, "unknown task 'g1_walk'"),
        ({"run": "/nonexistent/run"}, "run: no such file or directory"),
    ],
)
def test_a_bad_source_is_one_line_naming_the_field(kwargs, message):
    with pytest.raises((ValueError, KeyError, FileNotFoundError), match=message):
        source_of(**kwargs)


def running(viewer: Viewer, seconds: float) -> threading.Thread:
    thread = threading.Thread(target=viewer.run, kwargs={"seconds": seconds}, daemon=True)
    thread.start()
    return thread


def test_chromium_shows_the_robot_and_a_slider_commands_the_env():
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    if CHROMIUM is None:
        pytest.skip("no Chromium here (Debian: apt-get install chromium)")
    from PIL import Image

    viewer = Viewer(source_of(task="g1_walk_flat"), host="127.0.0.1", port=8180)
    assert viewer.joystick is not None
    thread = running(viewer, seconds=60.0)
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--use-angle=swiftshader"])
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.goto(f"http://127.0.0.1:{viewer.server.get_port()}")
            canvas = page.locator("canvas").first
            canvas.wait_for(timeout=30_000)
            time.sleep(3.0)  # the scene's meshes arrive over the websocket
            pixels = np.asarray(Image.open(io.BytesIO(canvas.screenshot())).convert("L"), float)
            # the floor grid and the robot: far from one flat colour
            assert pixels.std() > 10.0
            assert np.mean(np.abs(pixels - np.median(pixels)) > 30) > 0.01

            vx = page.get_by_role("slider").first  # the panel's first slider: vx (m/s)
            box = vx.bounding_box()
            assert box is not None
            x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
            page.mouse.move(x, y)
            page.mouse.down()
            page.mouse.move(x + 40, y, steps=5)
            page.mouse.up()
            shown = float(vx.get_attribute("aria-valuenow") or "nan")
            deadline = time.time() + 5.0
            command = viewer.joystick.velocity.command
            while time.time() < deadline and command[0, 0] != np.float32(shown):
                time.sleep(0.05)
            browser.close()
    finally:
        viewer.stop()
        thread.join(timeout=10)
        viewer.close()
    assert shown > 0.0
    np.testing.assert_allclose(command[0], [shown, 0.0, 0.0], atol=1e-6)  # what terms read
    assert viewer.fps > 5.0 and viewer.steps > 0


def test_a_clip_plays_loops_and_scrubs_with_its_reference_as_the_ghost(tmp_path):
    from fuselab_envs.motion.synth import synth_clip

    clip = synth_clip(4.0).save(tmp_path / "clip.npz")  # 4 s at 50 fps: 200 frames
    viewer = Viewer(source_of(clip=str(clip)), host="127.0.0.1", port=8181)
    try:
        clip_panel = viewer.clip
        assert clip_panel is not None and viewer.source.clip_only
        motion = clip_panel.motion
        for _ in range(motion.num_frames + 5):  # past the end: back to the first frame
            viewer.step()
        assert int(motion.motion_frame[0]) == 5
        viewer.request(lambda: clip_panel.put_on(40))
        viewer.run(seconds=0.3)  # applies the request, then plays on from frame 40
        frame = int(motion.motion_frame[0])
        assert 40 < frame < 60
        viewer.render()
        assert clip_panel.timeline.value == frame
        reference = motion.table.body_pos_w[frame]  # (viser sends points as float16)
        np.testing.assert_allclose(clip_panel.ghost.points, reference, atol=1e-3)
        qpos, _ = motion.reference_state(np.array([frame], np.int32))
        np.testing.assert_allclose(viewer._qpos[0], qpos[0], atol=1e-5)  # the robot is on it
    finally:
        viewer.close()


def test_the_checkpoint_selector_swaps_the_policy(tmp_path):
    overrides = cartpole_run_overrides(tmp_path, "save_interval=1", "algo.num_steps_per_env=8")
    cfg = compose_config(overrides)
    with create_training_handle(cfg) as handle:
        handle.train(2)
    source = source_of(run=str(tmp_path), events="nominal")
    assert [p.name for p in source.checkpoints] == ["model_1.pt", "model_2.pt"]
    assert source.checkpoint == tmp_path / "model_2.pt"
    viewer = Viewer(source, host="127.0.0.1", port=8182)
    try:
        obs = viewer._obs["actor"].copy()
        latest = viewer.policy(obs)
        viewer.select_checkpoint(tmp_path / "model_1.pt")
        assert not np.allclose(viewer.policy(obs), latest)
        viewer.step()
        assert viewer.steps == 1
    finally:
        viewer.close()


def test_the_command_lines_start_a_viewer_and_stop(tmp_path):
    """fuselab-view task= (composing inside its own Hydra app) and fuselab-motion view FILE."""
    import subprocess
    import sys

    viewer = "from fuselab_rl.cli import view; view()"
    started = subprocess.run(
        [sys.executable, "-c", viewer, "task=cartpole", "seconds=1", "port=8183"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert started.returncode == 0, started.stderr[-2000:]
    assert "viewer ready: 1 envs of cartpole" in started.stderr
    motion = [sys.executable, "-m", "fuselab_envs.motion.cli", "view"]
    missing = subprocess.run([*motion, str(tmp_path / "none.npz")], capture_output=True, text=True)
    assert missing.returncode == 1 and "file: no motion file at" in missing.stderr
