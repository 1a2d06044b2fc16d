"""Profiles advise measures on hosts over ssh, where ``RUN/profiles/`` has none: ``edgetrain
profile`` of the recipe's model on each host (one thread, as a worker runs), with its link
probed to a probe server this process runs for the while (the machine launch's coordinator
would run on). What a host prints is checked before it is kept: at most
:data:`MAX_PROFILE_BYTES`, JSON (never unpickled), the profile schema, the host's own name and
the recipe's model.

Each host is profiled :data:`ROUNDS` times, in rounds (every host once, then again), and the
profile of median pace kept (:func:`median_profile`): one profile times a few seconds of a
machine whose speed swings by a fifth over seconds to minutes (a shared VM, a board throttling),
so one reading can be a lucky or an unlucky one; the median of three spread over the whole
profiling is steadier. The link is probed in the first round only.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from edgetrain.errors import EdgetrainError

__all__ = [
    "MAX_PROFILE_BYTES",
    "ROUNDS",
    "median_profile",
    "pace_s",
    "parse_remote",
    "profile_hosts",
    "remote_command",
]

MAX_PROFILE_BYTES = 4 * 2**20
PROFILE_TIMEOUT_S = 300.0

Timing = tuple[int, float]  # a profile's repeats and its least seconds of timed steps
REMOTE_TIMING: Timing = (5, 0.5)  # a real host's: short, every host in turn
#: What a profile measures: the model's name, its options, the input shape, classes, batch
Job = tuple[str, Mapping[str, Any], tuple[int, int, int], int, int]
#: Profiles taken of each host, in rounds; the one of median pace is kept.
ROUNDS = 3


def remote_command(
    python: str,
    workdir: str | None,
    name: str,
    model: str,
    options: Mapping[str, Any],
    shape: tuple[int, int, int],
    classes: int,
    batch: int,
    peer: str | None,
    timing: Timing = REMOTE_TIMING,
    data: tuple[str, str | None] | None = None,
) -> str:
    """The shell command that profiles ``model`` on a host and prints the profile as JSON:
    ``timing`` repeats and seconds of steps at least; its steps timed on ``data`` (a dataset's
    name and directory, as the host reads them: an emulated testbed's hosts share this
    machine's files), else on noise."""
    repeats, min_time = timing
    args = [python, "-m", "edgetrain", "profile", "--model", model, "--input",
            "x".join(map(str, shape)), "--classes", str(classes), "--batch-sizes", str(batch),
            "--repeats", str(repeats), "--warmup", "2", "--min-time", f"{min_time:g}",
            "--threads", "1", "--host-name", name, "--format", "json"]  # fmt: skip
    if data is not None:
        args += ["--data", data[0]] + (["--data-root", data[1]] if data[1] else [])
    for key, value in options.items():
        args += ["--model-option", f"{key}={json.dumps(value, separators=(',', ':'))}"]
    if peer is not None:
        args += ["--peer", peer, "--probe-timeout", "10"]
    cd = f"cd {shlex.quote(workdir)} && " if workdir else ""
    return cd + " ".join(shlex.quote(a) for a in args)


def parse_remote(out: str, name: str, model: str) -> dict[str, Any]:
    """A host's printed profile, checked (ValueError naming what is wrong)."""
    from edgetrain.profile.schema import ProfileError, validate_profile

    if len(out.encode()) > MAX_PROFILE_BYTES:
        raise ValueError(f"it printed over {MAX_PROFILE_BYTES // 2**20} MiB")
    try:
        doc = json.loads(out)
        doc = validate_profile(doc)
    except (json.JSONDecodeError, ProfileError) as exc:
        raise ValueError(f"it printed no valid profile ({exc})") from None
    if doc.get("host") != name or doc.get("model") != model:
        raise ValueError(f"its profile is of {doc.get('model')} on {doc.get('host')}")
    return doc


def pace_s(profile: Mapping[str, Any]) -> float:
    """A profile's sustained seconds of a step as a cost model reads it: its layers' sum scaled
    by its sustained plain step's throttling (:func:`edgetrain.runtime.setting_build.
    sustained_scale`; pure)."""
    from edgetrain.runtime.setting_build import sustained_scale

    rows = [x for x in profile.get("layers") or [] if isinstance(x, Mapping)]
    total = sum(float(x.get("fwd_s", 0.0)) + float(x.get("bwd_s", 0.0)) for x in rows)
    return total * sustained_scale(profile)


def median_profile(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Of one host's profiles in the order taken, the one of median pace (:func:`pace_s`; of
    an even count, the slower middle one), with the first one's links (the rounds after the
    first probe none) and a ``rounds`` table: each profile's pace and which was kept (pure)."""
    if not docs:
        raise ValueError("no profile to choose from")
    paces = [pace_s(d) for d in docs]
    order = sorted(range(len(docs)), key=lambda i: (paces[i], i))
    kept = order[len(docs) // 2]
    out = dict(docs[kept])
    out["links"] = list(docs[0].get("links") or [])
    out["rounds"] = {"pace_s": paces, "kept": kept}
    return out


@contextmanager
def _probe_server(bind: str, address: str) -> Iterator[str]:
    """A link-probe server here for the block; yields the endpoint hosts reach it at."""
    from edgetrain.profile.probe import ProbeServer

    stop = threading.Event()
    with ProbeServer(bind, 0) as server:
        port = server.endpoint.rsplit(":", 1)[1]
        thread = threading.Thread(target=server.serve, args=(stop,), daemon=True)
        thread.start()
        try:
            yield f"tcp://{address}:{port}"
        finally:
            stop.set()
            thread.join(timeout=5)


@contextmanager
def _peer(hosts: Any, probe: bool) -> Iterator[str | None]:
    """The probe server's endpoint for the block where ``probe``, else None."""
    if not probe:
        yield None
        return
    with _probe_server(hosts.bind_address(), hosts.coordinator_address()) as peer:
        yield peer


def profile_hosts(
    hosts: Any,
    names: Sequence[str],
    model: str,
    options: Mapping[str, Any],
    shape: tuple[int, int, int],
    classes: int,
    batch: int,
    progress: Callable[[str, int, int], None] | None = None,
    timing: Timing = REMOTE_TIMING,
    data: tuple[str, str | None] | None = None,
    probe: bool = True,
    rounds: int = ROUNDS,
) -> dict[str, dict[str, Any]]:
    """A profile of each host of ``hosts`` (a validated hosts file) named in ``names``: each
    host ``rounds`` times, in turn (one at a time: profiles taken side by side would slow each
    other on shared hardware), the one of median pace kept (:func:`median_profile`), its link
    probed in the first round where ``probe`` (an emulated testbed's links are in its spec);
    ``timing`` and ``data`` as :func:`remote_command`."""
    taken: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    total = len(names) * rounds
    job: Job = (model, options, shape, classes, batch)
    with _peer(hosts, probe) as peer:
        for r in range(rounds):
            for k, name in enumerate(names):
                if progress is not None:
                    step = f" ({r + 1}/{rounds})" if rounds > 1 else ""
                    progress(f"profiling {name} over ssh{step}", r * len(names) + k, total)
                first = peer if r == 0 else None
                taken[name].append(_profile_one(hosts, name, job, first, timing, data))
    return {name: median_profile(docs) for name, docs in taken.items()}


def _profile_one(
    hosts: Any,
    name: str,
    job: Job,
    peer: str | None,
    timing: Timing,
    data: tuple[str, str | None] | None,
) -> dict[str, Any]:
    """One profile of host ``name`` over ssh, checked."""
    from edgetrain.launch.ssh_argv import ssh_command

    host = next(h for h in hosts.hosts if h.label == name)
    remote = remote_command(hosts.python_for(host), host.workdir, name, *job, peer, timing, data)
    try:
        proc = subprocess.run(
            ssh_command(hosts, host, remote),
            capture_output=True,
            text=True,
            timeout=PROFILE_TIMEOUT_S + hosts.connect_timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise EdgetrainError(
            f"profiling host {name} over ssh took over {PROFILE_TIMEOUT_S:.0f} s",
            "check the host (edgetrain hosts check), or profile it there and copy "
            "RUN/profiles/NAME.json here",
        ) from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise EdgetrainError(
            f"cannot profile host {name} over ssh: {tail[:300]}",
            "check it with edgetrain hosts check HOSTS.toml, or profile it there and "
            "copy RUN/profiles/NAME.json here",
        )
    try:
        return parse_remote(proc.stdout, name, job[0])
    except ValueError as exc:
        raise EdgetrainError(
            f"host {name}'s profile over ssh: {exc}", "run edgetrain profile there"
        ) from None
