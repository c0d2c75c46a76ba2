"""mongoprobe: active benchmarking of MongoDB-protocol servers.

Wire-protocol latency probes (bpftrace, bcc, DTrace), profilers and an analyzer
that turns their output into pandas DataFrames, shell tables and reports.

One package per data stage, in the order data flows (a stage imports only earlier
ones; tests/test_layout.py checks it and lists today's exceptions):

    wire/       the MongoDB wire protocol: decode, encode, BSON scan, byte stream, facts
    formats/    every parser of a tool's output, foreign or our own, into DataFrames
                (bpftrace's JSON lines through one reader, bpftrace_json)
    model/      tables in memory: log2/log-linear histograms, latencies, events, stacks;
                the latency summary every probe's figures become (latency_summary,
                with its quantize text and JSON); the phase type (phase) and the
                monotonic-to-wall clock (clock)
    loadtools/  load tools' outputs (built-in, YCSB, iibench, markers) as one model
    pcap/       packet captures: tshark capture, pcap files, request/reply pairing
    run/        child processes (one lifecycle, child) and the live system: tracers,
                collectors, target, record and the run folder it writes (load_run
                reads it)
    analysis/   phases, traffic phases, the limiter's verdict, normalisation,
                CPU categories, thread states
    views/      renderers: shell tables, plots, heat maps, flame
                graphs, the HTML report
    load/       the built-in load programs (``mongoprobe load``, the mixed workload)
    cli/        the ``mongoprobe`` command
    progress.py a terminal progress line, used by several stages
"""

__version__ = "0.1.0"
from mongoprobe.run.run_folder import load_run
