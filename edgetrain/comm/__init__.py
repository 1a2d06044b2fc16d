"""Transport: wire format, sockets with counters, and the coordinator's rendezvous protocol."""
