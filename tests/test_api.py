"""The public API (docs/api.md): `batchproof.check`, `batchproof.assert_identical`,
`batchproof.strategies` — what a framework team calls from its own tests."""

from __future__ import annotations

import dataclasses
import doctest
import re
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument, NonInteractiveExampleWarning

import batchproof
import batchproof.strategies as bps
from batchproof import compare
from batchproof.impl.nesting import nest_by_mask
from batchproof.impl.rl_batch import build_rl_batch
from batchproof.impl.sft import collate_sft, pack_sft
from batchproof.impl.varlen import pack_varlen
from batchproof.reference.balance import karmarkar_karp

API_PAGE = Path(__file__).resolve().parent.parent / "docs" / "api.md"
FEW = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


def _shifted(prompts, responses, **kwargs):
    """Per-token values one column to the right: what `check` must catch."""
    batch = build_rl_batch(prompts, responses, **kwargs)
    batch["loss_mask"] = batch["loss_mask"].roll(1, dims=1)
    return batch


# --------------------------------------------------------------------------- check


def test_check_passes_a_correct_function_and_counts_what_ran() -> None:
    report = batchproof.check(karmarkar_karp, "balance.karmarkar_karp", max_examples=10)
    assert {o.status for o in report.outcomes} == {"pass"}
    assert all(o.examples >= 1 for o in report.outcomes)
    searched = [o for o in report.outcomes if not o.check.startswith("pin:")]
    assert all(o.examples <= 10 + 20 for o in searched)  # max_examples, plus the pins


def test_check_fails_with_the_report_on_a_divergence() -> None:
    with pytest.raises(batchproof.CheckFailed) as failed:
        batchproof.check(_shifted, "rl_batch.build_rl_batch", max_examples=10,
                         checks=["equivalence", "property:alignment", "property:positions"])
    assert failed.value.failed_checks == ["equivalence", "property:alignment"]
    text = str(failed.value)
    assert "minimal case: build_rl_batch(" in text
    assert ("replay: batchproof check --impl test_api:_shifted --op rl_batch.build_rl_batch "
            "--check equivalence") in text
    assert "@reproduce_failure" not in text and "decorator" not in text
    statuses = {o.check: o.status for o in failed.value.report.outcomes}
    assert statuses == {"equivalence": "new", "property:alignment": "new",
                        "property:positions": "pass"}


def test_the_minimal_case_leaves_out_keywords_the_failure_does_not_need() -> None:
    """Hypothesis shrinks values, not whether an optional keyword is passed: `check` drops each
    one the failure does not depend on (without the drop, seeds 1-5 leave `max_seq_len` in)."""
    def int32_mask(prompts, responses, **kwargs):
        batch = build_rl_batch(prompts, responses, **kwargs)
        batch["attention_mask"] = batch["attention_mask"].int()
        return batch

    with pytest.raises(batchproof.CheckFailed) as failed:
        batchproof.check(int32_mask, "rl_batch.build_rl_batch", max_examples=20, seed=3,
                         checks=["equivalence"])
    (minimal,) = re.findall(r"minimal case: (.*)", str(failed.value))
    assert re.fullmatch(r"build_rl_batch\(\[.*\], \[.*\], pad_token_id=-?\d+\)", minimal), minimal
    for seed in range(1, 6):
        with pytest.raises(batchproof.CheckFailed) as failed:
            batchproof.check(_shifted, "rl_batch.build_rl_batch", max_examples=20, seed=seed,
                             checks=["equivalence"])
        (minimal,) = re.findall(r"minimal case: (.*)", str(failed.value))
        assert "max_seq_len" not in minimal and "layout" not in minimal, minimal


def test_check_scopes_forms_skips_and_outputs() -> None:
    def lists_only(prompts, responses, **kwargs):
        if not all(isinstance(row, list) for row in prompts):
            raise TypeError("lists only")
        return build_rl_batch(prompts, responses, **kwargs).exclude("layout")

    report = batchproof.check(lists_only, "rl_batch.build_rl_batch", forms=["lists"],
                              checks=["equivalence"], not_provided=["layout"],
                              skip={"errors": "validated upstream"}, max_examples=10)
    assert [o.status for o in report.outcomes] == ["pass"]
    with pytest.raises(batchproof.CheckFailed, match="TypeError: lists only"):
        batchproof.check(lists_only, "rl_batch.build_rl_batch", checks=["equivalence"],
                         not_provided=["layout"], max_examples=10)


def _tensors_only(prompts, responses, **kwargs):
    """Takes tensor rows only, and produces neither rollout_logprobs nor layout."""
    if not all(isinstance(row, torch.Tensor) for row in [*prompts, *responses]):
        raise TypeError("tensors only")
    return build_rl_batch(prompts, responses, **kwargs).exclude("rollout_logprobs", "layout")


def test_forms_and_not_provided_reach_properties_and_pins() -> None:
    """Properties and pins draw list inputs: a tensors-only function gets them as tensors, and
    the outputs it does not provide are read from the oracle, so only what it does produce is
    judged (the alignment property reads rollout_logprobs; pins read layout)."""
    scoped = dict(forms=["tensors"], not_provided=["rollout_logprobs", "layout"],
                  checks=["equivalence", "property:alignment", "property:layouts_agree",
                          "pin:scalar_reward_on_last_token", "pin:two_segment_width_inflation"],
                  max_examples=10)
    report = batchproof.check(_tensors_only, "rl_batch.build_rl_batch", **scoped)
    assert {o.status for o in report.outcomes} == {"pass"}
    assert report.forms == ["tensors"] and report.not_provided == ["rollout_logprobs", "layout"]

    def shifted_tensors_only(prompts, responses, **kwargs):
        batch = _tensors_only(prompts, responses, **kwargs)
        batch["loss_mask"] = batch["loss_mask"].roll(1, dims=1)
        return batch

    with pytest.raises(batchproof.CheckFailed) as failed:
        batchproof.check(shifted_tensors_only, "rl_batch.build_rl_batch", **scoped)
    assert "property:alignment" in failed.value.failed_checks
    assert "scope: input forms tensors; outputs not compared: rollout_logprobs, layout" in str(
        failed.value)
    with pytest.raises(ValueError, match="no output 'rewardz'"):
        batchproof.check(_tensors_only, "rl_batch.build_rl_batch", not_provided=["rewardz"])


def test_the_minimal_case_is_the_input_as_it_was_before_the_call() -> None:
    def eats_its_input(prompts, responses, **kwargs):
        batch = build_rl_batch(prompts, responses, **kwargs)
        for row in responses:
            if row:
                row[-1] = 12345  # a collate that writes into its input
        return batch

    with pytest.raises(batchproof.CheckFailed) as failed:
        batchproof.check(eats_its_input, "rl_batch.build_rl_batch", checks=["equivalence"],
                         forms=["lists"], max_examples=20)
    text = str(failed.value)
    assert "input was mutated by the call" in text
    minimal = next(line for line in text.splitlines() if line.startswith("minimal case: "))
    assert "12345" not in minimal, minimal


def test_a_replayed_failure_that_passes_now_passes() -> None:
    with pytest.raises(batchproof.CheckFailed) as failed:
        batchproof.check(_shifted, "rl_batch.build_rl_batch", checks=["property:positions",
                         "property:alignment"], max_examples=10, seed=1)
    (outcome,) = [o for o in failed.value.report.outcomes if o.status == "new"]
    report = batchproof.check(build_rl_batch, "rl_batch.build_rl_batch",
                              checks=[outcome.check], reproduce=outcome.blob or None)
    assert [o.status for o in report.outcomes] == ["pass"]
    with pytest.raises(ValueError, match="not a failure's blob"):
        batchproof.check(build_rl_batch, "rl_batch.build_rl_batch", checks=[outcome.check],
                         reproduce="garbage")


def test_check_validates_its_arguments_before_running() -> None:
    with pytest.raises(ValueError, match="unknown op record 'rl_batch.nope'"):
        batchproof.check(_shifted, "rl_batch.nope")
    with pytest.raises(ValueError, match="no check 'property:nope'"):
        batchproof.check(_shifted, "rl_batch.build_rl_batch", checks=["property:nope"])
    with pytest.raises(ValueError, match="no check 'nope'"):
        batchproof.check(_shifted, "rl_batch.build_rl_batch", skip=["nope"])
    with pytest.raises(ValueError, match="no input form 'arrays'"):
        batchproof.check(_shifted, "rl_batch.build_rl_batch", forms=["arrays"])
    with pytest.raises(ValueError, match="max_examples"):
        batchproof.check(_shifted, "rl_batch.build_rl_batch", max_examples=0)
    with pytest.raises(TypeError, match="fn must be callable"):
        batchproof.check("build_rl_batch", "rl_batch.build_rl_batch")
    with pytest.raises(ValueError, match="unknown adapter"):
        batchproof.check(_shifted, "rl_batch.build_rl_batch", adapter="nope")


def test_check_changes_no_global_state() -> None:
    profile, threads = settings._current_profile, torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        batchproof.check(karmarkar_karp, "balance.karmarkar_karp", max_examples=3,
                         checks=["equivalence"])
        assert settings._current_profile == profile and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


# --------------------------------------------------------------------------- strategies


@FEW
@given(bps.prompt_response_rows(max_rows=3, max_prompt_len=4, vocab_size=2, form="jagged"))
def test_prompt_response_rows(rows) -> None:
    prompts, responses = rows
    assert prompts.is_nested and prompts.size(0) == responses.size(0) <= 3
    ids = torch.cat([prompts.values(), responses.values()]).tolist()
    assert set(ids) <= {0, 1}  # vocab_size=2


@FEW
@given(bps.rl_batch_inputs(layouts=["left"], rewards=["scalar"], loss_masks=False,
                           logprobs=True, max_seq_len=False, pad_token_ids=[7], max_rows=2))
def test_rl_batch_inputs_honour_their_options(inputs) -> None:
    assert inputs.get("layout", "left") == "left" and inputs["pad_token_id"] == 7
    assert all(isinstance(v, float) for v in inputs["rewards"])
    assert "loss_masks" not in inputs and "logprobs" in inputs and "max_seq_len" not in inputs
    assert len(inputs["prompts"]) <= 2
    build_rl_batch(**inputs)


@FEW
@given(bps.rl_batch_inputs(rewards=["none", "per_token"], form="tensors"))
def test_rl_batch_inputs_without_scalar_rewards(inputs) -> None:
    assert all(isinstance(row, torch.Tensor) for row in inputs["prompts"])
    assert all(isinstance(row, torch.Tensor) and row.dim() == 1
               for row in inputs.get("rewards", []))
    build_rl_batch(**inputs)


@FEW
@given(bps.sft_examples(max_examples=3, loss_masks=["bools"], attention_masks=["ones"]),
       bps.sft_examples(form="jagged", max_examples=3))
def test_sft_examples(examples, jagged) -> None:
    assert all(set(ex) == {"input_ids", "num_actions", "loss_mask", "attention_mask"}
               and all(isinstance(v, bool) for v in ex["loss_mask"]) for ex in examples)
    collate_sft(examples, pad_token_id=0)
    collate_sft(jagged, pad_token_id=0)


@FEW
@given(bps.sft_examples(packed=True, min_examples=2),
       bps.parallel_configs(max_dp=2, max_tp=1, max_pp=2, max_cp=1, fp8=True))
def test_parallel_configs(examples, config) -> None:
    assert config.dp <= 2 and config.tp == 1 and config.cp == 1 and config.fp8
    pack_sft(examples, pad_token_id=0, capacity=sum(len(e["input_ids"]) for e in examples),
             **config.kwargs())


@FEW
@given(bps.verl_batches(pad_token_id=3, max_rows=2, orphans=False))
def test_verl_batches(batch) -> None:
    assert batch.batch_size[0] <= 2
    nest_by_mask(batch, pad_token_id=3)


@FEW
@given(bps.packed_varlen_samples(pad_to_multiple=[4], max_rows=3),
       bps.inputs("varlen.pack_varlen", form="jagged"))
def test_packed_varlen_samples_and_inputs(packed, inputs) -> None:
    assert packed["input_ids"].shape[1] % 4 == 0 and packed["cu_seqlens"].dtype == torch.int32
    assert inputs["prompts"].is_nested
    pack_varlen(**inputs)


@pytest.mark.parametrize("make, message", [
    (lambda: bps.rl_batch_inputs(layouts=["right"]), "layouts='right'"),
    (lambda: bps.rl_batch_inputs(layouts="left"), "layouts='left'"),
    (lambda: bps.rl_batch_inputs(rewards=[]), "rewards=[]"),
    (lambda: bps.rl_batch_inputs(loss_masks="yes"), "loss_masks='yes'"),
    (lambda: bps.rl_batch_inputs(pad_token_ids=[2**64]), "pad_token_ids"),
    (lambda: bps.prompt_response_rows(min_rows=3, max_rows=2), "max_rows=2 < min_rows=3"),
    (lambda: bps.prompt_response_rows(min_rows=0), "min_rows=0"),
    (lambda: bps.prompt_response_rows(form="arrays"), "form='arrays'"),
    (lambda: bps.sft_examples(packed=True, attention_masks=["zeros"]), "cannot be packed"),
    (lambda: bps.sft_examples(loss_masks=["halves"]), "loss_masks='halves'"),
    (lambda: bps.parallel_configs(max_tp=0), "max_tp=0"),
    (lambda: bps.packed_varlen_samples(pad_to_multiple=[0]), "pad_to_multiple"),
    (lambda: bps.verl_batches(pad_token_id=True), "pad_token_id"),
    (lambda: bps.inputs("rl_batch.nope"), "record"),
    (lambda: bps.inputs("rl_batch.build_rl_batch", form="arrays"), "form='arrays'"),
])
def test_strategies_reject_bad_options_up_front(make, message) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        make()


def test_a_replay_line_names_what_a_fresh_process_needs_to_find_the_adapter(
        monkeypatch, tmp_path) -> None:
    """`replay_scope` (issue 39): batchproof's own adapter as it is; one an adapter file
    registers, with that file (`--adapter-file`, relative to the current folder); none for an
    adapter no command finds (changed by the test, or registered inside a function)."""
    from batchproof import adapters
    from batchproof.api import render, replay_scope

    # batchproof's adapter modules imported before the copy: one imported into the copy would
    # register there only, vanish with it, and leave every later test of the process without it
    adapters.all_adapters()
    monkeypatch.setattr(adapters, "_ADAPTERS", dict(adapters._ADAPTERS))
    monkeypatch.setattr(adapters, "_ORIGINS", dict(adapters._ORIGINS))
    monkeypatch.chdir(tmp_path)
    own = adapters.get_adapter("verl.karmarkar_karp")
    narrowed = batchproof.adapters.scope.Scope.of(skip=["errors"]).narrow(own)
    assert replay_scope(own, narrowed) == narrowed.scope
    assert replay_scope(own.without(own.known[0].name), narrowed) is None
    (tmp_path / "mine.py").write_text(
        "import batchproof\nbatchproof.register_adapter(batchproof.Adapter(name='mine.kk', "
        "framework='mine', record='balance.karmarkar_karp', target='m:f', wrap=lambda f: f))\n")
    (mine,) = adapters.load_adapter_file(str(tmp_path / "mine.py"))
    assert replay_scope(mine, mine).adapter_files == ("mine.py",)
    elsewhere = tmp_path / "in"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the file outside the current folder: as it is
    assert replay_scope(mine, mine).adapter_files == (str(tmp_path / "mine.py"),)
    made_here = adapters.register_adapter(dataclasses.replace(mine, name="made.here"))
    assert replay_scope(made_here, made_here) is None
    custom = adapters.identity_adapter("balance.karmarkar_karp", "m:f")
    assert replay_scope(custom, custom) == custom.scope
    # no scope: the replay is the call itself
    report = batchproof.check(karmarkar_karp, "balance.karmarkar_karp", adapter=made_here,
                              checks=["pin:spec_example_1_to_8"])
    report.outcomes[0].status, report.outcomes[0].detail = "new", "planted: a new divergence"
    assert "replay: batchproof.check(fn, 'balance.karmarkar_karp', <the same options>, " \
           "checks=['pin:spec_example_1_to_8'])" in render(report, karmarkar_karp, made_here)


# --------------------------------------------------------------------------- the docs


def test_the_api_page_runs() -> None:
    """Every `python` block of docs/api.md, in order, in one namespace."""
    blocks = re.findall(r"```python\n(.*?)```", API_PAGE.read_text(), re.S)
    assert len(blocks) >= 6
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(API_PAGE), "exec"), namespace)  # noqa: S102


@pytest.mark.parametrize("module", [bps, compare], ids=["strategies", "compare"])
def test_docstring_examples_run(module) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonInteractiveExampleWarning)
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_public_names() -> None:
    assert set(batchproof.__all__) <= set(dir(batchproof))
    for name in batchproof.__all__:
        assert getattr(batchproof, name) is not None
    with pytest.raises(AttributeError):
        batchproof.no_such_name  # noqa: B018
    assert isinstance(bps.inputs("balance.karmarkar_karp"), st.SearchStrategy)
