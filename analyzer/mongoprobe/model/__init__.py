"""The tables in memory: log2 and log-linear histograms, latencies, the event store, stack samples."""
