"""mongoprobe: active benchmarking of MongoDB-protocol servers.

Wire-protocol latency probes (bpftrace, bcc, DTrace), profilers and an analyzer
that turns their output into pandas DataFrames, shell tables and reports.
"""

__version__ = "0.1.0"
from .rundir import load_run
