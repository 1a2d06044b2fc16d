"""Local minibatch training on one worker's partition, with an emulated slowdown factor."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgetrain.recipe import TrainSection
from edgetrain.runtime.throttle import Throttle


def resolve_device(name: str) -> torch.device:
    """Map the recipe's ``device`` (cpu, cuda, auto) to a torch device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        from edgetrain.errors import EdgetrainError

        raise EdgetrainError(
            "[train] device = 'cuda' but no CUDA device is available",
            "use device = 'cpu' or 'auto'",
        )
    return torch.device(name)


def make_optimizer(model: nn.Module, cfg: TrainSection) -> torch.optim.Optimizer:
    return optimizer_for(list(model.parameters()), cfg)


def optimizer_for(params: list[torch.Tensor], cfg: TrainSection) -> torch.optim.Optimizer:
    """The recipe's optimiser (``[train] optimizer``, lr, momentum, weight decay) over
    ``params`` (a model's, or a parameter-server shard's bare tensors)."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


@torch.no_grad()
def evaluate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024
) -> tuple[float, float]:
    """Accuracy and mean cross-entropy loss of ``model`` on ``(x, y)``."""
    was_training = model.training
    model.eval()
    correct = 0
    loss_sum = 0.0
    for i in range(0, len(x), batch_size):
        out = model(x[i : i + batch_size])
        yb = y[i : i + batch_size]
        loss_sum += float(nn.functional.cross_entropy(out, yb, reduction="sum"))
        correct += int((out.argmax(dim=1) == yb).sum())
    model.train(was_training)
    n = max(1, len(x))
    return correct / n, loss_sum / n


@dataclass
class StepTimes:
    """Seconds spent computing and sleeping (the emulated slowdown) so far."""

    compute_s: float = 0.0
    sleep_s: float = 0.0


class LocalTrainer:
    """SGD on one partition. A slowdown of s sleeps (s - 1) x the measured compute per step."""

    def __init__(
        self,
        model: nn.Module,
        x: np.ndarray,
        y: np.ndarray,
        x_test: np.ndarray,
        y_test: np.ndarray,
        cfg: TrainSection,
        seed: int,
        worker_id: int,
        slowdown: float = 1.0,
        device: torch.device | None = None,
    ) -> None:
        self.device = device or torch.device("cpu")
        self.model = model.to(self.device)
        self.x = torch.from_numpy(np.ascontiguousarray(x)).to(self.device)
        self.y = torch.from_numpy(np.ascontiguousarray(y)).to(self.device)
        self.x_test = torch.from_numpy(np.ascontiguousarray(x_test)).to(self.device)
        self.y_test = torch.from_numpy(np.ascontiguousarray(y_test)).to(self.device)
        self.cfg = cfg
        self.seed = seed
        self.worker_id = worker_id
        self.throttle = Throttle(slowdown)
        self.optimizer = make_optimizer(self.model, cfg)
        self.times = StepTimes()
        self.steps = 0

    @property
    def num_samples(self) -> int:
        return len(self.x)

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.num_samples // self.cfg.batch_size)

    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This epoch's shuffled minibatches (the last one may be smaller)."""
        rng = np.random.default_rng([self.seed, self.worker_id, epoch])
        order = torch.from_numpy(rng.permutation(self.num_samples)).to(self.device)
        bs = self.cfg.batch_size
        for i in range(0, self.num_samples, bs):
            idx = order[i : i + bs]
            yield self.x[idx], self.y[idx]

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> float:
        """One SGD step; returns the minibatch loss."""
        t0 = time.perf_counter()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(self.model(xb), yb)
        loss.backward()
        self.optimizer.step()
        value = float(loss.detach())  # synchronises with the device
        compute = time.perf_counter() - t0
        self.times.compute_s += compute
        self.times.sleep_s += self.throttle.after(compute)
        self.steps += 1
        return value

    @property
    def slowdown(self) -> float:
        return self.throttle.slowdown

    def evaluate(self) -> tuple[float, float]:
        return evaluate(self.model, self.x_test, self.y_test)
