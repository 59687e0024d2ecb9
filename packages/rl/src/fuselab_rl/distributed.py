"""Data-parallel training under torchrun: one rank per process, torch.distributed the engine.

    uv run torchrun --standalone --nproc-per-node=2 --no-python fuselab-train task=cartpole

torchrun starts the processes and sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
``LOCAL_WORLD_SIZE``; :func:`join` starts the process group on them (gloo for a CPU learner,
NCCL for CUDA, each rank on the GPU of its local rank). Each rank steps its own ``num_envs``
envs (the seed offset by its rank) with its share of the machine's cores. PPO averages its
gradients over the ranks every mini-batch (one all-reduce of one flat vector), normalizes the
advantages over every rank's rollout, averages the KL its adaptive schedule reads and merges
the observation normalizers' statistics: every rank holds the same parameters after every
update, those one rank would reach on all the ranks' data. FastSAC averages the gradients of
every critic and actor update (each rank with its own collector and replay, every rank doing
the same number of updates per iteration) and merges its normalizers' statistics at iteration
ends. Rank 0 alone writes the run directory.

Without torchrun (no ``WORLD_SIZE`` in the environment) none of this runs: every function here
is then the identity. torch is imported in the functions, so that the command line can read
:class:`Ranks` before torch loads.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fuselab_rl.stopping import PartnerFailed

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

COLLECTIVE_TIMEOUT_S = 120.0  # a rank that stops answering fails the others after this


@dataclass(frozen=True)
class Ranks:
    """Where this process is among torchrun's: its global and local rank and their counts."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @classmethod
    def from_environment(cls) -> Ranks:
        """torchrun's variables, or one rank alone when they are not set."""
        if "WORLD_SIZE" not in os.environ:
            return cls()
        values = {}
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            text = os.environ.get(name, "0" if name != "LOCAL_WORLD_SIZE" else "1")
            if not text.isdigit():
                raise ValueError(f"{name}: expected an int >= 0 (torchrun sets it), got {text!r}")
            values[name.lower()] = int(text)
        return cls(**values)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def describe(self) -> str:
        local = f"local {self.local_rank} of {self.local_world_size}"
        return f"rank {self.rank} of {self.world_size} ({local})"


SINGLE = Ranks()  # a run without torchrun


@contextlib.contextmanager
def _peers() -> Iterator[None]:
    """A collective that fails (a rank died, or stopped answering for COLLECTIVE_TIMEOUT_S) is
    a :class:`PartnerFailed`: the runner saves what this rank holds, then reports it."""
    try:
        yield
    except RuntimeError as error:  # gloo and NCCL errors (DistBackendError is one)
        raise PartnerFailed(f"another rank stopped answering ({error})") from None


def join(ranks: Ranks, device: torch.device) -> None:
    """Start the process group of ``ranks`` (nothing for one rank)."""
    import torch.distributed as dist

    if ranks.world_size == 1 or dist.is_initialized():
        return
    if device.type == "cuda":  # NCCL's object collectives use the current device
        import torch

        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    log.info("distributed: %s, %s backend", ranks.describe(), backend)


def leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_initialized() else 1


def average_gradients(parameters: Iterable[torch.Tensor]) -> None:
    """Replace each gradient by its mean over the ranks: one all-reduce of one flat vector."""
    import torch
    import torch.distributed as dist

    if world_size() == 1:
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    with _peers():
        dist.all_reduce(flat)
    flat /= world_size()
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def average(value: float, device: torch.device) -> float:
    """The mean of ``value`` over the ranks."""
    import torch
    import torch.distributed as dist

    if world_size() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    with _peers():
        dist.all_reduce(tensor)
    return float(tensor.item()) / world_size()


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank when ``flag`` is true on one (e.g. a stop signal): all stop at once."""
    import torch
    import torch.distributed as dist

    if world_size() == 1:
        return flag
    tensor = torch.tensor([int(flag)], dtype=torch.int32, device=device)
    with _peers():
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())


def wait_for_all() -> None:
    """Return once every rank is here. The end of a run: no rank destroys the process group
    while rank 0 still saves and exports (torch wants every rank to leave at about the same
    time; a gloo rank that left early was seen to abort)."""
    import torch.distributed as dist

    if world_size() == 1:
        return
    with _peers():
        dist.barrier()


def broadcast_state(module: torch.nn.Module) -> None:
    """Rank 0's parameters and buffers on every rank (the start of a run, or a resume)."""
    import torch.distributed as dist

    if world_size() == 1:
        return
    with _peers():
        for tensor in module.state_dict().values():
            dist.broadcast(tensor, src=0)


def sum_over_ranks(tensors: list[torch.Tensor]) -> None:
    """Sum each tensor over the ranks, in place (one all-reduce of their concatenation)."""
    import torch
    import torch.distributed as dist

    if world_size() == 1:
        return
    flat = torch.cat([t.reshape(-1).to(torch.float64) for t in tensors])
    with _peers():
        dist.all_reduce(flat)
    offset = 0
    for t in tensors:
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()


def mean_and_std(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and (unbiased) standard deviation of the elements of ``x`` on every rank."""
    import torch

    if world_size() == 1:
        return x.mean(), x.std()
    x64 = x.to(torch.float64)
    stats = torch.stack([x64.new_tensor(x.numel()), x64.sum(), x64.square().sum()])
    sum_over_ranks([stats])
    n, total, squares = stats.unbind()
    mean = total / n
    var = ((squares - n * mean.square()) / (n - 1)).clamp_min(0.0)
    return mean.to(x.dtype), var.sqrt().to(x.dtype)


def broadcast_object(value: Any) -> Any:
    """Rank 0's ``value`` (picklable) on every rank."""
    import torch.distributed as dist

    if world_size() == 1:
        return value
    box = [value]
    with _peers():
        dist.broadcast_object_list(box, src=0)
    return box[0]


def check_same_config(flat: dict[str, Any]) -> None:
    """Every rank must train the same config: the first key where a rank's differs from rank
    0's is a ValueError on every rank, naming the key and both values."""
    import torch.distributed as dist

    if world_size() == 1:
        return
    gathered: list[Any] = [None] * world_size()
    with _peers():
        dist.all_gather_object(gathered, flat)
    for other_rank, other in enumerate(gathered):
        for key in sorted(set(flat) | set(other)):
            if gathered[0].get(key) != other.get(key):
                raise ValueError(
                    f"{key}: rank 0 has {gathered[0].get(key)!r}, rank {other_rank} has "
                    f"{other.get(key)!r}; every rank must be given the same config"
                )
