"""Reproductions of the papers' headline results: shared arms, testbeds and reports.

Each paper has one module here (run by ``scripts/reproduce-<paper>``) that writes
``OUT/paper-vs-edgetrain.{md,json}``; this package holds what they share: the report's shape
(:mod:`.report`), resumable runs of interleaved arms (:mod:`.runs`) and the emulated testbed a
batch of runs stands on (:mod:`.testbed`).
"""
