"""Emulated edge networks on one machine: network namespaces, veth pairs and tc bandwidth limits."""
