"""The papers' reproductions, each declared over :mod:`edgetrain.experiment`: its plan (which
arms run on which testbeds at which seeds, per mode), its arms (recipes that differ from the
baseline only in the technique) and its claims (the paper's results beside ours).

Run one as ``scripts/reproduce-<paper>`` (or ``python -m reproductions.<paper>`` from the
repository root); it writes ``OUT/paper-vs-edgetrain.{md,json}``. A paper is a few modules
named after it: ``<paper>.py`` (the flow, ``main`` and what the paper's tests import),
``<paper>_plan.py`` (plan, arms, recipes), ``<paper>_claims.py`` and ``<paper>_text.py``
(the report's sections), and, where a paper measures more than runs, a module per measure.
"""
