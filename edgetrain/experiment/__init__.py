"""What every paper reproduction (``reproductions/`` beside the package) stands on.

A reproduction declares its plan (which arms run, on which testbeds, at which seeds), its arms
(recipes that differ from the baseline only in the technique) and its claims (the paper's
results beside ours); this package runs them and writes the report. One concept a module:

- :mod:`.cli`: the flags every ``scripts/reproduce-<paper>`` shares, and its run-and-print.
- :mod:`.arms`: an arm (a run name and its recipe) and the seed-by-seed interleaving.
- :mod:`.recipes`: a recipe template from plain data, written by the one TOML writer and
  checked by the recipe loader.
- :mod:`.runs`: one ``edgetrain launch`` of an arm at a seed, kept once it completed.
- :mod:`.runner`: batches of arms run into rows.
- :mod:`.testbed` and :mod:`.beds`: the emulated testbed brought up and verified (or local
  processes) for a batch of runs.
- :mod:`.curves` and :mod:`.pilot`: figures read from a run's accuracy curve, and the pilot
  seed that fixes the targets before any measured run.
- :mod:`.claims`, :mod:`.report` and :mod:`.text`: per-seed values into claims (median, min
  and max), the report's one JSON shape and its Markdown, and numbers in its text.
- :mod:`.kept` and :mod:`.compare`: results outside runs (profiles, timings), computed once
  and kept; ``edgetrain compare`` of each seed's runs.
"""
