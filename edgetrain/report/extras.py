"""Optional packages (``pip install 'edgetrain[tensorboard]'``, ``[mlflow]``): whether one is
installed, found without importing it, and the one-line refusal that says how to install it."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from edgetrain.errors import EdgetrainError


@dataclass(frozen=True)
class Extra:
    """An optional package: the module edgetrain imports, the distribution pip installs, and
    the extra of edgetrain's that names it."""

    module: str
    package: str
    extra: str

    def installed(self) -> bool:
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):  # a parent package that is not one, a broken spec
            return False

    def require(self, what: str) -> None:
        """Raise :class:`EdgetrainError` (exit 2) naming ``what`` needs it, unless installed."""
        if not self.installed():
            raise EdgetrainError(
                f"{what} needs the {self.package} package, which is not installed",
                f"install it with: pip install {self.package} "
                f"(or pip install -e '.[{self.extra}]' in a clone of edgetrain)",
            )


TENSORBOARD = Extra("tensorboard", "tensorboard", "tensorboard")
MLFLOW = Extra("mlflow", "mlflow-skinny", "mlflow")
