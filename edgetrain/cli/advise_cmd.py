"""``edgetrain advise``: which technique to run on these devices and links, predicted before
a run from each technique's cost model (docs/advise.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from edgetrain.cli.common import (
    FormatOption,
    HostListOption,
    OutputFormat,
    console,
    emit,
    err_console,
)


def advise(
    recipe: Annotated[Path, typer.Argument(help="The recipe: its model, data and batch size.")],
    hosts_file: Annotated[
        Path | None,
        typer.Option(
            "--hosts",
            metavar="HOSTS.toml",
            help="The hosts (the one emulate up writes carries its testbed's CPU shares and "
            "links; others need each host's profile in RUN/profiles).",
        ),
    ] = None,
    host_list: HostListOption = None,
    testbed: Annotated[
        Path | None,
        typer.Option("--testbed", metavar="SPEC.toml", help="A testbed spec's hosts and links."),
    ] = None,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            "--run-dir",
            metavar="RUN",
            help="Read RUN/profiles/, keep a profile measured here, write RUN/advice.json.",
        ),
    ] = None,
    technique_names: Annotated[
        str | None,
        typer.Option(
            "--techniques", metavar="a,b,...", help="Only these techniques (default: all)."
        ),
    ] = None,
    what_if: Annotated[
        list[str] | None,
        typer.Option(
            "--what-if",
            metavar="KEY=VALUE",
            help="Predict again with a change: bandwidth=10mbit, wan=..., rtt=20ms, cpu=0.5, "
            "memory=2g, hosts=+2 (repeat, or separate with commas).",
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", metavar="FILE", help="Write a PNG of predicted time by part."),
    ] = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Rank the techniques for a recipe on your devices and links, from their cost models,
    before any run: time per iteration and per epoch with its parts, memory per device, and
    a line each saying why.

    Examples:
    edgetrain advise recipes/dynacomm.toml
    edgetrain advise recipes/dlion.toml --hosts runs/bed/hosts.toml --run-dir runs/bed
    edgetrain advise recipes/mercury.toml --testbed recipes/testbeds/mercury-4u.toml
    edgetrain advise recipes/mercury.toml --run-dir RUN --what-if bandwidth=10mbit,hosts=+2
    edgetrain advise recipes/mcpipe.toml --techniques local,pipedream,mcpipe --plot advice.png
    """
    from edgetrain.advise import whatif
    from edgetrain.advise.api import advice
    from edgetrain.advise.candidates import chosen_techniques
    from edgetrain.advise.document import ADVICE_JSON, render
    from edgetrain.advise.inputs import gather
    from edgetrain.cli.profile_cmd import progress_bar
    from edgetrain.errors import EdgetrainError
    from edgetrain.launch.hosts import hosts_option
    from edgetrain.recipe import load_recipe
    from edgetrain.rundir import atomic_write_json, check_writable

    if testbed is not None and (hosts_file is not None or host_list is not None):
        raise EdgetrainError("give --testbed or the hosts (--hosts, -H), not both")
    try:
        changes = whatif.parse(list(what_if or ()))
    except whatif.WhatIfError as exc:
        raise EdgetrainError(str(exc)) from None
    if plot is not None:
        target = plot.expanduser()
        if target.is_dir():
            raise EdgetrainError(f"--plot '{plot}' is a directory", "name a file, e.g. advice.png")
        check_writable(target.parent, "--plot", "name a file in a writable directory")
    if run_dir is not None:
        check_writable(run_dir, "--run-dir", "pass a writable --run-dir")
    loaded, _ = load_recipe(recipe)
    names = [n.strip() for n in (technique_names or "").split(",") if n.strip()]
    if technique_names is not None and not names:
        raise EdgetrainError("--techniques is empty", "name techniques, e.g. dynacomm,sequential")
    pairs = chosen_techniques(loaded, names or None)
    found = hosts_option(hosts_file, host_list, None)
    with progress_bar(fmt == OutputFormat.text and err_console.is_terminal) as progress:
        rates = [whatif.rate(c) for c in changes if c.key == "bandwidth"]
        hosts = found[0] if found else None
        inputs = gather(loaded, run_dir, hosts, testbed, progress, rates[-1] if rates else None)
    try:
        env = whatif.apply(inputs.env, changes)
    except whatif.WhatIfError as exc:
        raise EdgetrainError(str(exc)) from None
    cands: dict[str, Any] = {}
    doc = advice(
        loaded, env, inputs.layers, pairs, inputs.train_samples, [str(c) for c in changes], cands
    )
    doc["recipe"] = str(recipe)
    doc["profile"] = inputs.profile
    doc["profiled_over_ssh"] = list(inputs.remote)
    doc["skipped_profiles"] = list(inputs.skipped)
    if inputs.unreachable is not None:
        doc["testbed_host_unreachable"] = inputs.unreachable
    if not doc["ranking"]:
        raise EdgetrainError(
            "no technique could be predicted here: "
            + "; ".join(f"{m['technique']}: {m['why']}" for m in doc["not_predicted"]),
            "give more hosts (each technique's needs are in docs/advise.md)",
        )
    if not any(row["fits"] for row in doc["ranking"]):
        raise EdgetrainError(*_no_fit(doc))
    if run_dir is not None:
        _write_recipes(run_dir, doc, cands, found[1] if found else None)
        atomic_write_json(run_dir / ADVICE_JSON, doc)
    if plot is not None:
        from edgetrain.advise.plot import plot_advice

        plot_advice(doc, plot.expanduser())

    def text() -> None:
        render(doc, console)
        if inputs.unreachable is not None:
            console.print(
                f"could not profile in the testbed's host ({inputs.unreachable}); "
                "measured here, without its CPU quota",
                highlight=False,
                soft_wrap=True,
            )
        if inputs.measured is not None:
            console.print(f"measured a profile of this machine: {inputs.measured}", highlight=False)
        for line in inputs.skipped:
            console.print(f"skipped profile {line}", highlight=False, soft_wrap=True)
        if inputs.remote:
            console.print(f"profiled over ssh: {', '.join(inputs.remote)}", highlight=False)
        if run_dir is not None:
            console.print(f"wrote {run_dir / ADVICE_JSON}", highlight=False, soft_wrap=True)
        if plot is not None:
            console.print(f"wrote {plot}", highlight=False, soft_wrap=True)

    emit(doc, fmt, text)


def _no_fit(doc: dict[str, Any]) -> tuple[str, str]:
    """The one line for a model no technique fits on any device: the least any technique's
    largest worker needs, and the most any device has."""
    GiB = 2**30

    def worst(row: dict[str, Any]) -> dict[str, Any]:
        return max(row["memory"], key=lambda m: m["need_bytes"])

    least = min(doc["ranking"], key=lambda r: worst(r)["need_bytes"])
    need = worst(least)
    have = max((h.get("memory") or 0) for h in doc["environment"]["hosts"])
    return (
        f"{doc['model']} fits no device's memory with any technique: the least is "
        f"{least['technique']}'s worker {need['worker']} at {need['need_bytes'] / GiB:.2f} GiB, "
        f"the largest device has {have / GiB:.2f} GiB",
        "use a smaller model or batch, or hosts with more memory (--what-if memory=SIZE "
        "predicts with more)",
    )


def _write_recipes(
    run_dir: Path, doc: dict[str, Any], cands: dict[str, Any], hosts_text: str | None
) -> None:
    """``RUN/advice/<technique>.toml`` for each ranked technique (the recipe advise predicted,
    ready to launch), and beside it, where the hosts came from a hosts file and the technique
    uses fewer of its slots, ``<technique>.hosts.toml`` with only the hosts it uses."""
    from edgetrain.advise.candidates import hosts_for, recipe_text
    from edgetrain.rundir import atomic_write_text

    for row in doc["ranking"]:
        cand = cands[row["technique"]]
        path = run_dir / "advice" / f"{row['technique']}.toml"
        atomic_write_text(path, recipe_text(cand))
        row["recipe_file"] = str(path.relative_to(run_dir))
        if hosts_text is not None and len(cand.hosts) < sum(
            h["workers"] for h in doc["environment"]["hosts"]
        ):
            hosts = path.with_suffix(".hosts.toml")
            atomic_write_text(hosts, hosts_for(hosts_text, cand.hosts))
            row["hosts_file"] = str(hosts.relative_to(run_dir))
