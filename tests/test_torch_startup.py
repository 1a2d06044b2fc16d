"""A worker's optimizer starts without importing torch's compiler, and trains the same."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys, torch
from edgetrain.runtime.torch_startup import skip_dynamo_import
patched = skip_dynamo_import() if sys.argv[1] == "skip" else 0
torch.manual_seed(0)
net = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
for _ in range(3):
    opt.zero_grad()
    net(torch.ones(8, 4)).pow(2).sum().backward()
    opt.step()
state = opt.state_dict()
opt.load_state_dict(state)
print(patched > 0, "torch._dynamo" in sys.modules, float(net.weight.sum()))
"""


def _run(mode: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", CODE, mode], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_optimizers_run_without_importing_dynamo_and_train_the_same() -> None:
    skipped, plain = _run("skip"), _run("plain")
    assert skipped[:2] == ["True", "False"]  # patched, and the compiler never imported
    assert plain[:2] == ["False", "True"]  # torch as shipped imports it on the first call
    assert skipped[2] == plain[2]  # the same weights either way
