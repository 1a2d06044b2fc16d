"""A model as a chain of units: parametric modules with the parameter-free modules before them.

Pipeline stages cut a model between units, so the model must run as a sequence of modules.
MLP, LeNet-5 and cnn2 are ``nn.Sequential`` already; torchvision VGG and AlexNet become
``features``, ``avgpool``, an ``nn.Flatten`` (their forward calls ``torch.flatten``) and
``classifier``; ResNets run at block granularity (stem, one item per residual block, pooling,
flatten, ``fc``). Anything else is refused with one line naming the model and what is
supported. A unit is one parametric item (a module with parameters, or a block) plus the
parameter-free items folded in front of it, as in :func:`edgetrain.models.layers.layer_specs`;
trailing parameter-free items run after the last unit. Parameter names stay the model's own
state-dict names, so stage slices join back into the recipe's model.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

from torch import nn

from edgetrain.errors import ModelError

SUPPORTED = (
    "mlp, lenet5, cnn2, vgg11, vgg16, vgg19 and alexnet (as chains of layers) and "
    "resnet18, resnet50 and resnet152 (at residual-block granularity)"
)


@dataclass
class Leaf:
    """A module with parameters of its own inside a unit (the unit's module itself, or a
    layer of a block): ``local`` is its name inside the unit ("" for the unit module)."""

    local: str
    module: nn.Module
    kind: str
    _keys: dict[str, str] | None = field(default=None, repr=False, compare=False)

    def param_names(self) -> list[str]:
        return [_join(self.local, n) for n, _ in self.module.named_parameters(recurse=False)]

    def keys(self) -> dict[str, str]:
        """Its own parameter names to their unit-local names, in order (looked up once: an
        update asks for them per layer call, and the names never change)."""
        if self._keys is None:
            self._keys = {
                n: _join(self.local, n) for n, _ in self.module.named_parameters(recurse=False)
            }
        return self._keys


@dataclass
class Unit:
    """One cut item of the chain: ``pre`` modules, then ``module`` (then ``post``, last unit)."""

    index: int
    name: str  # the module's state-dict prefix ("" for a root module with parameters)
    kind: str
    module: nn.Module
    pre: list[nn.Module] = field(default_factory=list)
    post: list[nn.Module] = field(default_factory=list)
    leaves: list[Leaf] = field(default_factory=list)

    def params(self) -> list[str]:
        """Unit-local parameter names (keys for ``functional_call`` on :attr:`module`)."""
        return [n for n, _ in self.module.named_parameters()]

    def state_name(self, local: str) -> str:
        """The model's state-dict name of a unit-local name."""
        return _join(self.name, local)

    @property
    def stochastic(self) -> bool:
        """True if a module of the unit draws random numbers in training (dropout)."""
        mods = [*self.pre, *self.module.modules(), *self.post]
        return any(isinstance(m, nn.modules.dropout._DropoutNd) for m in mods)

    def modules(self) -> list[nn.Module]:
        return [*self.pre, self.module, *self.post]


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name


def _children(m: nn.Module, prefix: str) -> Iterator[tuple[str, nn.Module]]:
    for name, child in m.named_children():
        yield _join(prefix, name), child


def _torchvision_types() -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    """torchvision's (VGG, AlexNet), (ResNet,) and ResNet blocks; empty where torchvision's
    models were never imported, as then no module can be one of them (a model of torch alone
    is cut without importing torchvision, which need not be installed)."""
    if "torchvision.models" not in sys.modules:
        return (), (), ()
    from torchvision.models import VGG, AlexNet, ResNet
    from torchvision.models.resnet import BasicBlock, Bottleneck

    return (VGG, AlexNet), (ResNet,), (BasicBlock, Bottleneck)


def _items(m: nn.Module, prefix: str, model_name: str) -> Iterator[tuple[str, nn.Module]]:
    """The modules ``m`` runs, in order, as (state-dict prefix, module)."""
    features, resnets, blocks = _torchvision_types()
    if isinstance(m, nn.Sequential):
        for name, child in _children(m, prefix):
            yield from _items(child, name, model_name)
    elif isinstance(m, features):
        yield from _items(m.get_submodule("features"), _join(prefix, "features"), model_name)
        yield _join(prefix, "avgpool"), m.get_submodule("avgpool")
        yield _join(prefix, "flatten"), nn.Flatten()
        yield from _items(m.get_submodule("classifier"), _join(prefix, "classifier"), model_name)
    elif isinstance(m, resnets):
        for name in ("conv1", "bn1", "relu", "maxpool"):
            yield _join(prefix, name), m.get_submodule(name)
        for name in ("layer1", "layer2", "layer3", "layer4"):
            yield from _items(m.get_submodule(name), _join(prefix, name), model_name)
        yield _join(prefix, "avgpool"), m.get_submodule("avgpool")
        yield _join(prefix, "flatten"), nn.Flatten()
        yield _join(prefix, "fc"), m.get_submodule("fc")
    elif isinstance(m, blocks) or not any(True for _ in m.children()):
        yield prefix, m
    else:
        raise ModelError(
            f"model '{model_name}' cannot be cut into pipeline stages ({type(m).__name__} is "
            "not a chain of modules)",
            f"the pipeline family supports {SUPPORTED}",
        )


def _has_params(m: nn.Module) -> bool:
    return any(True for _ in m.parameters())


def build_units(model: nn.Module, model_name: str) -> list[Unit]:
    """The model's units in execution order (raises :class:`ModelError` for non-chains)."""
    units: list[Unit] = []
    pending: list[nn.Module] = []
    for prefix, module in _items(model, "", model_name):
        if not _has_params(module):
            pending.append(module)
            continue
        leaves = [
            Leaf(local, sub, type(sub).__name__)
            for local, sub in module.named_modules()
            if any(True for _ in sub.parameters(recurse=False))
        ]
        unit = Unit(len(units), prefix, type(module).__name__, module, pending, [], leaves)
        units.append(unit)
        pending = []
    if not units:
        raise ModelError(f"model '{model_name}' has no parameters to train")
    units[-1].post = pending
    return units


def chain_forward(units: list[Unit], x: object) -> object:
    """Run the units in order on ``x`` with the modules' own parameters (a check)."""
    for unit in units:
        for m in unit.modules():
            x = m(x)
    return x
