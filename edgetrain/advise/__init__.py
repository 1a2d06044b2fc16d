"""``edgetrain advise``: which technique to run on these devices and links, predicted from the
techniques' own cost models before any run (docs/advise.md).

Pure parts: :mod:`.environment` (the hosts and links as the cost models see them),
:mod:`.whatif` (changes to them), :mod:`.candidates` (each technique's recipe and placement on
the hosts), :mod:`.rank` (the ranking and the one-line reasons). I/O: :mod:`.inputs` (recipe,
hosts, profiles), :mod:`.document` (``RUN/advice.json`` and the table), :mod:`.plot`.
"""
