"""Launching runs: process starters (local now, ssh later), supervision and the run driver."""
