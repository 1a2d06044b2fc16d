"""Emulated edge testbeds on one Linux machine: hosts in network namespaces with their own sshd,
CPU shares in cgroups, tc bandwidth limits (``edgetrain emulate``).

``spec`` (testbed TOML) -> ``topology`` (pure plan: names, addresses, commands, link checks) ->
``testbed`` (up/down/state) with ``cgroups`` and ``sshd``; ``verify`` and ``probes`` measure it,
``trace`` changes it over time; ``netns`` is the two-namespace link the tests and benches use.
"""
