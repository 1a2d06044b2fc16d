"""EdgeGossip's pre-training stage: aggregated data points (reduce, divide, average)."""

from edgetrain.aggregate.aggregates import AggregateConfig, Aggregates, build_aggregates
from edgetrain.aggregate.divide import DIVIDERS
from edgetrain.aggregate.reduce import REDUCERS
from edgetrain.aggregate.store import read_aggregates, write_aggregates

__all__ = [
    "DIVIDERS",
    "REDUCERS",
    "AggregateConfig",
    "Aggregates",
    "build_aggregates",
    "read_aggregates",
    "write_aggregates",
]
