"""Packet captures of a MongoDB-protocol port: record them, decode them in bulk, pair
replies with requests, and summarize client-visible latency.

    capture.py        tshark -w: a capture (or ring buffer) of one TCP port, started and
                      stopped with confirmation (``Capture``); standard library only
    pcapfile.py       pcap/pcapng files record by record: one capture split by direction
                      between two tshark processes (``Router``)
    tshark_fields.py  tshark -T fields read by pandas: one row per wire message
                      (``messages``, ``iter_messages``, ``detect_port``, ``PcapError``)
    pairing.py        replies paired with requests per TCP stream, the latency summary
                      (``summarize``, ``CaptureSummary``), the join with the probes'
                      events (``join_with_probe``), single packets through pyshark
                      (``explore``)

The decoding API is re-exported here (``pcap.summarize``, ``pcap.messages``,
``pcap.pairs``...) and loaded on first use, so ``from mongoprobe.pcap.capture import
Capture`` (``mongoprobe capture``, record's ``pcap`` collector) does not import pandas.
"""

from __future__ import annotations

# name -> the module of this package that defines it
_API = {
    "UNKNOWN": "pairing", "PAIR_COLUMNS": "pairing", "JOIN_COLUMNS": "pairing",
    "Pairer": "pairing", "PcapResult": "pairing", "CaptureSummary": "pairing",
    "conn_key": "pairing", "summarize": "pairing", "messages": "pairing", "pairs": "pairing",
    "summary_from_pairs": "pairing", "join_with_probe": "pairing", "explore": "pairing",
    "Decode": "tshark_fields", "PcapError": "tshark_fields",
}

__all__ = sorted(_API)


def __getattr__(name: str):
    where = _API.get(name)
    if where == "pairing":
        from . import pairing
        return getattr(pairing, name)
    if where == "tshark_fields":
        from . import tshark_fields
        return getattr(tshark_fields, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
