"""The exchange loop (:mod:`.loop`) and the techniques on it: DLion (:mod:`.dlion`) with its
baselines Gaia (:mod:`.gaia`) and Ako (:mod:`.ako`), their messages, their launcher side
(:mod:`.side`, :mod:`.controller`, :mod:`.worker_report`) and the helpers only they use."""
