"""TRL adapters (`batchproof.adapters.trl`, docs/frameworks-trl.md).

They run when `trl` 1.16 is installed beside batchproof (with the modules its import chain
needs: pandas, accelerate, datasets) and skip cleanly otherwise. Each adapter's check must find no
new divergence; removing a known divergence must make the check fail with its shrunk example.
The last tests pin TRL behaviours the registry's strategies do not draw (documented in
docs/frameworks-trl.md): when one of them fails, TRL changed and the docs need updating.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from batchproof import adapters, registry
from batchproof.adapters.runner import check_adapter
from batchproof.registry import BadCase, Case

NAMES = ("trl.padding_free", "trl.padding_free_packed", "trl.grpo_pad", "trl.bfd_bins")


def test_the_module_imports_without_trl() -> None:
    """Registering the adapters must not import TRL (it is imported when an adapter runs)."""
    code = ("import sys; sys.modules['trl'] = None\n"
            "import batchproof.adapters.trl as m\n"
            "assert m.PADDING_FREE.framework == 'trl' and m.GRPO_PAD.versions == '~=1.16.0'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_trl_adapter_names_its_record_and_documents_its_divergences() -> None:
    import batchproof.adapters.trl  # noqa: F401 - registers them

    for name in NAMES:
        adapter = adapters.get_adapter(name)
        info = registry.get(adapter.record)
        assert adapter.distribution == "trl" and adapter.fits("1.16.0"), name
        assert not adapter.fits("1.17.0") and not adapter.fits("0.19.1"), name
        assert set(adapter.skip) <= set(info.check_names()), name
        for known in adapter.known:
            assert known.doc and known.upstream, (name, known.name)


@pytest.fixture(scope="module")
def trl_collator():
    pytest.importorskip("datasets")
    pytest.importorskip("trl.trainer.sft_trainer")
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    return DataCollatorForLanguageModeling


def _run(name: str, checks: list[str] | None = None, without: tuple[str, ...] = (),
         examples: int = 40):
    adapter = adapters.get_adapter(name)
    if without:
        adapter = adapter.without(*without)
    return check_adapter(adapter, checks=checks, max_examples=examples, replay_database=False,
                         derandomize=True, report_multiple_bugs=False)


@pytest.mark.parametrize("name", NAMES)
def test_trl_has_known_divergences_only(trl_collator, name: str) -> None:
    # 20 examples, the size of the framework matrix's `batchproof check` of the same adapters
    report = _run(name, examples=20)
    assert not report.new, [(o.check, o.detail, o.minimal) for o in report.new]
    assert not report.unexplained, report.unexplained
    assert not report.errors, [(o.check, o.detail) for o in report.errors]
    statuses = {o.check: o.status for o in report.outcomes}
    if name == "trl.bfd_bins":  # properties, and the bad inputs no known divergence covers: a
        # negative capacity, where pyarrow's ArrowInvalid is a ValueError (the contract's type)
        assert statuses["equivalence"] == "skipped" and statuses["errors"] == "pass"
        assert all(statuses[c] == "pass" for c in statuses if c.startswith("property:")
                   and c != "property:visit_order"), statuses
    else:
        assert statuses["equivalence"] == "pass" and statuses["errors"] == "pass", statuses
    confirmed = {k["name"] for k in report.known if k["status"] == "confirmed"}
    # precise predicates: every input a known divergence set aside diverged (none too broad)
    assert not [k["name"] for k in report.known if k["diverged"] < k["matched"]], report.known
    expected = {"trl.padding_free": {"tail_pad_one_token_segments",
                                     "empty_sample_makes_ids_float", "no_token_at_all",
                                     "pad_token_id_unchecked",
                                     "empty_prompt_first_token_unscored"},
                "trl.padding_free_packed": {"tail_pad_one_token_segments", "no_token_at_all"},
                "trl.grpo_pad": {"first_row_empty_makes_ids_float", "pad_token_id_unchecked"},
                "trl.bfd_bins": {"truncates_over_capacity", "empty_sequences_dropped",
                                 "capacity_unchecked"}}
    assert expected[name] <= confirmed, (expected[name] - confirmed, report.known)


def test_padding_free_without_empty_sample_divergence_fails_on_dtype(trl_collator) -> None:
    report = _run("trl.padding_free", ["equivalence"], without=("empty_sample_makes_ids_float",))
    (equivalence,) = report.new
    assert "dtype differs: expected torch.int64, got torch.float32" in equivalence.detail, \
        equivalence.detail
    # shrunk to a one-token sample beside an empty one
    assert equivalence.minimal == "pack_varlen([[], [0]], [[], []])", equivalence.minimal


def test_padding_free_without_tail_pad_divergence_fails_on_segments(trl_collator) -> None:
    report = _run("trl.padding_free_packed", ["equivalence"],
                  without=("tail_pad_one_token_segments",))
    (equivalence,) = report.new
    # one boundary per tail-pad token: more cu_seqlens entries than the contract's
    assert equivalence.detail.startswith("Mismatch: cu_seqlens: shape differs"), \
        equivalence.detail
    assert "pad_to_multiple=" in equivalence.minimal, equivalence.minimal


def test_grpo_pad_without_first_row_divergence_fails_on_dtype(trl_collator) -> None:
    report = _run("trl.grpo_pad", ["equivalence"], without=("first_row_empty_makes_ids_float",))
    (equivalence,) = report.new
    assert "dtype differs: expected torch.int64, got torch.float32" in equivalence.detail, \
        equivalence.detail
    assert equivalence.minimal.startswith("build_rl_batch([[]], [[]], pad_token_id=0"), \
        equivalence.minimal


def test_grpo_pad_without_none_logprob_divergence_fails_shrunk(trl_collator) -> None:
    report = _run("trl.grpo_pad", ["errors"], without=("none_logprob_read_as_nan",))
    (errors,) = report.new
    assert "accepted bad input (logprobs[0] holds a non-number)" in errors.detail, errors.detail
    assert errors.minimal == ("build_rl_batch([[0]], [[0]], pad_token_id=0, layout='two_segment', "
                              "logprobs=[[None]]) must raise TypeError: logprobs[0] holds a "
                              "non-number"), errors.minimal


def test_bfd_without_capacity_divergence_fails_on_zero_only(trl_collator) -> None:
    """capacity 0 is TRL's AssertionError; a negative one is pyarrow's ArrowInvalid, a ValueError
    (the contract's type): the predicate matches 0 only."""
    from batchproof.adapters.trl import capacity_zero

    assert capacity_zero(Case(([1], 0))) and not capacity_zero(Case(([1], -3)))
    report = _run("trl.bfd_bins", ["errors"], without=("capacity_unchecked",))
    (errors,) = report.new
    assert "candidate raised AssertionError" in errors.detail, errors.detail
    assert errors.minimal == "ffd_bins([1], 0) must raise ValueError: capacity < 1", \
        errors.minimal


# --------------------------------------------------------------------------- behaviours not drawn


def test_zero_seq_length_merges_documents(trl_collator) -> None:
    """A 0 in `seq_lengths` (TRL's own `pack_dataset` never writes one: `_pack_bfd` drops empty
    sequences) stops the positions from restarting: two documents become one segment."""
    import torch

    collate = trl_collator(pad_token_id=0, padding_free=True)
    out = collate([{"input_ids": [1, 2, 3, 4, 5], "seq_lengths": [3, 0, 2]}])
    assert out["position_ids"].tolist() == [[0, 1, 2, 3, 4]]
    assert out["cu_seq_lens_q"].tolist() == [0, 5]  # the contract: [0, 3, 5]
    with pytest.raises(RuntimeError):  # a leading 0: no position 0 at all
        collate([{"input_ids": [1, 2, 3, 4, 5], "seq_lengths": [0, 3, 2]}])
    with pytest.raises(IndexError):  # a trailing 0
        collate([{"input_ids": [1, 2, 3], "seq_lengths": [3, 0]}])
    assert torch.equal(collate([{"input_ids": [1, 2, 3, 4, 5], "seq_lengths": [3, 2]}])[
        "cu_seq_lens_q"], torch.tensor([0, 3, 5], dtype=torch.int32))


def test_pad_casts_every_row_to_the_first_rows_dtype(trl_collator) -> None:
    """`pad` takes the output dtype from the first row: later float rows are truncated into an
    int first row's dtype, and an empty (float32) first row makes int rows float."""
    import torch
    from trl.trainer.utils import pad

    out = pad([torch.tensor([1, 0]), torch.tensor([0.5, 0.5, 0.5])], padding_value=1)
    assert out.dtype == torch.int64 and out[1].tolist() == [0, 0, 0]
    assert pad([torch.tensor([]), torch.tensor([3, 4])]).dtype == torch.float32


def test_padded_collator_turns_float_after_an_empty_first_example(trl_collator) -> None:
    import torch

    out = trl_collator(pad_token_id=0)([{"input_ids": []}, {"input_ids": [5, 6]}])
    assert out["input_ids"].dtype == out["attention_mask"].dtype == torch.float32


def test_bfd_without_truncation_divergence_fails_shrunk(trl_collator) -> None:
    report = _run("trl.bfd_bins", ["errors"], without=("truncates_over_capacity",))
    (errors,) = report.new
    assert "accepted bad input (a length over capacity)" in errors.detail, errors.detail
    assert errors.minimal == "ffd_bins([2], 1) must raise ValueError: a length over capacity", \
        errors.minimal


def test_bfd_puts_equal_lengths_in_index_order(trl_collator) -> None:
    """Why property:visit_order is skipped: ties keep index order (the contract's FFD visits the
    larger index first)."""
    from trl.data_utils import pack_dataset

    from batchproof.adapters.trl import bfd_bins_adapter
    from batchproof.reference.sft import ffd_bins

    assert bfd_bins_adapter(pack_dataset)([2, 2], 4) == [[0, 1]]
    assert ffd_bins([2, 2], 4) == [[1, 0]]
    # why equivalence is skipped: best fit, not first fit. The 1 goes to the bin with 1 left
    # ([6, 3]), not to the first bin with room ([8], 2 left)
    assert bfd_bins_adapter(pack_dataset)([8, 6, 3, 1], 10) == [[0], [1, 2, 3]]
    assert ffd_bins([8, 6, 3, 1], 10) == [[0, 3], [1, 2]]


def test_grpo_tool_mask_rows_are_not_checked(trl_collator) -> None:
    """`per_token_length_unchecked` and `multi_dim_row_unchecked` (the latter rarely drawn: every
    row nested needs one sample), through the adapter, that is GRPO's composition of `pad`."""
    from trl.trainer.utils import pad

    from batchproof.adapters.trl import grpo_pad_adapter

    build = grpo_pad_adapter(pad)
    out = build([[2], [3]], [[0, 5], [1, 6]], pad_token_id=0, layout="two_segment",
                loss_masks=[[0], [1, 0]])
    assert out["loss_mask"].tolist() == [[0.0, 1.0], [1.0, 0.0]]  # the short row padded with 1
    out = build([[2]], [[0]], pad_token_id=0, layout="two_segment", loss_masks=[[[1.0]]])
    assert out["loss_mask"].shape == (1, 1, 1)


def test_grpo_reads_a_none_logprob_as_nan(trl_collator) -> None:
    """`none_logprob_read_as_nan`: GRPO (1.16.0) maps a None logprob to NaN before
    `torch.tensor`, so the adapter's composition accepts it (the contract: TypeError)."""
    import math

    from trl.trainer.utils import pad

    from batchproof.adapters.trl import GRPO_PAD, grpo_none_logprob

    case = Case(([[2]], [[0, 5]]), {"pad_token_id": 0, "layout": "two_segment",
                                    "logprobs": [[0.5, None]]})
    out = GRPO_PAD.guarded(pad)(*case.args, **case.kwargs)
    first, second = out["rollout_logprobs"][0].tolist()
    assert first == 0.5 and math.isnan(second)
    call = GRPO_PAD.call_of(case)
    assert GRPO_PAD.in_domain(call) and grpo_none_logprob(call)
    assert [k.name for k in GRPO_PAD.matching(GRPO_PAD.call_of(
        BadCase(case, TypeError, "a None logprob")))] == ["none_logprob_read_as_nan"]


GRPO_OWN_STEPS_RAISE = [  # (keyword arguments beside two_segment, pad_token_id 0), why
    ({"loss_masks": [[0.5, None]]}, "a None tool-mask entry: torch.tensor raises RuntimeError"),
    ({"loss_masks": [["0.5", 1.0]]}, "a leading str: torch.tensor raises ValueError"),
    ({"loss_masks": [[1.0, "0.5"]]}, "a str after a number: torch.tensor raises TypeError"),
    ({"logprobs": [["0.5", 1.0]]}, "a str logprob"),
    ({"loss_masks": 3}, "not a list of rows"),
    ({"loss_masks": [[1, 1], [1, 1]]}, "two tool-mask rows for one completion"),
    ({"loss_masks": [[1, 1, 1, 1]]}, "a tool mask wider than the completions: no broadcast"),
]


@pytest.mark.parametrize(("kwargs", "why"), GRPO_OWN_STEPS_RAISE,
                         ids=[why for _, why in GRPO_OWN_STEPS_RAISE])
def test_grpo_inputs_its_own_steps_cannot_carry_are_outside_the_domain(
        trl_collator, kwargs, why) -> None:
    """Where GRPO's lines around `pad` (reproduced by the adapter: `torch.tensor` of each row,
    the tool-mask product, one batch) raise, batchproof's code raises, not TRL's: the guard calls
    it an AdapterError, so `grpo_domain` leaves these inputs out. Both halves are checked: out of
    the domain, and the adapter's own step is what raises."""
    from trl.trainer.utils import pad

    from batchproof.adapters import AdapterError
    from batchproof.adapters.trl import GRPO_PAD

    case = Case(([[2]], [[0, 5]]), {"pad_token_id": 0, "layout": "two_segment", **kwargs})
    assert not GRPO_PAD.in_domain(GRPO_PAD.call_of(case)), why
    with pytest.raises(AdapterError):
        GRPO_PAD.guarded(pad)(*case.args, **case.kwargs)


@pytest.mark.parametrize("tokens", [[[2, None]], [["2"]], [[2, "3"]]])
def test_grpo_token_rows_torch_cannot_convert_are_outside_the_domain(trl_collator,
                                                                     tokens) -> None:
    from trl.trainer.utils import pad

    from batchproof.adapters import AdapterError
    from batchproof.adapters.trl import GRPO_PAD

    case = Case((tokens, [[0, 5]]), {"pad_token_id": 0, "layout": "two_segment"})
    assert not GRPO_PAD.in_domain(GRPO_PAD.call_of(case))
    with pytest.raises(AdapterError):
        GRPO_PAD.guarded(pad)(*case.args, **case.kwargs)
