"""Worker processes: the coordinator client, the local trainer and the process entry point."""
