"""Failed replies: the error codes MongoDB-protocol servers answer with, by name.

A command that fails is answered ``{ok: 0, errmsg: "...", code: N, codeName: "..."}``
(mongod; FerretDB answers with the same codes and layout). The probes count replies
with ``ok: 0`` per command and code in the kernel (``probes/README.md``, "Replies that
failed"). A legacy ``OP_REPLY`` fails with that document first too, or as a legacy
query fails: ``{$err: "...", code: N}``. The table and its printing are
``mongoprobe.wire.facts``' (one copy, shared with the bcc tools); these are its names
in the analyzer.
"""

from __future__ import annotations

from mongoprobe.wire.facts import ERROR_NAMES as NAMES  # noqa: F401
from mongoprobe.wire.facts import NO_CODE  # noqa: F401
from mongoprobe.wire.facts import error_name as name  # noqa: F401
from mongoprobe.wire.facts import error_summary as summary  # noqa: F401
from mongoprobe.wire.facts import error_text as text  # noqa: F401
