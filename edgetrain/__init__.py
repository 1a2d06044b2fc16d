"""edgetrain: train deep neural networks across heterogeneous edge devices."""

__version__ = "0.1.0"
