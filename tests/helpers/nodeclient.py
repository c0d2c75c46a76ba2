"""The Node.js client of the tests (tests/nodeclient/load.js) and the MongoDB Node.js
driver that scripts/setup.sh installs for it (npm ci of tests/nodeclient's lock file
into a folder named by the files' hash, computed here the same way)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "nodeclient" / "load.js"
NODE_MIN = (20, 19)        # the driver's engines field (mongodb 7.x)


def modules() -> Path:
    """The node_modules folder that holds the pinned driver."""
    tools = Path(os.environ.get("MONGOPROBE_TOOLS", Path.home() / ".cache" / "mongoprobe"))
    digest = hashlib.sha256(b"".join((ROOT / "tests" / "nodeclient" / f).read_bytes()
                                     for f in ("package.json", "package-lock.json")))
    return tools / f"nodeclient-{digest.hexdigest()[:16]}" / "node_modules"


def unavailable() -> str | None:
    """Why the Node.js client cannot run here (None: it can)."""
    node = shutil.which("node")
    if node is None:
        return "no node on PATH (scripts/setup.sh installs Debian's nodejs)"
    out = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
    version = tuple(int(x) for x in out.strip().lstrip("v").split(".")[:2])
    if version < NODE_MIN:
        return f"node {out.strip()}: the MongoDB Node.js driver 7 needs 20.19 or later"
    if not (modules() / "mongodb").is_dir():
        return f"{modules()}: the Node.js driver is not installed (run scripts/setup.sh)"
    return None


def env() -> dict[str, str]:
    """The variables that find the driver (NODE_PATH), to set over the environment."""
    return {"NODE_PATH": str(modules())}
