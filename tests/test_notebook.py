"""samples/notebooks/postmortem.ipynb runs top to bottom on the sample run."""

from pathlib import Path

import nbclient     # test dependencies (setup.cfg [test]): missing is a failure, not a skip
import nbformat

NB = Path(__file__).resolve().parents[1] / "samples" / "notebooks" / "postmortem.ipynb"


def test_postmortem_notebook_executes():
    nb = nbformat.read(NB, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NB.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
