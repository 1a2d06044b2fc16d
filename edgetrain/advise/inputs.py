"""What ``edgetrain advise`` reads: the hosts (a hosts file, with the testbed table ``emulate
up`` writes or without; ``-H``; a testbed spec; or local processes), the profiles in
``RUN/profiles/`` of the recipe's model, the training split's size; and what is missing, a
short profile measured on each host over ssh (real hosts: :mod:`edgetrain.advise.remote`), in
the fastest host of an emulated testbed that is up (over ssh, under its CPU quota), else here
(local processes, a testbed spec, a testbed that is down).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgetrain.advise.environment import Environment, HostEntry, from_profiles, local
from edgetrain.errors import EdgetrainError
from edgetrain.recipe import Recipe
from edgetrain.runtime.predict import Layer

__all__ = ["Inputs", "gather", "read_profiles"]

LOCAL_PROFILE = "local"  # the name of the profile advise measures on this machine
# a profile advise measures itself (here, or in a testbed's host): 10 repeats and 1.5 s of
# timed steps at least (on a busy machine 0.5 s, seven steps of a 30 ms model, left the
# faster half's mean 20% above a quiet run's)
OWN_TIMING = (10, 1.5)


@dataclass(frozen=True)
class Inputs:
    """An environment, the reference profile's layers at the recipe's batch, the training
    split's size (None: its data cannot be read here) and where each came from."""

    env: Environment
    layers: tuple[Layer, ...]
    train_samples: int | None
    profile: str
    measured: Path | None  # the profile advise measured here and kept, if any
    remote: tuple[str, ...] = ()  # the hosts advise profiled over ssh
    skipped: tuple[str, ...] = ()  # profiles of the model's name but not the recipe's model
    # why a testbed's host could not be profiled in it (the profile then measured here)
    unreachable: str | None = None


def read_profiles(
    run_dir: Path | None, model: str, fits: Callable[[dict[str, Any]], str | None] | None = None
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``RUN/profiles/<host>.json`` of ``model`` with layer times, by host, and a line for each
    profile of the model skipped because ``fits`` found it of another size or input (a file
    that is not a valid profile is skipped silently: ``edgetrain profile`` rewrites it)."""
    from edgetrain.profile.schema import ProfileError, read_profile

    out: dict[str, dict[str, Any]] = {}
    skipped: list[str] = []
    if run_dir is None:
        return out, skipped
    for path in sorted((run_dir / "profiles").glob("*.json")):
        try:
            doc = read_profile(path)
        except ProfileError:
            continue
        if doc.get("model") != model or not doc.get("layers"):
            continue
        why = fits(doc) if fits is not None else None
        if why is None:
            out[path.stem] = doc
        else:
            skipped.append(f"{path.name}: {why}")
    return out, skipped


def profile_fits(
    recipe: Recipe, shape: tuple[int, int, int] | None, classes: int
) -> Callable[[dict[str, Any]], str | None]:
    """A check that a profile of the recipe's model name is of the recipe's model: the same
    input (where the data can be read here) and the same parameter bytes (the model's
    options: an MLP's widths, say). Returns why not, or None."""
    want: int | None = None
    if shape is not None:
        from edgetrain.models import build_model

        model = build_model(recipe.model.name, shape, classes, dict(recipe.model.options))
        want = sum(4 * p.numel() for p in model.parameters())

    def check(doc: dict[str, Any]) -> str | None:
        if shape is not None and list(doc.get("input") or []) != list(shape):
            return f"its input is {doc.get('input')}, the recipe's data {list(shape)}"
        have = sum(int(x.get("param_bytes", 0)) for x in doc.get("layers") or [])
        if want is not None and have != want:
            return f"its model has {have:,} bytes of parameters, the recipe's {want:,}"
        return None

    return check


def _dataset(
    recipe: Recipe,
) -> tuple[int | None, tuple[int, int, int] | None, int, np.ndarray | None]:
    """The training split's size, a sample's shape (None, None where the data cannot be read
    here), the classes, and its first samples (a profile measured here times its steps on
    them: :mod:`edgetrain.profile.compute`)."""
    from edgetrain.data.loaders import load_dataset
    from edgetrain.profile.run import first_samples

    try:
        data = load_dataset(recipe.data, recipe.run.seed)
    except (EdgetrainError, OSError, ValueError):
        return None, None, 10, None
    return len(data.y_train), data.input_shape, data.classes, first_samples(data)


def _measure(
    recipe: Recipe,
    run_dir: Path | None,
    shape: tuple[int, int, int] | None,
    classes: int,
    progress: Callable[[str, int, int], None] | None,
    samples: np.ndarray | None = None,
) -> tuple[dict[str, Any], Path | None]:
    """A short profile of the recipe's model on this machine, one thread (as a worker runs),
    its steps timed on the recipe's own samples."""
    from edgetrain.profile.run import ProfileRequest, make_profile, save_profile

    if shape is None:
        raise EdgetrainError(
            "no profile of the model, and its data cannot be read here to measure one",
            "profile it (edgetrain profile --model ... --run-dir RUN) or fix [data]",
        )
    req = ProfileRequest(
        host=LOCAL_PROFILE,
        model=recipe.model.name,
        model_options=dict(recipe.model.options),
        input_shape=shape,
        classes=classes,
        batch_sizes=(recipe.train.batch_size,),
        repeats=OWN_TIMING[0],
        warmup=2,
        min_time_s=OWN_TIMING[1],
        threads=1,
        inputs=samples,
        data=recipe.data.dataset if samples is not None else None,
    )
    data = make_profile(req, progress)
    path = save_profile(run_dir, data) if run_dir is not None else None
    return data, path


def _reference_cpu(profile: Mapping[str, Any], default: float | None = None) -> float:
    """The cores a profile's layer times are at: its quota's, else ``default`` (its host's CPU
    share on a testbed), else its torch threads up to its cores."""
    from edgetrain.runtime.setting_build import profile_cores

    device = profile.get("device") or {}
    cores = float(device.get("cores") or 1)
    threads = device.get("torch_threads")
    fallback = default or (min(float(threads), cores) if isinstance(threads, int) else cores)
    return profile_cores(profile, fallback)


def _testbed_facts(
    hosts: Any | None, testbed: Path | None
) -> tuple[Any, dict[str, tuple[str, ...]]] | None:
    """A testbed's facts and each host's labels, from a spec or a hosts file's testbed table
    (None: neither)."""
    from edgetrain.runtime.setting_build import TestbedFacts

    if testbed is not None:
        from edgetrain.emulate.spec import load_spec
        from edgetrain.emulate.topology import spec_facts

        spec = load_spec(testbed)
        return spec_facts(spec), {h.name: tuple(h.labels) for s in spec.sites for h in s.hosts}
    if hosts is not None and isinstance(hosts.testbed, dict):
        try:
            facts = TestbedFacts.from_dict(hosts.testbed)
        except ValueError as exc:
            raise EdgetrainError(f"the hosts file's testbed table: {exc}") from None
        return facts, {h.label: tuple(h.labels) for h in hosts.hosts}
    return None


def profiled_host(facts: Any) -> str:
    """The testbed host advise profiles in: the one of the largest CPU share, the first of
    those (pure)."""
    best = max(h.cpu for h in facts.hosts)
    return str(next(h.name for h in facts.hosts if h.cpu == best))


def data_flags(recipe: Recipe) -> tuple[str, str | None] | None:
    """``--data``/``--data-root`` for a profile in a testbed's host (whose processes read
    this machine's files): the dataset's name and absolute directory; None for synthetic data,
    whose steps the profile times on noise."""
    import os

    if recipe.data.dataset == "synthetic":
        return None
    root = recipe.data.root
    return recipe.data.dataset, os.path.abspath(os.path.expanduser(root)) if root else None


def _in_testbed(
    recipe: Recipe,
    hosts: Any,
    facts: Any,
    run_dir: Path | None,
    data: tuple[tuple[int, int, int] | None, int],
    progress: Callable[[str, int, int], None] | None,
) -> tuple[str, dict[str, Any]] | str:
    """A profile of the model measured inside a testbed's host over ssh (at its CPU quota,
    beside the emulation's overheads, at the machine's speed of the hour), kept in
    ``RUN/profiles/``; or, where the host cannot be reached (the testbed is down), the
    reason."""
    from edgetrain.advise.remote import profile_hosts
    from edgetrain.profile.run import save_profile

    shape, classes = data
    name = profiled_host(facts)
    if shape is None or name not in {h.label for h in hosts.hosts}:
        return f"host {name} is not in the hosts file" if shape is not None else "no data"
    try:
        doc = profile_hosts(
            hosts, [name], recipe.model.name, dict(recipe.model.options), shape, classes,
            recipe.train.batch_size, progress, OWN_TIMING, data_flags(recipe), probe=False,
        )[name]  # fmt: skip
    except EdgetrainError as exc:
        return str(exc.args[0]) if exc.args else "it could not be reached"
    if run_dir is not None:
        save_profile(run_dir, doc)
    return name, doc


def _hosts_env(
    recipe: Recipe,
    hosts: Any,
    profiles: dict[str, dict[str, Any]],
    run_dir: Path | None,
    data: tuple[tuple[int, int, int] | None, int],
    progress: Callable[[str, int, int], None] | None,
    default_bps: float | None,
) -> tuple[Environment, str, dict[str, dict[str, Any]], tuple[str, ...]]:
    """Real hosts: each host's own profile (those missing measured over ssh), the first host's
    the reference. The environment, the reference's name, the profiles, the hosts profiled."""
    shape, classes = data
    entries = [
        HostEntry(h.label, h.workers, h.memory, h.site, tuple(h.labels)) for h in hosts.hosts
    ]
    lacking = [h.name for h in entries if h.name not in profiles]
    remote: tuple[str, ...] = ()
    if lacking:
        if shape is None:
            raise EdgetrainError(
                f"no profile of {recipe.model.name} for host(s) {', '.join(lacking)}, and "
                "the recipe's data cannot be read here to measure them",
                "fix [data], or run edgetrain profile on each and copy RUN/profiles/NAME.json",
            )
        from edgetrain.advise.remote import profile_hosts
        from edgetrain.profile.run import save_profile

        measured = profile_hosts(
            hosts, lacking, recipe.model.name, dict(recipe.model.options), shape, classes,
            recipe.train.batch_size, progress,
        )  # fmt: skip
        for doc in measured.values():
            if run_dir is not None:
                save_profile(run_dir, doc)
        profiles = {**profiles, **measured}
        remote = tuple(measured)
    ref = entries[0].name
    try:
        env = from_profiles(entries, profiles, ref, _reference_cpu(profiles[ref]), default_bps)
    except ValueError as exc:
        raise EdgetrainError(
            f"{exc}: its profile has no link probe",
            "probe the link: edgetrain profile --peer tcp://HOST:PORT --run-dir RUN on it "
            "(beside 'edgetrain profile serve' on another host), or use --what-if "
            "bandwidth=RATE",
        ) from None
    return env, ref, profiles, remote


def gather(
    recipe: Recipe,
    run_dir: Path | None,
    hosts: Any | None,
    testbed: Path | None,
    progress: Callable[[str, int, int], None] | None = None,
    default_bps: float | None = None,
) -> Inputs:
    """The environment and layers for ``recipe``: ``hosts`` (a validated hosts file) or
    ``testbed`` (a spec), else local processes; the profiles of ``run_dir``, measuring one
    where none exists: in a testbed's fastest host when the hosts file is one ``emulate up``
    wrote and the testbed is up, else on this machine, whose profile can serve as the
    reference (local processes, or a testbed whose CPU shares are relative to it);
    ``default_bps``: the link rate of a host whose profile probed none."""
    from edgetrain.runtime.setting_build import layers_from_profile, sustained_scale

    train, shape, classes, samples = _dataset(recipe)
    profiles, skipped = read_profiles(
        run_dir, recipe.model.name, profile_fits(recipe, shape, classes)
    )
    bed = _testbed_facts(hosts, testbed)
    measured = None
    remote: tuple[str, ...] = ()
    unreachable = None
    if hosts is not None and bed is None:
        env, name, profiles, remote = _hosts_env(
            recipe, hosts, profiles, run_dir, (shape, classes), progress, default_bps
        )
    else:
        got: tuple[str, dict[str, Any]] | str | None = None
        if not profiles and hosts is not None and bed is not None:
            got = _in_testbed(recipe, hosts, bed[0], run_dir, (shape, classes), progress)
        if profiles:
            name, profile = next(iter(profiles.items()))
        elif isinstance(got, tuple):
            name, profile = got
            remote = (name,)
        else:
            unreachable = got
            profile, measured = _measure(recipe, run_dir, shape, classes, progress, samples)
            name = LOCAL_PROFILE
        if bed is not None:
            facts, labels = bed
            shares = {h.name: h.cpu for h in facts.hosts}
            cpu = _reference_cpu(profile, shares.get(name))
            env = Environment(facts, cpu, 0.0, labels, f"testbed {facts.name}")
        else:
            import os

            cores = float(len(os.sched_getaffinity(0)))
            slowdowns = [g.slowdown for g in recipe.expanded_workers()]
            env = local(cores, slowdowns, _reference_cpu(profile))
        profiles = {name: profile}
    profile = profiles[name]
    layers = layers_from_profile(profile, recipe.train.batch_size, sustained_scale(profile))
    return Inputs(env, layers, train, name, measured, remote, tuple(skipped), unreachable)
