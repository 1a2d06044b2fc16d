"""Datasets (digits, MNIST/Fashion-MNIST, CIFAR-10, synthetic) and their partitioning."""

from edgetrain.data.dataset import Dataset
from edgetrain.data.loaders import load_dataset
from edgetrain.data.partition import partition_indices
from edgetrain.data.stats import partition_stats

__all__ = ["Dataset", "load_dataset", "partition_indices", "partition_stats"]
