"""The ``ssh`` client's argv for a host of a hosts file: the one place that turns a
``[[hosts]]`` entry and the file's ssh settings into ssh options.

Both the ssh launcher (:mod:`edgetrain.launch.ssh`) and its preflight
(:mod:`edgetrain.launch.ssh_preflight`) build on it, so neither imports the other's side."""

from __future__ import annotations

import os

from edgetrain.launch.hosts import Host, HostsFile


def ssh_command(hosts: HostsFile, host: Host, remote: str) -> list[str]:
    """The ``ssh`` argv that runs the shell command ``remote`` on ``host``."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={hosts.connect_timeout_s}"]
    if hosts.ssh_config:
        argv += ["-F", os.path.expanduser(hosts.ssh_config)]
    if host.port is not None:
        argv += ["-p", str(host.port)]
    if host.identity:
        argv += ["-i", os.path.expanduser(host.identity)]
    if host.user:
        argv += ["-l", host.user]
    return [*argv, *hosts.ssh_options, "--", host.address, remote]
