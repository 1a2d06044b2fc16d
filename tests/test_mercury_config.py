"""Mercury's recipe section and registry entry: every default the paper leaves unset resolves
to the specification's, the baseline forces its own sampling and pipeline, and a recipe that
cannot run is one line naming the key and the fix (exit 2, nothing written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgetrain import techniques, tomlconfig
from edgetrain.errors import RecipeError
from edgetrain.launch.api import load_checked_recipe
from edgetrain.ps.mercury.config import QUOTA_UTILISATION, MercurySection, settings
from edgetrain.recipe import parse_recipe
from tests.helpers.cli import run_cli


def test_the_registry_runs_mercury_devices_as_trainers() -> None:
    spec = techniques.technique_spec("ps", "mercury")
    assert spec.roles == ("trainer",) and spec.sections == ("mercury",)
    assert techniques.technique_spec("ps", "multips-sgd").roles == ("trainer",)
    assert techniques.family_of("mercury") == "ps"


def test_defaults_resolve_to_the_specifications() -> None:
    s = settings(MercurySection(), "mercury", 32)
    assert (s.sampling, s.weights, s.slots, s.beta, s.smoothing) == (
        "groupwise",
        "exact",
        2,
        None,
        0.5,
    )
    assert (s.initial_importance, s.loss_mode, s.refresh_chunk) == (1.0, "auto", 32)
    assert (s.scheduler, s.group_size, s.resharding, s.optimizer) == (
        "bacc",
        "anytime",
        "aware",
        "adam",
    )
    assert (s.reshard_fraction, s.reshard_budget, s.chunk_bytes) == (0.5, "bandwidth", 65536)
    assert s.importance and s.threads
    # ``auto``: each device resolves it; the paper's BACC where no CPU quota binds it
    assert (s.batch_refresh, s.pace_utilisation) == ("auto", "auto")
    free = s.for_device(under_quota=False)
    assert (free.batch_refresh, free.pace_utilisation) == (False, 1.0)
    quota = s.for_device(under_quota=True)
    assert (quota.batch_refresh, quota.pace_utilisation) == (True, QUOTA_UTILISATION)
    assert settings(MercurySection(batch_refresh=True), "mercury", 32).batch_refresh
    # a recipe's own values are kept on every device
    mine = settings(MercurySection(batch_refresh=False, pace_utilisation=0.9), "mercury", 32)
    assert mine.for_device(True) == mine.for_device(False) == mine
    seq = settings(MercurySection(scheduler="sequential"), "mercury", 32)
    assert seq.group_size == "fixed" and not seq.threads
    # the batch's losses count only where an anytime refresh counts what it got
    for off in (
        {"scheduler": "sequential"},
        {"group_size": "fixed"},
        {"sampling": "all", "resharding": "none"},
    ):
        assert not settings(MercurySection(batch_refresh=True, **off), "mercury", 32).batch_refresh
        assert not settings(MercurySection(**off), "mercury", 32).for_device(True).batch_refresh
    fed = settings(MercurySection(federated=True), "mercury", 32)
    # the paper's federated runs turned off resharding and BACC [MC §6.6]
    assert (fed.resharding, fed.scheduler, fed.group_size) == ("none", "sequential", "fixed")
    fed_bacc = settings(MercurySection(federated=True, scheduler="bacc"), "mercury", 32)
    assert (fed_bacc.resharding, fed_bacc.scheduler) == ("none", "bacc")  # an explicit choice
    base = settings(MercurySection(), "multips-sgd", 32)
    assert (base.sampling, base.scheduler, base.resharding) == ("uniform", "sequential", "none")
    assert not base.importance and not base.batch_refresh
    with pytest.raises(RecipeError, match="slots = 4 is more than"):
        settings(MercurySection(slots=4), "mercury", 2)


def write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "r.toml"
    p.write_text("[train]\nfamily = 'ps'\n" + body)
    return p


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "technique = 'mercury'\n[mercury]\nfederated = true\nresharding = 'aware'\n"
            "[[workers]]\n",
            "federated = true keeps data on its device",
        ),
        (
            "technique = 'mercury'\n[mercury]\nscheduler = 'sequential'\ngroup_size = 'anytime'\n"
            "[[workers]]\n",
            "group_size = 'anytime' needs the BACC threads",
        ),
        (
            "technique = 'mercury'\n[mercury]\nsampling = 'uniform'\nresharding = 'aware'\n"
            "[[workers]]\n",
            "resharding = 'aware' draws by the group-wise importance cache",
        ),
        (
            "technique = 'multips-sgd'\n[mercury]\nsampling = 'groupwise'\n"
            "[[workers]]\ncount = 2\n",
            "sampling = 'groupwise' does not fit technique 'multips-sgd'",
        ),
        (
            "technique = 'mercury'\n[[workers]]\nrole = 'server'\n",
            "role 'server' is not a role of ps/mercury",
        ),
        (
            "technique = 'mercury'\noptimizer = 'sgd'\n[[workers]]\ncount = 2\n",
            "[train] optimizer is not read by mercury",
        ),
        (
            "technique = 'mercury'\n[mercury]\nreshard_budget = 1.5\n[[workers]]\n",
            "reshard_budget must be in (0, 1]",
        ),
        ("technique = 'mercury'\n[mercury]\nbeta = -1\n[[workers]]\n", "[mercury] beta"),
        ("technique = 'mercury'\n[mercury]\nbta = 1\n[[workers]]\n", "did you mean 'beta'"),
    ],
)
def test_bad_mercury_recipes_are_one_line(tmp_path, capsys, body: str, expected: str) -> None:
    path = write(tmp_path, body)
    if "optimizer" not in body and "multips" not in body:  # (those two: the family's check)
        with pytest.raises(RecipeError) as exc:
            load_checked_recipe(path)
        assert expected in str(exc.value)
    code, _, err = run_cli(capsys, "launch", str(path), "--runs-root", str(tmp_path / "runs"))
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and expected in err
    assert not (tmp_path / "runs").exists()


def test_a_good_recipe_loads() -> None:
    body = (
        "[train]\nfamily = 'ps'\ntechnique = 'mercury'\n[mercury]\nbeta = 0.1\n"
        "[[workers]]\ncount = 4\n"
    )

    recipe = parse_recipe(tomlconfig.loads(body))
    assert recipe.section("mercury", MercurySection).beta == 0.1
    assert recipe.role_names() == ["trainer"] * 4


@pytest.mark.parametrize("value", [0, 0.0, -0.5, 1.01, "half"])
def test_pace_utilisation_is_a_share_or_auto(value: object) -> None:
    with pytest.raises(ValueError, match="pace_utilisation"):
        MercurySection(pace_utilisation=value)
    assert MercurySection(pace_utilisation="auto").pace_utilisation == "auto"
    assert MercurySection(pace_utilisation=1).pace_utilisation == 1.0
