"""User-facing errors: one clear line naming the problem and the fix, exit code 2."""

from __future__ import annotations


class EdgetrainError(Exception):
    """An error caused by the user's input or environment.

    The CLI prints ``str(error)`` as a single line on stderr and exits with code 2.
    Messages name the offending value and, where possible, the fix.
    """

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(problem if not fix else f"{problem}; {fix}")


class RecipeError(EdgetrainError):
    """A recipe file that is missing, unreadable or invalid."""


class DataError(EdgetrainError):
    """A dataset that cannot be found or read."""


class ModelError(EdgetrainError):
    """An unknown model or bad model options."""


class RunError(EdgetrainError):
    """A training run that failed (worker crashed, peer lost, timeout)."""

    exit_code = 1


class Diverged(RunError):
    """Training diverged: the loss became NaN or infinite."""

    def __init__(self, epoch: int, step: int, worker: int) -> None:
        self.epoch, self.step, self.worker = epoch, step, worker
        super().__init__(
            f"loss became NaN at epoch {epoch} step {step} on worker {worker}", "lower [train] lr"
        )


class DeprecatedSpelling(UserWarning):
    """An input that still works but is spelled the old way; the CLI prints it as one note."""
