"""What setup.cfg cannot say: the repository's top-level probes/, dtrace/ and
flamegraphs/ folders (run in place by users of a checkout) ship inside the package as
mongoprobe/_data/probes, _data/dtrace and _data/flamegraphs, where
mongoprobe.run.tracer.data_dir() finds them once installed."""

from setuptools import find_packages, setup

DATA = ("probes", "dtrace", "flamegraphs")

setup(
    packages=find_packages("analyzer") + [f"mongoprobe._data.{d}" for d in DATA],
    package_dir={"": "analyzer", **{f"mongoprobe._data.{d}": d for d in DATA}},
    # every file of each folder: the tools, their headers and templates, the READMEs
    package_data={f"mongoprobe._data.{d}": ["*"] for d in DATA},
)
