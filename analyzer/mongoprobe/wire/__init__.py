"""The MongoDB wire protocol: decoding, encoding, the BSON scan, the byte stream, the facts
(opcodes, error codes, buckets) shared with the bcc tools."""
