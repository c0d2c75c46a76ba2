"""The mongoprobe package's own files, for the tools of this folder.

The bcc tools run under the system python3 (the one with bcc), where the package and
its dependencies may not be importable: they load a stdlib-only module of the package
from its file instead, wherever this folder is:

    probes/                       a checkout: the package is analyzer/mongoprobe/
    mongoprobe/_data/probes/      an installed package (setup.py): two folders up
    anywhere else                 the importable package's folder

    sys.path.insert(0, HERE); from packagefiles import package_module
    wirefacts = package_module("wire.facts")
"""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def package_dir():
    """The folder of the package's modules (mongoprobe/) this folder belongs to; for a
    copy of the tools elsewhere, the importable package's (found, not run)."""
    if os.path.basename(os.path.dirname(HERE)) == "_data":
        return os.path.dirname(os.path.dirname(HERE))
    checkout = os.path.join(os.path.dirname(HERE), "analyzer", "mongoprobe")
    if os.path.isdir(checkout):
        return checkout
    try:
        spec = importlib.util.find_spec("mongoprobe")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return checkout


def package_module(name):
    """The package's module NAME (a stdlib-only one: no relative imports), loaded from
    its file as a top-level module NAME."""
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(package_dir(), *name.split(".")) + ".py"   # wire.facts
    if not os.path.isfile(path):
        raise ImportError("%s not found: this tool runs from probes/ in a checkout, "
                          "from the mongoprobe package's _data/probes, or with the "
                          "package importable" % path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module      # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
