"""``fuselab-motion``: inspect motion files and datasets, convert the layouts people have,
write the procedural clip, view a clip.

fuselab-motion inspect FILE.npz | DIR | MANIFEST.yaml     (a dataset: a table of every clip)
fuselab-motion convert MOTION.csv --fps 30 -o OUT.npz [--output-fps 50]
fuselab-motion convert MOTION.npz -o OUT.npz              (any layout: joint-only clips get FK)
fuselab-motion convert DIR -o OUT_DIR [--fps 30]          (every .csv and .npz below DIR)
fuselab-motion synth -o OUT.npz [--duration-s 10] [--fps 50]
fuselab-motion view FILE.npz [--port 8080]
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np

from fuselab_envs.g1 import G1_XML_PATH
from fuselab_envs.motion.clip import MotionClip, MotionFileError, load_motion, velocity_mismatches
from fuselab_envs.motion.convert import (
    DEFAULT_OUTPUT_FPS,
    convert_csv,
    convert_npz,
    forward_kinematics,
    grounded,
    load_model,
    lowest_foot_points,
)
from fuselab_envs.motion.dataset import clip_entries
from fuselab_envs.motion.synth import DEFAULT_DURATION_S, DEFAULT_FPS, synth_clip
from fuselab_sim_backends.model import model_facts

log = logging.getLogger(__name__)

JOINT_RANGE_MARGIN_RAD = 1e-3
FLOOR_PENETRATION_LIMIT_M = 0.005  # deeper than this is reported
FLOATING_LIMIT_M = 0.05  # feet never closer to the floor than this is reported
KINEMATICS_MISMATCH_LIMIT_M = 0.01


def _problems(model: mujoco.MjModel, clip: MotionClip) -> list[str]:
    """What would make the clip a poor reference on ``model``; empty when it looks fine."""
    problems = []
    facts = model_facts(model)
    ranges = facts.joint_ranges.astype(np.float64)
    below = clip.joint_pos < ranges[:, 0] - JOINT_RANGE_MARGIN_RAD
    above = clip.joint_pos > ranges[:, 1] + JOINT_RANGE_MARGIN_RAD
    for j, name in enumerate(clip.joint_names):
        outside = below[:, j] | above[:, j]
        if outside.any():
            frame = int(np.argmax(outside))
            problems.append(
                f"joint {name} leaves the model range [{ranges[j, 0]:.3f}, {ranges[j, 1]:.3f}] "
                f"in {int(outside.sum())} frames (first: frame {frame}, "
                f"{clip.joint_pos[frame, j]:.3f} rad)"
            )
    feet = lowest_foot_points(model, clip.body_names, clip.body_pos_w, clip.body_quat_w).min(axis=1)
    lowest_frame = int(np.argmin(feet))
    if feet[lowest_frame] < -FLOOR_PENETRATION_LIMIT_M:
        problems.append(
            f"feet sink {-feet[lowest_frame] * 1e3:.1f} mm below the floor at frame "
            f"{lowest_frame} ({int((feet < -FLOOR_PENETRATION_LIMIT_M).sum())} frames below "
            f"-{FLOOR_PENETRATION_LIMIT_M * 1e3:g} mm; convert --ground lifts the clip)"
        )
    if feet.min() > FLOATING_LIMIT_M:
        problems.append(
            f"feet never touch the floor: the lowest foot point is {feet.min():.3f} m "
            "(convert --ground lowers the clip)"
        )
    problems += [
        f"{line}: another quantity? loading recomputes {field} from the poses"
        for field, line in velocity_mismatches(clip).items()
    ]
    # The body states should be the model's forward kinematics of the root and joint angles.
    root_quat = clip.body_quat_w[:, 0].astype(np.float64)
    body_pos, _ = forward_kinematics(
        model, clip.body_pos_w[:, 0], root_quat, clip.joint_pos, progress=False
    )
    error = np.linalg.norm(body_pos - clip.body_pos_w, axis=-1)
    if error.max() > KINEMATICS_MISMATCH_LIMIT_M:
        frame, body = (int(i) for i in np.unravel_index(np.argmax(error), error.shape))
        problems.append(
            f"body positions differ from the model's forward kinematics of the root and joints "
            f"by up to {error.max():.3f} m ({clip.body_names[body]}, frame {frame}): "
            "another robot, or joints in another order? (convert --from-joints recomputes them)"
        )
    return problems


def _report(line: str = "") -> None:
    """A line of the command's output (the report a user asked for; diagnostics go to the log)."""
    sys.stdout.write(f"{line}\n")


def _inspect(args: argparse.Namespace) -> int:
    if args.file.is_file() and args.file.suffix == ".npz":
        return _inspect_clip(args)
    return _inspect_dataset(args)


def _inspect_clip(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    facts = model_facts(model)
    clip = load_motion(
        args.file,
        joint_names=facts.joint_names,
        body_names=facts.body_names,
        file_velocities=True,
    )
    ranges = facts.joint_ranges
    _report(f"file       {args.file}")
    _report(f"frames     {clip.num_frames}")
    _report(f"fps        {clip.fps:g}")
    _report(f"duration   {clip.duration_s:.2f} s")
    _report(f"bodies     {len(clip.body_names)} (root {clip.body_names[0]})")
    _report(f"joints     {len(clip.joint_names)}")
    root_height = clip.body_pos_w[:, 0, 2]
    _report(f"root z     {root_height.min():.3f} .. {root_height.max():.3f} m")
    width = max(len(name) for name in clip.joint_names)
    _report(f"\n{'joint':<{width}}  {'min':>7}  {'max':>7}   model range (rad)")
    low, high = clip.joint_pos.min(axis=0), clip.joint_pos.max(axis=0)
    for j, name in enumerate(clip.joint_names):
        flag = (
            " !"
            if low[j] < ranges[j, 0] - JOINT_RANGE_MARGIN_RAD
            or high[j] > ranges[j, 1] + JOINT_RANGE_MARGIN_RAD
            else ""
        )
        _report(
            f"{name:<{width}}  {low[j]:7.3f}  {high[j]:7.3f}   "
            f"[{ranges[j, 0]:.3f}, {ranges[j, 1]:.3f}]{flag}"
        )
    problems = _problems(model, clip)
    _report(f"\nproblems   {len(problems) or 'none'}")
    for problem in problems:
        _report(f"  - {problem}")
    return 1 if problems and args.strict else 0


def _inspect_dataset(args: argparse.Namespace) -> int:
    """A directory or manifest: one row per clip (length, weight, root height, problems), a
    clip that cannot be read counted as a problem, then every problem by clip."""
    model = load_model(args.model)
    facts = model_facts(model)
    entries = clip_entries(args.file)
    total_weight = sum(entry.weight for entry in entries)
    width = max(len("clip"), *(len(entry.name) for entry in entries))
    _report(
        f"{'clip':<{width}}  {'frames':>6}  {'fps':>5}  {'seconds':>7}  {'weight':>6}  "
        f"{'root z (m)':>13}  problems"
    )
    found: dict[str, list[str]] = {}
    seconds = 0.0
    for entry in entries:
        share = f"{entry.weight / total_weight:6.3f}"
        try:
            clip = load_motion(
                entry.path,
                joint_names=facts.joint_names,
                body_names=facts.body_names,
                file_velocities=True,
            )
        except MotionFileError as error:
            found[entry.name] = [f"unreadable: {error}"]
            _report(f"{entry.name:<{width}}  {'-':>6}  {'-':>5}  {'-':>7}  {share}  {'-':>13}  1")
            continue
        found[entry.name] = _problems(model, clip)
        seconds += clip.duration_s
        z = clip.body_pos_w[:, 0, 2]
        _report(
            f"{entry.name:<{width}}  {clip.num_frames:>6}  {clip.fps:>5g}  {clip.duration_s:>7.2f}"
            f"  {share}  {z.min():>6.3f}..{z.max():<5.3f}  {len(found[entry.name]) or '-'}"
        )
    troubled = {name: problems for name, problems in found.items() if problems}
    _report(f"\n{len(entries)} clips, {seconds:.1f} s; {len(troubled) or 'no'} with problems")
    for name, problems in troubled.items():
        _report(f"  {name}:")
        for problem in problems:
            _report(f"    - {problem}")
    return 1 if troubled and args.strict else 0


def _convert(args: argparse.Namespace) -> int:
    if args.source.is_dir():
        return _convert_directory(args)
    clip = _convert_file(args, args.source)
    clip.save(args.output)
    _report(f"wrote {args.output}: {clip.num_frames} frames at {clip.fps:g} fps")
    return 0


def _convert_file(args: argparse.Namespace, path: Path) -> MotionClip:
    """One CSV (at ``--fps``) or motion .npz of any layout, as a clip at ``--output-fps``."""
    progress, model = None if args.progress else False, load_model(args.model)
    if path.suffix.lower() == ".csv":
        clip = convert_csv(
            path, input_fps=args.fps, output_fps=args.output_fps, model=model, progress=progress
        )
    elif path.suffix.lower() == ".npz":
        clip = convert_npz(
            path,
            output_fps=args.output_fps,
            model=model,
            progress=progress,
            from_joints=args.from_joints,
        )
    else:
        raise ValueError(f"source: {str(path)!r}: expected a .csv or .npz file, or a directory")
    return grounded(clip, model) if args.ground else clip


def _convert_directory(args: argparse.Namespace) -> int:
    """Every .csv and .npz below the source directory, written under the output directory at
    the same relative path (as .npz); a file that fails is reported and the rest go on."""
    sources = sorted(
        p for p in args.source.rglob("*") if p.suffix.lower() in (".csv", ".npz") and p.is_file()
    )
    if not sources:
        raise ValueError(f"source: {str(args.source)!r} holds no .csv or .npz file")
    failed = 0
    for path in sources:
        target = args.output / path.relative_to(args.source).with_suffix(".npz")
        try:
            clip = _convert_file(args, path)
        except (MotionFileError, ValueError) as error:
            failed += 1
            _report(f"failed {path}: {error}")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        clip.save(target)
        _report(f"wrote {target}: {clip.num_frames} frames at {clip.fps:g} fps")
    _report(f"{len(sources) - failed} of {len(sources)} converted into {args.output}")
    return 1 if failed else 0


def _synth(args: argparse.Namespace) -> int:
    clip = synth_clip(args.duration_s, args.fps, model=load_model(args.model))
    clip.save(args.output)
    _report(f"wrote {args.output}: {clip.num_frames} frames at {clip.fps:g} fps")
    return 0


def _view(args: argparse.Namespace) -> int:
    """The clip alone on the G1 in the browser: fuselab-rl's viewer (``fuselab-view clip=``),
    run as its own process (fuselab-envs does not import fuselab-rl)."""
    if not args.file.is_file():
        raise FileNotFoundError(f"file: no motion file at {str(args.file)!r}")
    if importlib.util.find_spec("fuselab_rl") is None:
        raise ValueError("the viewer is fuselab-rl's fuselab-view: pip install fuselab-rl")
    viewer = "from fuselab_rl.cli import view; view()"
    clip = f"clip={args.file.resolve()}"
    command = [sys.executable, "-c", viewer, clip, f"port={args.port}"]
    return subprocess.call(command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fuselab-motion",
        description="Motion clips (BeyondMimic .npz layout) for the G1 motion-tracking task.",
    )
    parser.add_argument(
        "--model", type=Path, default=G1_XML_PATH, help="MJCF of the robot (default: the G1)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    commands = parser.add_subparsers(dest="command", required=True)

    inspect = commands.add_parser(
        "inspect",
        help="summarise a motion file, or a dataset (a directory or manifest: a table of every "
        "clip), and report problems",
    )
    inspect.add_argument("file", type=Path, help=".npz, a directory of them, or a .yaml manifest")
    inspect.add_argument(
        "--strict", action="store_true", help="exit with status 1 when problems are found"
    )
    inspect.set_defaults(run=_inspect)

    convert = commands.add_parser(
        "convert",
        help="a retargeted CSV (root xyz, root quat xyzw, joint angles per row), a motion .npz of "
        "any layout (joint-only: forward kinematics) or a directory of them, to motion .npz",
    )
    convert.add_argument("source", type=Path, help=".csv, .npz, or a directory of them")
    convert.add_argument("--fps", type=float, default=30.0, help="frame rate of CSV files (30)")
    convert.add_argument(
        "-o", "--output", type=Path, required=True, help=".npz to write (a directory for one)"
    )
    convert.add_argument(
        "--output-fps", type=float, default=DEFAULT_OUTPUT_FPS, help="frame rate to write (50)"
    )
    convert.add_argument(
        "--from-joints",
        action="store_true",
        help="recompute every body state from the root and joints (forward kinematics)",
    )
    convert.add_argument(
        "--ground", action="store_true", help="move the clip so its feet touch the floor"
    )
    convert.add_argument(
        "--no-progress", dest="progress", action="store_false", help="no progress bar"
    )
    convert.set_defaults(run=_convert)

    synth = commands.add_parser("synth", help="write the procedural G1 clip (squat, steps, arms)")
    synth.add_argument("-o", "--output", type=Path, required=True, help=".npz to write")
    synth.add_argument("--duration-s", type=float, default=DEFAULT_DURATION_S)
    synth.add_argument("--fps", type=float, default=DEFAULT_FPS)
    synth.set_defaults(run=_synth)

    view = commands.add_parser("view", help="play a clip alone on the G1 in the browser (viser)")
    view.add_argument("file", type=Path)
    view.add_argument("--port", type=int, default=8080, help="the viewer's port (8080)")
    view.set_defaults(run=_view)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(message)s"
    )
    try:
        return args.run(args)
    except (MotionFileError, FileNotFoundError, ValueError) as error:
        sys.stderr.write(f"fuselab-motion {args.command}: error: {error}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
