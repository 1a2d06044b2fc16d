"""Profiling: per-layer compute, resource sampling, link probing, contention prediction."""
