"""Roll a trained policy out with one env on MuJoCo and film it.

The checkpoint's algorithm rebuilds its policy (actor + observation normalizer) from the
checkpoint alone (:meth:`fuselab_rl.runner.Algorithm.inference_policy`: no trainer, so no
training env and no collector process); a one-env MuJoCo env built from the checkpoint's own
config runs it. Frames come from MuJoCo's offscreen renderer on an ``MjData`` whose ``qpos`` is
copied from the backend each step (no change to the backend), with a camera tracking the robot;
imageio's ffmpeg plugin writes the MP4. Without a display, set ``MUJOCO_GL=egl`` (GPU or Mesa
EGL) or ``MUJOCO_GL=osmesa`` (software) before mujoco is imported; ``fuselab-play`` picks egl
itself.
"""

# (mujoco's bindings re-export compiled names that pyright cannot see: MjData, Renderer, ...)

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from fuselab_env_core.timing import elapsed_ms
from fuselab_rl.checkpoint import load_checkpoint
from fuselab_rl.runner import algorithm

if TYPE_CHECKING:
    from fuselab_env_core.env import StepResult

log = logging.getLogger(__name__)


@dataclass
class PlayResult:
    steps: int
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    video: Path | None = None
    frames: int = 0


def rollout_config(checkpoint: dict[str, Any], seed: int = 0) -> DictConfig:
    """The checkpoint's training config, narrowed to one env on the MuJoCo CPU backend, without
    its curricula (the task as configured)."""
    cfg = OmegaConf.create(checkpoint["config"])
    assert isinstance(cfg, DictConfig)
    cfg.pop("curriculum", None)
    cfg.num_envs = 1
    cfg.backend = "mujoco"
    cfg.threads = cfg.num_threads = 1
    cfg.seed = seed
    return cfg


def load_policy(checkpoint: dict[str, Any], field: str = "checkpoint") -> torch.nn.Module:
    """The checkpoint's deterministic CPU policy, built by its algorithm from the checkpoint's
    ``algo`` config and trainer state."""
    started = time.perf_counter()
    name, path = checkpoint["algo"], checkpoint["path"]
    algo = OmegaConf.create(checkpoint["config"]["algo"])
    assert isinstance(algo, DictConfig)
    try:
        policy = algorithm(name).inference_policy(algo, checkpoint["trainer"])
    except (KeyError, RuntimeError) as error:  # weights missing, or shaped unlike its config
        raise ValueError(
            f"{field}: '{path}' holds no {name} policy that its config builds ({error})"
        ) from None
    log.info(
        "policy of %s (%s, iteration %d): %.1f ms",
        path,
        name,
        checkpoint["iteration"],
        elapsed_ms(started),
    )
    return policy.eval()


def policy_actions(policy: Callable, actor_obs: np.ndarray) -> np.ndarray:
    """A torch policy's float32 actions for a NumPy batch of actor observations."""
    with torch.no_grad():
        actions = policy(torch.from_numpy(actor_obs)).numpy()
    return actions.astype(np.float32, copy=False)


def play(
    source: str | Path,
    *,
    steps: int | None = None,
    video: bool = True,
    video_path: str | Path | None = None,
    width: int = 640,
    height: int = 480,
    seed: int = 0,
    field_name: str = "checkpoint",
) -> PlayResult:
    """Roll out the policy of ``source`` (a run directory or a checkpoint) for ``steps`` env
    steps (default: one episode), rendering an MP4 when ``video``."""
    from fuselab_envs.registry import make_env

    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps: expected a positive int or null (one episode), got {steps!r}")
    checkpoint = load_checkpoint(source, field=field_name)
    cfg = rollout_config(checkpoint, seed)
    policy = load_policy(checkpoint, field_name)
    env = make_env(cfg)
    try:
        if steps is None:
            steps = int(np.max(getattr(env, "max_episode_steps", [500])))
        recorder = None
        if video:
            path = Path(video_path) if video_path else _default_video_path(checkpoint)
            recorder = VideoRecorder(cfg, env, path, width, height)
        return _roll_out(policy, env, steps, recorder)
    finally:
        env.close()


def _roll_out(
    policy: torch.nn.Module, env: Any, steps: int, recorder: VideoRecorder | None = None
) -> PlayResult:
    """``steps`` env steps of ``policy`` (env 0 reported), filmed by ``recorder`` if given."""
    result = PlayResult(steps=steps, video=recorder.path if recorder else None)
    started = time.perf_counter()
    obs = env.reset_all()
    episode_return = 0.0
    try:
        if recorder:
            recorder.capture()
        for _ in range(steps):
            step = env.step(policy_actions(policy, obs["actor"]))
            obs = step.obs
            episode_return += float(step.reward[0])
            if recorder:
                recorder.capture()
            if step.terminated[0] or step.truncated[0]:
                _end_episode(result, episode_return, step)
                episode_return = 0.0
    finally:
        if recorder:
            result.frames = recorder.close()
    log.info(
        "play: %d steps in %.1f s%s",
        steps,
        time.perf_counter() - started,
        f", {result.frames} frames -> {result.video}" if recorder else "",
    )
    return result


def _end_episode(result: PlayResult, episode_return: float, step: StepResult) -> None:
    result.episode_returns.append(episode_return)
    result.episode_lengths.append(int(step.info.get("episode_length", 0)))
    log.info(
        "episode %d: return %.3f, %d steps (%s)",
        len(result.episode_returns),
        episode_return,
        result.episode_lengths[-1],
        "time-out" if step.truncated[0] and not step.terminated[0] else "ended",
    )


GL_PACKAGES = {  # what each MUJOCO_GL needs (Debian package names)
    "egl": "libegl1 with a Mesa or GPU driver (libegl-mesa0)",
    "osmesa": "libosmesa6",
    "glfw": "a display and libglfw3",
}


def import_mujoco_for_video() -> Any:
    """mujoco, with the OpenGL backend MUJOCO_GL names loaded; one that cannot load is a
    ValueError naming MUJOCO_GL and the package it needs."""
    try:
        import mujoco
    except (ImportError, AttributeError, RuntimeError) as error:  # pyopengl finds no library
        raise gl_error(error) from None
    return mujoco


def gl_error(error: BaseException) -> ValueError:
    backend = os.environ.get("MUJOCO_GL", "glfw")
    needs = GL_PACKAGES.get(backend, "the library of that backend")
    return ValueError(
        f"video: MUJOCO_GL={backend} cannot render here ({type(error).__name__}: {error}); "
        f"install {needs}, or set MUJOCO_GL to one of {', '.join(GL_PACKAGES)}"
    )


def _default_video_path(checkpoint: dict[str, Any]) -> Path:
    path = Path(checkpoint["path"])
    return path.parent / "videos" / f"{path.stem}.mp4"


class VideoRecorder:
    """MuJoCo's offscreen renderer on a private MjData that mirrors env 0 of the backend."""

    def __init__(self, cfg: DictConfig, env: Any, path: Path, width: int, height: int):
        import imageio.v2 as imageio
        import mujoco

        for name, value in (("width", width), ("height", height)):
            if isinstance(value, bool) or not isinstance(value, int) or not 16 <= value <= 4096:
                raise ValueError(f"{name}: expected an int in 16..4096 pixels, got {value!r}")
        self.path, self.env = path, env
        self.model = film_set(render_spec(cfg))
        self.model.vis.global_.offwidth = max(self.model.vis.global_.offwidth, width)
        self.model.vis.global_.offheight = max(self.model.vis.global_.offheight, height)
        self.data = mujoco.MjData(self.model)
        try:
            self.renderer = mujoco.Renderer(self.model, height, width)
        except (RuntimeError, AttributeError, mujoco.FatalError) as error:  # no GL context
            raise gl_error(error) from None
        self.camera = tracking_camera(self.model)
        check_render_model(self.model, env, "video")
        facts = env.backend.model
        self._qpos = np.zeros((1, facts.nq), np.float32)
        self._qvel = np.zeros((1, facts.nv), np.float32)
        path.parent.mkdir(parents=True, exist_ok=True)
        fps = max(1, round(1.0 / env.step_dt))
        self.writer = imageio.get_writer(
            path, format="FFMPEG", fps=fps, codec="libx264", quality=8, macro_block_size=16
        )
        self.frames = 0

    def capture(self) -> None:
        import mujoco

        self.env.backend.copy_qpos_qvel(self._qpos, self._qvel)
        self.data.qpos[:] = self._qpos[0]
        self.data.qvel[:] = self._qvel[0]
        mujoco.mj_forward(self.model, self.data)
        self.renderer.update_scene(self.data, camera=self.camera)
        draw_task(self.renderer.scene, self.env, self.data)
        self.writer.append_data(self.renderer.render())
        self.frames += 1

    def close(self) -> int:
        self.writer.close()
        self.renderer.close()
        return self.frames


def render_model(cfg: DictConfig):
    """The task's MJCF (``robot.mjcf``, else the task's embedded model) compiled for rendering."""
    return render_spec(cfg).compile()


def check_render_model(model, env: Any, where: str) -> None:
    """``model`` mirrors ``env``'s backend (its qpos and qvel copy over as they are)."""
    facts = env.backend.model
    if (facts.nq, facts.nv) != (model.nq, model.nv):
        raise ValueError(
            f"{where}: the render model has nq {model.nq}, nv {model.nv}; the backend has "
            f"nq {facts.nq}, nv {facts.nv}"
        )


def render_spec(cfg: DictConfig):
    """The task's MJCF (``robot.mjcf``, else the task's embedded model) as an ``MjSpec``."""
    import mujoco

    from fuselab_envs.robots import robot

    mjcf = cfg.robot.mjcf or robot(cfg.robot.name).model()
    text = str(mjcf)
    if text.lstrip().startswith("<"):  # an MJCF string, as the backends accept
        return mujoco.MjSpec.from_string(text)
    return mujoco.MjSpec.from_file(str(Path(text).expanduser()))


def film_set(spec):
    """``spec`` (an ``MjSpec``) compiled for a video a person can judge: a grid on the floor
    (motion reads against it), a key light from above and a brighter headlight. Only the look
    changes: the same bodies."""
    import mujoco

    spec.add_texture(
        name="film_grid",
        type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        mark=mujoco.mjtMark.mjMARK_EDGE,
        rgb1=[0.30, 0.34, 0.38],
        rgb2=[0.24, 0.27, 0.31],
        markrgb=[0.75, 0.78, 0.80],
        width=512,
        height=512,
    )
    material = spec.add_material(name="film_grid", texrepeat=[1.0, 1.0], texuniform=True)
    material.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "film_grid"
    for geom in spec.geoms:
        if geom.type == mujoco.mjtGeom.mjGEOM_PLANE:
            geom.material, geom.rgba = "film_grid", [1.0, 1.0, 1.0, 1.0]
    spec.worldbody.add_light(name="film_key", pos=[0.0, 0.0, 6.0], dir=[0.3, 0.2, -1.0])
    spec.visual.headlight.ambient = [0.35, 0.35, 0.35]
    spec.visual.headlight.diffuse = [0.6, 0.6, 0.6]
    return spec.compile()


COMMAND_RGBA = (1.0, 0.55, 0.1, 1.0)  # the commanded velocity's arrow
REFERENCE_RGBA = (0.3, 0.8, 1.0, 0.6)  # a motion clip's reference bodies


def draw_task(scene, env: Any, data) -> None:
    """What env 0 is asked to do, into a renderer's scene: the commanded planar velocity as an
    arrow above the pelvis (heading frame; its length in m/s, a yaw rate as a sideways tilt)
    and, for a motion clip, the reference bodies at the env's frame as spheres."""
    import mujoco

    from fuselab_env_core.rotations import np_yaw
    from fuselab_envs.commands.motion import MotionCommand
    from fuselab_envs.commands.velocity import UniformVelocityCommand

    for generator in env.commands.values():
        if isinstance(generator, UniformVelocityCommand):
            vx, vy, wz = (float(v) for v in generator.command[0])
            yaw = float(np_yaw(data.qpos[3:7]))
            start = data.qpos[:3] + np.array([0.0, 0.0, 0.6])
            planar = np.array(
                [np.cos(yaw) * vx - np.sin(yaw) * vy, np.sin(yaw) * vx + np.cos(yaw) * vy]
            )
            end = start + np.array([*planar, 0.1 * wz])
            if np.linalg.norm(end - start) > 1e-3:
                _add_geom(scene, mujoco.mjtGeom.mjGEOM_ARROW, COMMAND_RGBA, start, end)
        elif isinstance(generator, MotionCommand):
            frame = int(generator.motion_frame[0])
            for position in generator.table.body_pos_w[frame]:
                _add_geom(scene, mujoco.mjtGeom.mjGEOM_SPHERE, REFERENCE_RGBA, position)


def _add_geom(scene, kind, rgba, start, end=None) -> None:
    """One decoration geom appended to ``scene`` (an arrow from start to end, or a small sphere
    at start); a full scene takes no more."""
    import mujoco

    if scene.ngeom >= scene.maxgeom:
        return
    geom = scene.geoms[scene.ngeom]
    size = np.array([0.04, 0.0, 0.0])
    mujoco.mjv_initGeom(
        geom, kind, size, np.asarray(start, float), np.eye(3).ravel(), np.asarray(rgba, np.float32)
    )
    if end is not None:
        mujoco.mjv_connector(geom, kind, 0.025, np.asarray(start, float), np.asarray(end, float))
    scene.ngeom += 1


def tracking_camera(model):
    """A camera that follows the body of the model's first joint (the robot's root)."""
    import mujoco

    camera = mujoco.MjvCamera()
    camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
    camera.trackbodyid = int(model.jnt_bodyid[0]) if model.njnt else 1
    camera.distance = 2.5 * float(model.stat.extent)
    camera.elevation = -15.0
    camera.azimuth = 135.0
    return camera
