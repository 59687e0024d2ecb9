"""``fuselab-view``: a policy, a task or a motion clip running live in the browser, on viser.

The viewer steps a few envs of the task on MuJoCo CPU at real time (times the chosen speed) and
draws them with mjviser's MuJoCo scene: each frame copies the envs' ``qpos`` from the backend
into an ``MjData`` per env and runs forward kinematics there (the backend is never touched).
What it runs:

- ``run=DIR`` (or ``checkpoint=FILE``): that checkpoint's policy on its own task config; a
  dropdown swaps in any other checkpoint of the run;
- ``task=NAME`` without a run: the task with zero actions (the default pose under its PD law);
- ``clip=FILE``: a motion clip alone, the G1 put onto the clip frame by frame (no physics).

The panel: play / pause / step / reset, speed 1/32x-8x, the frame rate and the real-time factor
reached; a joystick for velocity commands (sliders within the task's ranges that the env's
command generator holds while it is on); for a motion task a timeline that follows the clip and
scrubs it when dragged, the reference bodies drawn as a ghost; the reward terms of the env in
view over the last seconds. GUI callbacks run on viser's threads and only queue requests; the
loop applies them between steps, so the env is only ever touched by one thread.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import torch
from omegaconf import DictConfig

from fuselab_env_core.timing import elapsed_ms

if TYPE_CHECKING:
    from fuselab_env_core.commands import Command
    from fuselab_envs.commands.motion import MotionCommand
    from fuselab_envs.commands.velocity import UniformVelocityCommand

log = logging.getLogger(__name__)
C = TypeVar("C")

SPEEDS = {f"1/{k}x": 1.0 / k for k in (32, 16, 8, 4, 2)} | {f"{k}x": float(k) for k in (1, 2, 4, 8)}
FRAME_S = 1.0 / 30.0  # the render rate asked for; a step slower than this lowers it
REWARD_WINDOW_S = 5.0  # the reward plot's span
MAX_STEPS_PER_FRAME = 16  # a slow machine falls behind real time instead of spiralling
GHOST_COLOR = (80, 200, 255)
PLOT_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
CLIP_TASK = "g1_motion_tracking"  # what clip= plays a clip on


@dataclass
class ViewSource:
    """What a viewer runs: an env config, the policy (None: zero actions) and, for a run, its
    checkpoints (to swap) and a clip-only flag (replay the reference, no physics)."""

    cfg: DictConfig
    policy: Callable[[np.ndarray], np.ndarray] | None
    checkpoints: tuple[Path, ...] = ()
    checkpoint: Path | None = None
    clip_only: bool = False


def source_of(
    run: str | None = None,
    checkpoint: str | None = None,
    task: str | None = None,
    clip: str | None = None,
    *,
    num_envs: int = 1,
    events: str = "train",
    seed: int = 0,
) -> ViewSource:
    """The :class:`ViewSource` of the command line's arguments (exactly one of ``run``,
    ``checkpoint``, ``task`` and ``clip``)."""
    from fuselab_envs.registry import compose
    from fuselab_rl.checkpoint import load_checkpoint, run_checkpoints
    from fuselab_rl.evaluate import EVENT_SETS, eval_config
    from fuselab_rl.play import load_policy

    given = {
        k: v for k, v in dict(run=run, checkpoint=checkpoint, task=task, clip=clip).items() if v
    }
    if len(given) != 1:
        raise ValueError(
            f"run, checkpoint, task, clip: expected exactly one, got {given or 'none'}"
        )
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or not 1 <= num_envs <= 64:
        raise ValueError(f"num_envs: expected an int in 1..64 (envs in view), got {num_envs!r}")
    if events not in EVENT_SETS:
        raise ValueError(f"events: expected one of {', '.join(EVENT_SETS)}, got {events!r}")
    field, value = next(iter(given.items()))
    if field in ("run", "checkpoint"):
        state = load_checkpoint(value, field=field)
        cfg = eval_config(state["config"], num_envs, seed, events)
        path = Path(state["path"])
        policy = _numpy_policy(load_policy(state, field))
        return ViewSource(cfg, policy, tuple(run_checkpoints(path.parent)) or (path,), path)
    if field == "clip":  # the G1 tracking task on that clip, the robot put onto it
        task_cfg = compose(CLIP_TASK, [f"commands.motion.params.file={Path(value).resolve()}"])
    else:
        task_cfg = compose(value)
    return ViewSource(
        eval_config(task_cfg, num_envs, seed, events), None, clip_only=field == "clip"
    )


class Viewer:
    """The env, its scene in a viser server, the panel and the real-time loop."""

    def __init__(self, source: ViewSource, host: str = "0.0.0.0", port: int = 8080):
        import mujoco
        import viser
        from mjviser import ViserMujocoScene

        from fuselab_envs.commands.motion import MotionCommand
        from fuselab_envs.commands.velocity import UniformVelocityCommand
        from fuselab_envs.registry import make_env
        from fuselab_rl.play import check_render_model, render_model

        started = time.perf_counter()
        self.source, self.policy = source, source.policy
        self.env = make_env(source.cfg)
        self.model = render_model(source.cfg)
        check_render_model(self.model, self.env, "view")
        facts = self.env.backend.model
        n = self.env.num_envs
        self._datas = [mujoco.MjData(self.model) for _ in range(n)]
        self._qpos = np.zeros((n, facts.nq), np.float32)
        self._qvel = np.zeros((n, facts.nv), np.float32)
        self.server = viser.ViserServer(host=host, port=port, verbose=False)
        self.scene = ViserMujocoScene(self.server, self.model, num_envs=n)
        self.server.scene.add_grid(
            "/fixed_bodies/grid", width=40.0, height=40.0, cell_size=0.5, position=(0, 0, 0.001)
        )
        self.playing, self.speed = True, 1.0
        self.steps = 0  # env steps since start
        self.fps = self.realtime_factor = 0.0
        self._requests: deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._reward_history: deque[np.ndarray] = deque(
            maxlen=max(2, round(REWARD_WINDOW_S / self.env.step_dt))
        )
        self._playback_panel()
        if source.checkpoints:
            self._checkpoint_panel()
        velocity = _first(self.env.commands, UniformVelocityCommand)
        self.joystick = Joystick(self, velocity) if velocity else None
        motion = _first(self.env.commands, MotionCommand)
        self.clip = ClipPanel(self, motion) if motion else None
        if source.clip_only and self.clip is None:
            raise ValueError(f"clip: the task {source.cfg.task_name!r} has no motion command")
        self._rewards_plot = None if source.clip_only else self._reward_panel()
        self.scene.create_visualization_gui()
        self._obs: dict[str, np.ndarray] = {}
        self.reset()
        self.render()
        log.info(
            "viewer ready: %d envs of %s at http://%s:%d (%.1f ms)",
            n,
            source.cfg.task_name,
            host,
            self.server.get_port(),
            elapsed_ms(started),
        )

    # -- the loop -----------------------------------------------------------------------------

    def run(self, seconds: float | None = None) -> None:
        """Step and draw at real time (times the speed) until ``seconds`` have passed or
        Ctrl-C."""
        started = last = time.perf_counter()
        owed_s = 0.0  # simulated time the loop owes the wall clock
        most_owed_s = MAX_STEPS_PER_FRAME * self.env.step_dt
        frames, window_started, window_steps = 0, started, 0
        try:
            while not self._stopping.is_set() and (
                seconds is None or time.perf_counter() - started < seconds
            ):
                now = time.perf_counter()
                self._apply_requests()
                if self.playing:
                    owed_s = min(owed_s + (now - last) * self.speed, most_owed_s)
                    while owed_s >= self.env.step_dt:
                        self.step()
                        owed_s -= self.env.step_dt
                        window_steps += 1
                last = now
                self.render()
                frames += 1
                if now - window_started >= 1.0:
                    elapsed = now - window_started
                    self.fps = frames / elapsed
                    self.realtime_factor = window_steps * self.env.step_dt / elapsed
                    frames, window_started, window_steps = 0, now, 0
                    self._show_status()
                time.sleep(max(0.0, FRAME_S - (time.perf_counter() - now)))
        except KeyboardInterrupt:
            log.info("viewer: stopped")

    def stop(self) -> None:
        """End :meth:`run` after its current frame (from any thread)."""
        self._stopping.set()

    def request(self, action: Callable[[], None]) -> None:
        """Run ``action`` on the loop's thread before its next step (what GUI callbacks do)."""
        with self._lock:
            self._requests.append(action)

    def _apply_requests(self) -> None:
        with self._lock:
            actions = list(self._requests)
            self._requests.clear()
        for action in actions:
            action()

    def step(self) -> None:
        """One env step: the policy's actions (zero without one), or the clip's next frame."""
        self.steps += 1
        if self.clip is not None and self.source.clip_only:
            self.clip.put_on((int(self.clip.motion.motion_frame[0]) + 1) % self.clip.num_frames)
            return
        if self.policy is None:
            actions = np.zeros((self.env.num_envs, self.env.action_dim), np.float32)
        else:
            actions = self.policy(self._obs["actor"])
        self._obs = self.env.step(actions).obs
        if self.joystick is not None:
            self.joystick.after_step()
        self._reward_history.append(self.env.terms.buffers.reward_terms[self.env_in_view].copy())

    def reset(self) -> None:
        self._obs = self.env.reset_all()
        self._reward_history.clear()
        if self.clip is not None and self.source.clip_only:
            self.clip.put_on(0)

    def observe(self) -> None:
        """The observations of the state written into the envs (a scrub, a clip frame)."""
        self.env.robot.update()
        self.env.terms.observe()
        self._obs = self.env.terms.buffers.obs

    @property
    def env_in_view(self) -> int:
        return int(self.scene.env_idx)

    # -- drawing ------------------------------------------------------------------------------

    def render(self) -> None:
        """The envs' bodies from their ``qpos`` (forward kinematics), the clip's ghost and
        timeline, and the reward plot."""
        import mujoco

        self.env.backend.copy_qpos_qvel(self._qpos, self._qvel)
        for data, qpos in zip(self._datas, self._qpos, strict=True):
            data.qpos[:] = qpos
            mujoco.mj_kinematics(self.model, data)
        xpos = np.stack([d.xpos for d in self._datas])
        xmat = np.stack([d.xmat.reshape(-1, 3, 3) for d in self._datas])
        self.scene.update_from_arrays(xpos, xmat)
        if self.clip is not None:
            self.clip.render(self.env_in_view)
        if self._rewards_plot is not None and len(self._reward_history) >= 2:
            history = np.asarray(self._reward_history)
            seconds = (np.arange(len(history)) - len(history) + 1) * self.env.step_dt
            self._rewards_plot.data = (seconds, *history.T)  # type: ignore[assignment]

    # -- the panel ----------------------------------------------------------------------------

    def _playback_panel(self) -> None:
        gui = self.server.gui
        with gui.add_folder("Playback"):
            self._status = gui.add_markdown("")
            play = gui.add_button("Pause")
            step = gui.add_button("Step")
            reset = gui.add_button("Reset")
            speed = gui.add_dropdown("Speed", tuple(SPEEDS), initial_value="1x")

        @play.on_click
        def _(_) -> None:
            self.playing = not self.playing
            play.label = "Pause" if self.playing else "Play"

        @step.on_click
        def _(_) -> None:
            if not self.playing:
                self.request(self.step)

        @reset.on_click
        def _(_) -> None:
            self.request(self.reset)

        @speed.on_update
        def _(_) -> None:
            self.speed = SPEEDS[speed.value]

    def _checkpoint_panel(self) -> None:
        names = {path.name: path for path in self.source.checkpoints}
        current = self.source.checkpoint.name if self.source.checkpoint else next(iter(names))
        with self.server.gui.add_folder("Checkpoint"):
            selector = self.server.gui.add_dropdown("Policy", tuple(names), initial_value=current)

        @selector.on_update
        def _(_) -> None:
            self.request(lambda path=names[selector.value]: self.select_checkpoint(path))

    def select_checkpoint(self, path: Path) -> None:
        """Run the policy of checkpoint ``path`` from a fresh reset."""
        from fuselab_rl.checkpoint import load_checkpoint
        from fuselab_rl.play import load_policy

        self.policy = _numpy_policy(load_policy(load_checkpoint(path, "checkpoint"), "checkpoint"))
        self.reset()

    def _reward_panel(self):
        import viser.uplot as uplot

        names = [call.entry for call in self.env.terms.plan.rewards]
        lines = [
            uplot.Series(label=name, stroke=PLOT_COLORS[k % len(PLOT_COLORS)], width=1.5)
            for k, name in enumerate(names)
        ]
        empty = np.zeros(2)
        with self.server.gui.add_folder("Rewards (last seconds)"):
            return self.server.gui.add_uplot(
                data=(empty, *(empty for _ in names)),
                series=(uplot.Series(label="s"), *lines),
                scales={"x": uplot.Scale(time=False)},
                aspect=1.2,
            )

    def _show_status(self) -> None:
        self._status.content = (
            f"**{self.fps:.0f} frames/s**, real-time factor **{self.realtime_factor:.2f}** "
            f"(speed {self.speed:g}x), step {self.steps}"
        )

    def close(self) -> None:
        self.server.stop()
        self.env.close()


class Joystick:
    """Sliders for (vx, vy, wz) within the velocity command's ranges. While 'Joystick' is on,
    the command generator holds them for every env (after a reset too); off, it draws training
    commands again."""

    def __init__(self, viewer: Viewer, velocity: UniformVelocityCommand):
        self.viewer, self.velocity = viewer, velocity
        self.held: np.ndarray | None = None  # (N, 3) while on
        gui = viewer.server.gui
        with gui.add_folder("Velocity command"):
            self.enabled = gui.add_checkbox("Joystick", initial_value=True)
            labels = ("vx (m/s)", "vy (m/s)", "wz (rad/s)")
            self.sliders = [
                gui.add_slider(label, min=low, max=high, step=0.05, initial_value=0.0)
                for label, (low, high) in zip(labels, velocity.ranges, strict=True)
            ]

        def moved(_) -> None:
            if self.enabled.value:
                viewer.request(self.hold)

        for slider in self.sliders:
            slider.on_update(moved)
        self.enabled.on_update(
            lambda _: viewer.request(self.hold if self.enabled.value else self.release)
        )
        viewer.request(self.hold)

    def hold(self) -> None:
        values = np.array([s.value for s in self.sliders], np.float32)
        self.held = np.broadcast_to(values, self.velocity.command.shape)
        self.velocity.hold(self.held)

    def release(self) -> None:
        self.held = None
        self.velocity.resample(self.viewer.env.rng, self.viewer.env.all_envs)

    def after_step(self) -> None:
        if self.held is not None:  # a reset row drew a training command: hold it again
            self.velocity.hold(self.held)


class ClipPanel:
    """A motion command's timeline (it follows the env in view; dragging it puts every env onto
    the clips at that frame) and its reference bodies drawn as a ghost beside the robot. A
    dataset's clips lie end to end on the timeline; a dropdown jumps to the start of each."""

    def __init__(self, viewer: Viewer, motion: MotionCommand):
        self.viewer, self.motion = viewer, motion
        self.num_frames = motion.num_frames
        dataset = motion.dataset
        gui = viewer.server.gui
        with gui.add_folder("Motion clip"):
            if dataset.num_clips > 1:
                chooser = gui.add_dropdown("Clip", dataset.names, initial_value=dataset.names[0])

                @chooser.on_update
                def _(event) -> None:
                    if event.client is not None:
                        first = int(dataset.starts[dataset.index(chooser.value)])
                        viewer.request(lambda: self.put_on(first))

            self.timeline = gui.add_slider(
                "Frame", min=0, max=motion.num_frames - 1, step=1, initial_value=0
            )
            clips = f"{dataset.num_clips} clips, " if dataset.num_clips > 1 else ""
            gui.add_markdown(
                f"{clips}{motion.num_frames} frames at {1 / viewer.env.step_dt:.0f} Hz; the blue "
                "points are the reference's bodies"
            )

        @self.timeline.on_update
        def _(event) -> None:
            if event.client is not None:  # a person dragged it (not the loop moving it along)
                viewer.request(lambda frame=int(self.timeline.value): self.put_on(frame))

        self.ghost = viewer.server.scene.add_point_cloud(
            "/fixed_bodies/reference",  # in the world frame, which the tracking camera moves
            points=motion.table.body_pos_w[0],
            colors=GHOST_COLOR,
            point_size=0.06,
            point_shape="circle",
        )

    def put_on(self, frame: int) -> None:
        """Every env exactly on the clips at ``frame`` (of the table)."""
        env = self.viewer.env
        frames = np.full(env.num_envs, frame, np.int32)
        self.motion.set_frames(env.all_envs, frames)
        qpos, qvel = self.motion.reference_state(frames)
        env.write_state(env.all_envs, qpos, qvel)
        self.viewer.observe()

    def render(self, env_id: int) -> None:
        frame = int(self.motion.motion_frame[env_id])
        self.ghost.points = self.motion.table.body_pos_w[frame]
        self.timeline.value = frame


def _first(commands: Mapping[str, Command], kind: type[C]) -> C | None:
    """The task's first command generator of ``kind``."""
    return next((c for c in commands.values() if isinstance(c, kind)), None)


def _numpy_policy(policy: torch.nn.Module) -> Callable[[np.ndarray], np.ndarray]:
    from fuselab_rl.play import policy_actions

    return functools.partial(policy_actions, policy)
