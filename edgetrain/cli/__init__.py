"""Command-line interface: one module per command, wired in ``app.py``."""
