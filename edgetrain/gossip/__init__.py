"""Gossip training: GoSGD (the baseline); EdgeGossip and DLion build on it."""
