"""hosts.toml and -H parsing, slot mapping, and the ssh command lines built from them."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from edgetrain.launch.hosts import (
    HostsError,
    Placement,
    load_hosts,
    parse_host_list,
    parse_hosts,
    to_toml,
)
from edgetrain.launch.ssh import kill_script, ssh_command, worker_script
from edgetrain.launch.ssh_preflight import endpoint_target, probe_script

FULL = """
coordinator = "192.168.1.5"
bind = "0.0.0.0"
ssh_options = ["-o", "StrictHostKeyChecking=accept-new"]

[[hosts]]
name = "jetson-a"
address = "192.168.1.10"
user = "edge"
port = 2222
identity = "/keys/id_ed25519"
venv = "/home/edge/venv"
workdir = "/home/edge/work dir"
workers = 2
labels = ["slow"]
site = "lab"

[[hosts]]
address = "192.168.1.11"
python = "/opt/py/bin/python3"
bind = "192.168.1.11"
announce = "10.0.0.11"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hosts.toml"
    path.write_text(text)
    return path


def test_full_hosts_file_maps_workers_onto_slots(tmp_path: Path) -> None:
    hosts, text = load_hosts(_write(tmp_path, FULL))
    assert text == FULL
    slots = hosts.slots(3, "hosts.toml")
    assert [h.label for h in slots] == ["jetson-a", "jetson-a", "192.168.1.11"]
    assert hosts.python_for(slots[0]) == "/home/edge/venv/bin/python"
    assert hosts.python_for(slots[2]) == "/opt/py/bin/python3"
    assert hosts.coordinator_address() == "192.168.1.5" and hosts.bind_address() == "0.0.0.0"
    assert Placement.of(slots[0]) == Placement(
        "jetson-a", "lab", ("slow",), "0.0.0.0", "192.168.1.10"
    )
    assert Placement.of(slots[2]) == Placement(
        "192.168.1.11", None, (), "192.168.1.11", "10.0.0.11"
    )


def test_ssh_command_honours_every_host_setting(tmp_path: Path) -> None:
    hosts, _ = load_hosts(_write(tmp_path, FULL))
    argv = ssh_command(hosts, hosts.hosts[0], "true")
    assert argv[:5] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    assert "-F" not in argv  # ~/.ssh/config applies
    joined = " ".join(argv)
    assert "-p 2222 -i /keys/id_ed25519 -l edge -o StrictHostKeyChecking=accept-new" in joined
    assert argv[-3:] == ["--", "192.168.1.10", "true"]
    with_cfg = hosts.model_copy(update={"ssh_config": "/etc/edge_ssh"})
    assert ssh_command(with_cfg, hosts.hosts[1], "x")[5:7] == ["-F", "/etc/edge_ssh"]


def test_worker_script_quotes_everything() -> None:
    script = worker_script(
        "/v env/bin/python", "/work dir", {"OMP_NUM_THREADS": "2"}, ("worker", "--x", "a b;rm")
    )
    assert "cd '/work dir' && env OMP_NUM_THREADS=2 PYTHONUNBUFFERED=1" in script
    assert "'/v env/bin/python' -m edgetrain worker --x 'a b;rm'" in script
    assert script.startswith('echo "@@edgetrain-remote-pid $$"')
    assert shlex.split(kill_script(42, "TERM"))[:4] == ["kill", "-TERM", "--", "-42"]
    assert "cd /w" in probe_script("/p", "/w", ("10.0.0.1", 5555))
    assert endpoint_target("tcp://10.0.0.1:5555") == ("10.0.0.1", 5555)


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    path = _write(tmp_path, '[[hosts]]\naddress = "a"\nworker = 2\n')
    with pytest.raises(HostsError) as exc:
        load_hosts(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: unknown key 'worker' in [[hosts]] #1; did you mean 'workers'?")
    assert "\n" not in msg and exc.value.exit_code == 2
    with pytest.raises(HostsError, match=r"unknown key 'coordinatr' in the top level"):
        load_hosts(_write(tmp_path, 'coordinatr = "x"\n[[hosts]]\naddress = "a"\n'))


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[[hosts]]\naddress = "a"\nworkers = 0\n', "[[hosts]] #1 workers: Input should be"),
        ('[[hosts]]\naddress = "a"\nport = "x"\n', "[[hosts]] #1 port:"),
        ("[[hosts]]\nworkers = 1\n", "[[hosts]] #1 address: missing"),
        ("x = 1\n", "unknown key 'x'"),
        ('coordinator = "c"\n', "[[hosts]]: missing; add one [[hosts]] table per machine"),
        ("[[hosts]\n", "not valid TOML"),
        ('[[hosts]]\naddress = "a"\n[[hosts]]\naddress = "a"\n', "host name 'a' is used twice"),
    ],
)
def test_bad_hosts_files(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(HostsError) as exc:
        load_hosts(_write(tmp_path, text))
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_missing_hosts_file(tmp_path: Path) -> None:
    with pytest.raises(HostsError, match="hosts file .* not found"):
        load_hosts(tmp_path / "nope.toml")


def test_slot_count_mismatch_names_both_numbers(tmp_path: Path) -> None:
    hosts, _ = load_hosts(_write(tmp_path, FULL))
    with pytest.raises(HostsError) as exc:
        hosts.slots(4, "hosts.toml")
    assert "the hosts have 3 worker slots but the recipe has 4 workers" in str(exc.value)


def test_host_list_like_horovodrun() -> None:
    hosts = parse_host_list("a:2,b:1, c", python="/opt/py")
    assert [(h.address, h.workers) for h in hosts.hosts] == [("a", 2), ("b", 1), ("c", 1)]
    assert hosts.python_for(hosts.hosts[0]) == "/opt/py"
    assert not hosts.hosts[0].is_loopback
    text = to_toml(hosts)
    assert parse_hosts(__import__("edgetrain.tomlconfig").tomlconfig.loads(text), "x") == hosts
    local = parse_host_list("localhost:2,127.0.0.1:1")
    assert local.coordinator_address() == "127.0.0.1" and local.bind_address() == "127.0.0.1"
    assert Placement.of(local.hosts[0]).bind == "127.0.0.1"


@pytest.mark.parametrize("spec", ["a:0", "a:x", ":2", "a:2,,b:1", "a:-1"])
def test_bad_host_list(spec: str) -> None:
    with pytest.raises(HostsError, match=r"-H .*: bad entry .*; write HOST:SLOTS"):
        parse_host_list(spec)


RECIPE = """
[data]
dataset = "digits"
[model]
name = "mlp"
[[workers]]
count = 3
"""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-H", "a:2"], "-H 'a:2': the hosts have 2 worker slots but the recipe has 3 workers"),
        (["-H", "a:2,b.invalid"], None),  # right count: on to the ssh preflight
        (["-H", "a:x"], "-H 'a:x': bad entry 'a:x'"),
        (["-H", "a:3", "--hosts", "h.toml"], "give --hosts FILE or -H HOST:N,..., not both"),
        (["--hosts", "missing.toml"], "hosts file 'missing.toml' not found"),
    ],
)
def test_launch_rejects_bad_hosts_before_anything_starts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    needle: str | None,
) -> None:
    from tests.helpers.cli import run_cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.toml").write_text(RECIPE)
    # a host name that cannot resolve: ssh fails fast, without touching the network
    args = [a.replace("a:", "no-such-host.invalid:") if a.startswith("a:") else a for a in args]
    needle = needle and needle.replace("'a:", "'no-such-host.invalid:")
    code, out, err = run_cli(capsys, "launch", "r.toml", "--runs-root", "runs", *args)
    assert code == 2, err
    if needle is None:
        assert "ssh preflight failed on 2 of 2 hosts" in err
        assert "\n  b.invalid (b.invalid): unreachable over ssh" in err
        assert "no-such-host.invalid (no-such-host.invalid): unreachable over ssh" in err
    else:
        assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists() and "Traceback" not in err


def test_a_dash_h_alias_resolves_through_ssh_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `-H edge-alias:2` names a host only the user's ssh config knows: its address is what
    # `ssh -G` prints, never a DNS lookup of the alias (a stand-in ssh records how it is asked)
    from edgetrain.launch.ssh import resolve_hosts

    log = tmp_path / "argv"
    fake = tmp_path / "bin" / "ssh"
    fake.parent.mkdir()
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> {shlex.quote(str(log))}\n'
        'case " $* " in *" -G "*) printf "user edge\\nhostname 10.1.2.3\\nport 2222\\n";; esac\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    hosts = resolve_hosts(parse_host_list("edge-alias:2"))
    (host,) = hosts.hosts
    assert host.address == "edge-alias" and host.hostname == "10.1.2.3"
    (argv,) = log.read_text().splitlines()
    assert argv.split()[0] == "-G" and argv.split()[-1] == "edge-alias"
