"""One mutant as mutmut reports it: read by the driver (`mutmut_driver`), matched by the
documented equivalents (`equivalents`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Mutant:
    """mutmut's mutant `name` of `function` in the repository file `path`, its status (mutmut's
    word: killed, survived, ...), its diff, and the reason when it is a documented equivalent."""

    name: str
    path: str
    function: str
    status: str
    diff: str = ""
    equivalent: str = ""  # the reason, when documented as equivalent
