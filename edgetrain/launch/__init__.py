"""Launching runs: the launch entry point, process starters (local, ssh), placement,
supervision and the run driver."""
