"""Gossip training: the family (:mod:`.family`, :mod:`.config`) and GoSGD, the baseline; EdgeGossip
(:mod:`.edgegossip`) and the exchange loop of DLion, Gaia and Ako (:mod:`.exchange`) build on it."""
