"""Progress drawn live only on a terminal; a log gets no animation.

A spinner or a bar redraws its line many times a second (`\\r` and cursor moves): on a terminal
that is one line changing, in a CI log or a file it is thousands of frames (`mutate --impl`'s
log held thousands of mutmut's). batchproof animates only when its standard output is a
terminal itself — not when `FORCE_COLOR` or `TTY_COMPATIBLE` ask rich to behave as if it were
one (they colour a log; they do not make it a screen). Off a terminal the bars and spinners
print nothing: each command's tables and summary say what ran. mutmut's own spinner, which
it writes whatever its output is, is settled to its last frame per line
(`copy_settled`). docs/harness.md, "Output in a log".
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any

from rich.console import Console
from rich.progress import Progress

# mutmut's spinner frames (`mutmut.ui.terminal`), dropped from a settled line's start
_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def on_terminal(stream: Any = None) -> bool:
    """Whether `stream` (default: standard output) is a terminal."""
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def animated(console: Console) -> bool:
    """Whether `console` may draw live: its file is a terminal, not a dumb one."""
    return on_terminal(console.file) and console.is_terminal and not console.is_dumb_terminal


def progress(console: Console, *columns: Any, transient: bool = False) -> Progress:
    """A rich `Progress` on `console`, drawn only where it may be (`animated`)."""
    return Progress(*columns, console=console, transient=transient,
                    disable=not animated(console))


def status(console: Console, text: str) -> contextlib.AbstractContextManager[Any]:
    """rich's spinner with `text` while the block runs, on a terminal; nothing elsewhere."""
    return console.status(text) if animated(console) else contextlib.nullcontext()


def settled(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Output written for a terminal, as a log should have it: of each line redrawn in place
    (`\\r`), its last state only, without a spinner frame at its start; each line ends in
    `\\n`. Only the line being drawn is held, never its earlier frames."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield _last_frame(line) + b"\n"
        cut = pending.rfind(b"\r", 0, len(pending) - 1)  # a final `\r` may start a `\r\n`
        if cut >= 0:
            pending = pending[cut + 1:]
    if _last_frame(pending):
        yield _last_frame(pending) + b"\n"


def _last_frame(line: bytes) -> bytes:
    frame = line.rstrip(b"\r").rsplit(b"\r", 1)[-1].rstrip()
    text = frame.decode("utf-8", "replace")
    if text[:1] and text[:1] in _SPINNER and text[1:2] == " ":
        return text[2:].encode()
    return frame


def copy_settled(source: IO[bytes], to: IO[str]) -> None:
    """Copy a child's output from the pipe `source` to `to` as it comes, settled (`settled`)."""
    for line in settled(iter(lambda: source.read1(65536), b"")):
        to.write(line.decode("utf-8", "replace"))
        to.flush()
