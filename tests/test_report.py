"""`batchproof.report` on its own: how one failed check is described for a person.

Every promise of the module — which failures are batchproof's own, which Hypothesis notes are
replaced and which kept, the minimal call and its cut, the replay words, the blob check, the
phases without `explain` — asserted exactly, so that a mutant of `harness/report.py` (the
`--harness report` mutmut run) fails here, in milliseconds, without running a check.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import Phase
from hypothesis import errors as hypothesis_errors

from batchproof import report
from batchproof.checks import CheckStats, HarnessError
from batchproof.registry import BadCase, Case


def _noted(exc: BaseException, *notes: str) -> BaseException:
    exc.__notes__ = [*getattr(exc, "__notes__", []), *notes]  # add_note, on Python 3.10 too
    return exc


class ExceptionGroup(Exception):  # noqa: A001 - the shape of the builtin (3.11+) report reads
    def __init__(self, message: str, exceptions: list[BaseException]) -> None:
        super().__init__(message)
        self.exceptions = tuple(exceptions)


# --------------------------------------------------------------------------- Failure.lines


def test_failure_lines_are_message_notes_minimal_case_then_replay() -> None:
    failure = report.Failure("divergence", "Mismatch: x", minimal="f(1)", blob="AAA",
                             notes=["note one", "note two"])
    assert failure.lines() == ["Mismatch: x", "note one", "note two", "minimal case: f(1)"]
    assert failure.lines("batchproof verify --check c") == [
        "Mismatch: x", "note one", "note two", "minimal case: f(1)",
        "replay: batchproof verify --check c"]
    assert report.Failure("divergence", "m").lines() == ["m"]  # no empty minimal/replay lines
    assert report.Failure("divergence", "m").notes == []  # a fresh list per Failure
    assert report.Failure("divergence", "m").blob == ""


# --------------------------------------------------------------------------- kind_of


def test_kind_of_tells_batchproofs_failures_from_divergences() -> None:
    assert report.kind_of(AssertionError("values differ")) == "divergence"
    assert report.kind_of(ValueError("boom")) == "divergence"
    assert report.kind_of(HarnessError("bad record")) == "harness"
    for error in (hypothesis_errors.FailedHealthCheck, hypothesis_errors.Unsatisfiable,
                  hypothesis_errors.InvalidArgument, hypothesis_errors.InvalidDefinition):
        assert report.kind_of(error("refused")) == "harness", error
    drawn = _noted(ValueError("in a filter"), "while generating 'case' from rl_batch_cases()")
    assert report.kind_of(drawn) == "harness"
    # the first failure of a group decides, looked up recursively
    group = ExceptionGroup("two", [HarnessError("ours"), AssertionError("theirs")])
    assert report.kind_of(group) == "harness"
    group = ExceptionGroup("two", [AssertionError("theirs"), HarnessError("ours")])
    assert report.kind_of(group) == "divergence"
    nested = ExceptionGroup("outer", [ExceptionGroup("inner", [HarnessError("ours")])])
    assert report.kind_of(nested) == "harness"


def test_while_drawing_reads_hypothesis_note_at_its_start_only() -> None:
    assert report.while_drawing(_noted(ValueError(), "while generating 'case' from x"))
    assert report.while_drawing(_noted(ValueError(), "other", "while generating 'c' from y"))
    assert not report.while_drawing(_noted(ValueError(), "raised while generating 'c'"))
    assert not report.while_drawing(ValueError("while generating in the message only"))
    assert not report.while_drawing(ValueError())


# --------------------------------------------------------------------------- describe


BLOB_NOTE = ("You can reproduce this example by temporarily adding "
             "@reproduce_failure('6.100.0', b'AXicY2BgAAAABAAB') as a decorator on your test case")


def test_describe_replaces_the_notes_for_test_authors_and_keeps_the_others() -> None:
    exc = _noted(AssertionError("values differ"),
                 "Falsifying example: test(case=...)", "Falsifying explicit example: x",
                 "Failing test case: y", "Failing explicit example: z", BLOB_NOTE,
                 "Explanation:\n    These lines were always and only run by failing examples",
                 "Highest target scores:", "        3  (label='rows')",
                 "  Trying example: kept", "a kept note", "  Falsifying example: indented")
    stats = CheckStats(failing=Case(([[1]], [[2]]), {"pad_token_id": 0}))
    failure = report.describe(exc, stats, "build_rl_batch")
    assert failure.kind == "divergence"
    assert failure.message == "AssertionError: values differ"
    assert failure.minimal == "build_rl_batch([[1]], [[2]], pad_token_id=0)"
    assert failure.blob == "AXicY2BgAAAABAAB"
    assert failure.notes == ["  Trying example: kept", "a kept note"]


def test_describe_reads_the_notes_of_the_first_failure_of_a_group_too() -> None:
    first = _noted(AssertionError("first  "), "from the first", BLOB_NOTE)
    group = _noted(ExceptionGroup("many", [first, ValueError("second")]), "from the group")
    failure = report.describe(group, CheckStats(), "f")
    assert failure.message == "AssertionError: first"  # trailing blanks stripped
    assert failure.notes == ["from the group", "from the first"]
    assert failure.blob == "AXicY2BgAAAABAAB" and failure.minimal == ""
    # a lone exception's notes are not read twice
    lone = _noted(AssertionError("x"), "once")
    assert report.describe(lone, CheckStats(), "f").notes == ["once"]
    # a group whose first failure has no notes at all
    bare = report.describe(_noted(ExceptionGroup("g", [ValueError("v")]), "g"), CheckStats(), "f")
    assert bare.notes == ["g"] and bare.message == "ValueError: v"


def test_describe_without_a_blob_note_has_an_empty_blob() -> None:
    failure = report.describe(_noted(AssertionError("x"), "a note"), CheckStats(), "f")
    assert failure.blob == ""
    assert report.replay_words("equivalence", failure) == ["--check", "equivalence"]


def test_describe_says_when_batchproof_failed_while_drawing() -> None:
    exc = _noted(ValueError("bad filter"), "while generating 'case' from s()")
    failure = report.describe(exc, CheckStats(), "f")
    assert failure.kind == "harness"
    assert failure.message == (
        "batchproof failed while drawing an input (a strategy, a filter or an adapter's "
        "predicate; the function under test was not called): ValueError: bad filter")
    # batchproof's own error raised while drawing names itself: no prefix
    ours = _noted(HarnessError("predicate"), "while generating 'case' from s()")
    assert report.describe(ours, CheckStats(), "f").message == "HarnessError: predicate"
    # a divergence raised in the function under test: no prefix either
    assert report.describe(ValueError("v"), CheckStats(), "f").message == "ValueError: v"


# --------------------------------------------------------------------------- minimal_call


def test_minimal_call_writes_the_call_and_what_a_bad_input_must_raise() -> None:
    assert report.minimal_call(None, "f") == ""
    case = Case(([[1, 2]], [[3]]), {"pad_token_id": 0})
    assert report.minimal_call(case, "build") == "build([[1, 2]], [[3]], pad_token_id=0)"
    bad = BadCase(case, ValueError, "a row too long")
    assert report.minimal_call(bad, "build") == (
        "build([[1, 2]], [[3]], pad_token_id=0) must raise ValueError: a row too long")
    assert report.minimal_call(BadCase(case, TypeError, ""), "build") == (
        "build([[1, 2]], [[3]], pad_token_id=0) must raise TypeError")


def test_minimal_call_cuts_a_long_case_at_the_limit() -> None:
    fits = Case((list(range(10)),), {})
    assert report.minimal_call(fits, "f") == f"f({list(range(10))!r})"
    width = report.MINIMAL_LIMIT - len("f()")  # a call of exactly MINIMAL_LIMIT characters
    exact = Case(("a" * (width - 2),), {})
    assert len(exact.as_call("f")) == report.MINIMAL_LIMIT
    assert report.minimal_call(exact, "f") == exact.as_call("f")
    longer = Case(("a" * (width - 1),), {})
    text = longer.as_call("f")
    cut = report.minimal_call(longer, "f")
    assert cut == text[: report.MINIMAL_LIMIT - 30] + f" ...<{len(text)} characters in all>"
    assert report.MINIMAL_LIMIT == 4000


# --------------------------------------------------------------------------- replay


def test_command_quotes_only_where_the_shell_needs_it() -> None:
    assert report.command(["batchproof", "verify", "--impl", "my mod:f", 3]) == (
        "batchproof verify --impl 'my mod:f' 3")
    assert report.command([]) == ""


def test_replay_words_add_the_blob_of_a_generated_failure_only() -> None:
    generated = report.Failure("divergence", "m", blob="AXic")
    assert report.replay_words("equivalence", generated) == [
        "--check", "equivalence", "--reproduce", "AXic"]
    pinned = report.Failure("divergence", "m")
    assert report.replay_words("pin:empty", pinned) == ["--check", "pin:empty"]


def test_check_blob_accepts_hypothesis_blobs_and_names_a_bad_one() -> None:
    from hypothesis.core import encode_failure

    report.check_blob(encode_failure([b"\x00\x01"]).decode())
    with pytest.raises(ValueError) as raised:
        report.check_blob("not-a-blob")
    assert str(raised.value).startswith("--reproduce 'not-a-blob' is not a failure's blob: ")
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    with pytest.raises(ValueError, match="is not a failure's blob"):
        report.check_blob(base64.b64encode(b"\xff\xfe garbage").decode())


def test_without_explain_drops_only_the_explain_phase() -> None:
    assert report.without_explain(tuple(Phase)) == tuple(p for p in Phase
                                                         if p is not Phase.explain)
    assert report.without_explain([Phase.explicit, Phase.explain]) == (Phase.explicit,)
    assert report.without_explain([Phase.generate]) == (Phase.generate,)


def test_first_unwraps_groups_and_leaves_other_exceptions() -> None:
    inner = ValueError("inner")
    assert report._first(ExceptionGroup("g", [ExceptionGroup("h", [inner])])) is inner
    plain = KeyError("k")
    assert report._first(plain) is plain

    class Odd(Exception):  # an `exceptions` attribute that is not a tuple of exceptions
        exceptions = ["not", "a", "group"]

    odd = Odd()
    assert report._first(odd) is odd
