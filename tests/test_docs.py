"""The pages whose examples must run as written: docs/checking.md, end to end, in a fresh folder
(files from its `python NAME` blocks, commands from its `bash` blocks with the exit status each
line's `# exit N` comment states)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"```(\w+)([^\n]*)\n(.*?)```", re.S)


def steps(page: Path) -> list[tuple[str, str, str]]:
    """("file", name, text) or ("command", line, expected exit status), in page order."""
    out = []
    for language, info, text in BLOCK.findall(page.read_text()):
        if language == "python" and info.strip():
            out.append(("file", info.strip(), text))
        elif language == "bash":
            for line in text.splitlines():
                command, _, expected = line.partition("# exit ")
                if command.strip() and expected:
                    out.append(("command", command.strip(), expected.strip()))
    return out


def test_checking_your_own_function_runs_as_written(tmp_path) -> None:
    page = DOCS / "checking.md"
    done = steps(page)
    assert [kind for kind, *_ in done].count("command") >= 4
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("PYTEST_ADDOPTS", None)
    for kind, what, payload in done:
        if kind == "file":
            (tmp_path / what).write_text(payload)
            continue
        result = subprocess.run(what, shell=True, cwd=tmp_path, env=env, capture_output=True,
                                text=True)
        assert str(result.returncode) == payload, (
            f"{what}\nexit {result.returncode}, expected {payload}\n{result.stdout[-4000:]}"
            f"\n{result.stderr[-2000:]}")
