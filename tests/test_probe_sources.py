"""The generated bpftrace and D wire tools match their templates."""

import subprocess
import sys
from pathlib import Path

PROBES = Path(__file__).resolve().parents[1] / "probes"


def test_bt_tools_are_generated_from_template():
    r = subprocess.run([sys.executable, str(PROBES / "mkbt.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
