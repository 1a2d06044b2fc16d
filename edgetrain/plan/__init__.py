"""Pure planners: DynaComm and its baselines over per-layer costs, and the timeline simulator."""
