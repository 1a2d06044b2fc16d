"""Reports: a run's summary (JSON and Markdown) and its plots."""
