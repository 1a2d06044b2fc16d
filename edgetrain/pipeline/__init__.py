"""The pipeline family: Local, data-parallel, PipeDream, GreedyUpdates and mcPipe."""
