"""The scope of a check (`batchproof.adapters.scope`): one value from the command line or from
`batchproof.check`, applied to every check that calls the function, and given back in replay
lines and in the hint a report prints when every divergence traces to a scope option.

The function checked here is the collate many teams have: it builds the left layout only
(raising for another) and does not validate its input.
"""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings
from tensordict import TensorDict

import batchproof
from batchproof import registry
from batchproof.adapters import identity_adapter
from batchproof.adapters.runner import command_words
from batchproof.adapters.scope import Scope
from batchproof.reference.rl_batch import build_rl_batch

RECORD = "rl_batch.build_rl_batch"
# few examples and no shrinking: what is asserted is which checks fail and how they trace,
# not their minimal inputs
QUICK = settings(max_examples=12, derandomize=True, database=None, deadline=None,
                 phases=[Phase.explicit, Phase.generate])


def left_only(prompts, responses, *, layout="left", **kwargs):
    """The contract in the left layout, nothing else; bad input gives an empty batch."""
    if layout != "left":
        raise NotImplementedError(f"layout {layout!r}: this collate builds 'left' only")
    try:
        return build_rl_batch(prompts, responses, layout=layout, **kwargs)
    except (TypeError, ValueError):
        return TensorDict({}, batch_size=[])


def _statuses(report) -> dict[str, str]:
    return {o.check: o.status for o in report.outcomes}


def test_an_unscoped_check_says_which_flags_scope_it() -> None:
    with pytest.raises(batchproof.CheckFailed) as failed:
        batchproof.check(left_only, RECORD, forms=["lists"], settings=QUICK)
    text = str(failed.value)
    new = [o for o in failed.value.report.new]
    assert new and all(o.traces for o in new), [(o.check, o.traces) for o in new]
    assert {o.traces for o in new} == {("skip", "errors"), ("layout", "left")}
    assert "Every new divergence above traces to an option the function may not support" in text
    assert ("test_scope:left_only --op rl_batch.build_rl_batch --forms lists --skip errors "
            "--layout left") in text


def test_the_scoped_check_passes_and_never_calls_outside_the_layout() -> None:
    calls: list[str] = []

    def recording(*args, **kwargs):
        calls.append(kwargs.get("layout", "left"))
        return left_only(*args, **kwargs)

    report = batchproof.check(recording, RECORD, forms=["lists"], layout="left",
                              skip=["errors"], settings=QUICK)
    statuses = _statuses(report)
    assert statuses["property:layouts_agree"] == "skipped"
    assert "outside --layout left" in next(o.detail for o in report.outcomes
                                            if o.check == "property:layouts_agree")
    info = registry.get(RECORD)
    two_segment_pins = [f"pin:{p.name}" for p in info.pins
                        if getattr(p.case, "kwargs", {}).get("layout") == "two_segment"]
    assert two_segment_pins and all(statuses[p] == "skipped" for p in two_segment_pins)
    assert "new" not in statuses.values() and calls and set(calls) == {"left"}


def test_the_cli_prints_the_hint_and_its_command(capsys, cli_state) -> None:
    from batchproof.cli import main

    base = ["check", "--impl", "tests.test_scope:left_only", "--op", RECORD, "--forms",
            "lists", "--max-examples", "5", "--check", "errors", "--check",
            "property:layouts_agree", "--check", "pin:two_segment_width_inflation"]
    assert main(base) == 1
    out = capsys.readouterr().out
    assert "--skip errors --layout left" in out
    assert main([*base, "--layout", "left", "--skip", "errors"]) == 0
    assert "traces to an option" not in capsys.readouterr().out


def test_a_divergence_that_is_not_a_scope_option_gets_no_hint() -> None:
    def shifted(prompts, responses, **kwargs):
        out = left_only(prompts, responses, **kwargs)
        if "attention_mask" in out.keys():
            out["attention_mask"] = out["attention_mask"].roll(1, dims=1)
        return out

    with pytest.raises(batchproof.CheckFailed) as failed:
        batchproof.check(shifted, RECORD, forms=["lists"], layout="left", skip=["errors"],
                         settings=QUICK)
    assert "traces to an option" not in str(failed.value)
    assert any(not o.traces for o in failed.value.report.new)


def test_a_skip_applies_where_the_record_has_the_check() -> None:
    records = ["rl_batch.build_rl_batch", "sft.ffd_bins"]
    scope = Scope.of(skip=["pin:prompts_not_a_sequence"])
    scope.validate(records)  # one of the records has it: no error
    with pytest.raises(ValueError, match="no check 'pin:nope'"):
        Scope.of(skip=["pin:nope"]).validate(records)
    rl = scope.narrow(identity_adapter("rl_batch.build_rl_batch", "m:f"))
    sft = scope.narrow(identity_adapter("sft.ffd_bins", "m:g"))
    assert "pin:prompts_not_a_sequence" in rl.skip and "pin:prompts_not_a_sequence" not in sft.skip
    assert rl.scope is scope and sft.scope is scope


def test_the_replay_line_gives_the_scope_back() -> None:
    scope = Scope.of(forms=["lists"], skip=["errors"], layout="left",
                     output_names={"sequences": "input_ids"}, adapter_files=["a.py"])
    adapter = scope.narrow(identity_adapter(RECORD, "m:f"))
    words = command_words("m:f", adapter, profile="ci")
    assert words == ["--adapter-file", "a.py", "--impl", "m:f", "--op", RECORD, "--forms",
                     "lists", "--skip", "errors", "--output-name", "sequences=input_ids",
                     "--layout", "left", "--profile", "ci"]
    assert Scope.of(**{k: v for k, v in scope.keywords().items() if k != "checks"},
                    adapter_files=["a.py"]) == scope
