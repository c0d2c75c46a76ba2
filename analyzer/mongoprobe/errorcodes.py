"""Failed replies: the error codes MongoDB-protocol servers answer with, by name.

A command that fails is answered ``{ok: 0, errmsg: "...", code: N, codeName: "..."}``
(mongod; FerretDB answers with the same codes and layout). The probes count replies
with ``ok: 0`` per command and code in the kernel (``probes/README.md``, "Replies that
failed"); ``codeName`` is not copied from the reply (a string per failure would cost
the kernel more than the code tells): the common codes are named here, from mongod's
``src/mongo/base/error_codes.yml``. Code ``-1`` is a failed reply whose code the probe
could not read (no ``code`` element after ``ok`` and ``errmsg``). A legacy ``OP_REPLY``
fails with that document first too, or as a legacy query fails: ``{$err: "...", code: N}``
(mongod sets the reply's QueryFailure flag; FerretDB appends ``ok: 0`` instead); codes
such as 5739101 (mongod's and FerretDB's "OP_QUERY is no longer supported") are
assertion ids with no name.
"""

from __future__ import annotations

NO_CODE = -1

NAMES = {
    1: "InternalError", 2: "BadValue", 4: "NoSuchKey", 6: "HostUnreachable",
    8: "UnknownError", 9: "FailedToParse", 11: "UserNotFound", 13: "Unauthorized",
    14: "TypeMismatch", 18: "AuthenticationFailed", 20: "IllegalOperation",
    26: "NamespaceNotFound", 27: "IndexNotFound", 28: "PathNotViable",
    40: "ConflictingUpdateOperators", 43: "CursorNotFound", 48: "NamespaceExists",
    50: "MaxTimeMSExpired", 52: "DollarPrefixedFieldName", 59: "CommandNotFound",
    66: "ImmutableField", 67: "CannotCreateIndex", 72: "InvalidOptions",
    73: "InvalidNamespace", 85: "IndexOptionsConflict", 86: "IndexKeySpecsConflict",
    91: "ShutdownInProgress", 96: "OperationFailed", 112: "WriteConflict",
    115: "CommandNotSupported", 121: "DocumentValidationFailure",
    166: "CommandNotSupportedOnView", 189: "PrimarySteppedDown", 238: "NotImplemented",
    251: "NoSuchTransaction", 262: "ExceededTimeLimit", 352: "UnsupportedOpQueryCommand",
    10107: "NotWritablePrimary",
    11000: "DuplicateKey", 11600: "InterruptedAtShutdown", 11601: "Interrupted",
    13435: "NotPrimaryNoSecondaryOk", 13436: "NotPrimaryOrSecondary",
}


def name(code: int) -> str | None:
    """The code's name, None when it is not in the table (or the code was not read)."""
    return NAMES.get(int(code))


def text(code: int) -> str:
    """"59 CommandNotFound", "12345", or "no code"."""
    code = int(code)
    if code == NO_CODE:
        return "no code"
    n = NAMES.get(code)
    return f"{code} {n}" if n else str(code)


def summary(codes: dict[int, int]) -> str:
    """"59 CommandNotFound: 3, 26 NamespaceNotFound: 1", the most frequent first."""
    return ", ".join(f"{text(c)}: {n}" for c, n in
                     sorted(codes.items(), key=lambda kv: (-kv[1], kv[0])))
