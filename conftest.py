"""Root conftest: the batchproof pytest plugin (`harness.plugin`) is loaded through its `pytest11`
entry point once the package is installed; loading it here as well keeps a plain checkout working
(`python -m pytest` without `pip install -e .`)."""

import importlib.metadata

_installed = any(ep.value == "harness.plugin"
                 for ep in importlib.metadata.entry_points(group="pytest11"))
pytest_plugins = [] if _installed else ["harness.plugin"]
