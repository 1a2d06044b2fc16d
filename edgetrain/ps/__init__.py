"""The parameter-server family: server shards and trainers; DynaComm and its baselines
schedule the trainers' pulls and pushes layer-wise."""
