"""``[train] deterministic = true``: the same recipe gives the same weights on CUDA, run to run.

On the CPU edgetrain's techniques are repeatable already (one thread order per kernel, seeded
data and dropout). CUDA kernels are not by default: cuDNN picks its algorithms by timing them
(``benchmark``), several kernels accumulate with atomics, and cuBLAS splits its work by a
workspace whose use depends on the streams. Deterministic mode turns all of that off in every
process of the run, before the process does any CUDA work:

- ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (cuBLAS reads it when it creates its first handle): the
  launcher puts it in every worker's environment (:func:`environment`) and :func:`apply` sets
  it again at the worker's start, for a worker started some other way;
- ``torch.use_deterministic_algorithms(True)``: an operation with no deterministic kernel
  raises instead of running a non-deterministic one;
- ``torch.backends.cudnn.deterministic = True`` and ``benchmark = False``.

It costs speed (deterministic kernels are slower, and torch fills fresh tensors' memory), so it
is off by default. A few layers have no deterministic CUDA kernel at all (the backward of
``AdaptiveAvgPool2d``, which VGG, AlexNet and the ResNets end their features with, among
others): a deterministic run of such a model stops at the first use, and :func:`explain` turns
torch's error into one line naming the operation and the fix.
"""

from __future__ import annotations

import os
import re

from edgetrain.errors import EdgetrainError

CUBLAS_ENV = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_DETERMINISTIC = ":4096:8"
# The two workspace settings under which cuBLAS is deterministic (NVIDIA's cuBLAS docs,
# "Results reproducibility"); a user's own choice of either is kept.
CUBLAS_ACCEPTED = (":4096:8", ":16:8")


# ``[train] blas_workspace = "small"``: 8 buffers of 16 KiB per handle and stream (128 KiB, one
# of the deterministic settings) where torch's default is 32 MiB on Hopper; cuBLASLt shares the
# cuBLAS workspace in recent torch, and older ones read their own size (KiB) from CUBLASLT_ENV.
CUBLAS_SMALL = ":16:8"
CUBLASLT_ENV = "CUBLASLT_WORKSPACE_SIZE"
CUBLASLT_SMALL_KIB = "128"


def environment(deterministic: bool, workspace: str = "default") -> dict[str, str]:
    """What a worker's environment needs for ``deterministic`` and ``[train] blas_workspace``
    (the launcher adds it). Pure."""
    if workspace == "small":
        return {CUBLAS_ENV: CUBLAS_SMALL, CUBLASLT_ENV: CUBLASLT_SMALL_KIB}
    return {CUBLAS_ENV: CUBLAS_DETERMINISTIC} if deterministic else {}


def apply(deterministic: bool, workspace: str = "default") -> bool:
    """Switch this process to deterministic kernels when ``deterministic``, and to the small
    cuBLAS workspace for ``workspace = "small"`` (a worker, right after it learns the recipe
    and before its role touches CUDA); False: not deterministic."""
    if workspace == "small":
        os.environ.update(environment(deterministic, workspace))
    if not deterministic:
        return False
    if os.environ.get(CUBLAS_ENV) not in CUBLAS_ACCEPTED:
        os.environ[CUBLAS_ENV] = CUBLAS_DETERMINISTIC
    import torch

    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    return True


_NO_KERNEL = re.compile(r"^(\S+) does not have a deterministic implementation")


def explain(exc: BaseException) -> BaseException:
    """torch's refusal of an operation with no deterministic kernel as a user's error (one
    line, exit 2); any other exception as it is."""
    found = _NO_KERNEL.match(str(exc)) if isinstance(exc, RuntimeError) else None
    if found is None:
        return exc
    return EdgetrainError(
        f"[train] deterministic = true: the model uses {found.group(1)}, which has no "
        "deterministic kernel on this device",
        "set deterministic = false (weights may then differ run to run), or use a model "
        "without that layer",
    )
