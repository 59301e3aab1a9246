"""The conversion code of `batchproof.adapters.trl` on stand-ins of TRL's functions (issue 39:
the killers of `mutate --mutmut --harness adapters/trl`).

TRL is not installed here: the adapters' wraps are handed the liveness stand-ins
(`tests/liveness_stand_ins.py`: a padding-free collator, `pad`, `pack_dataset` over a fake
`datasets`) or small recording fakes, and asserted on what the module docstring promises: the
collator and `pad` are handed the examples and arguments SFTTrainer and GRPOTrainer hand them,
every compared field is read off TRL's own output (sample_index from its `seq_idx`), and each
domain and known-divergence predicate holds on exactly the inputs its doc names.
"""

from __future__ import annotations

import math
import sys
import types

import pytest
import torch
from liveness_stand_ins import Dataset, TrlLanguageModelingCollator, trl_pack_dataset, trl_pad

from batchproof.adapters import trl
from batchproof.adapters.trl import (
    _example,
    _packed_examples,
    all_samples_empty,
    bad_multiple,
    bad_pad_token_id,
    bfd_bins_adapter,
    bfd_domain,
    capacity_zero,
    empty_batch,
    empty_prompt_with_response,
    first_row_empty,
    grpo_all_rows_nested,
    grpo_domain,
    grpo_float_token,
    grpo_length_mismatch,
    grpo_none_logprob,
    grpo_pad_adapter,
    has_empty_sample,
    last_row_empty,
    length_over_capacity,
    non_int_token,
    non_positive_length,
    pack_domain,
    padding_free_adapter,
    some_samples_empty,
    tail_pad_split,
)
from batchproof.reference.rl_batch import build_rl_batch
from batchproof.reference.sft import ffd_bins
from batchproof.reference.varlen import pack_varlen
from batchproof.registry import BadCase, Case

PROMPTS, RESPONSES = [[1, 2], [], [3]], [[4], [], [5, 6]]

# --------------------------------------------------------------------------- the collator


def test_an_example_is_prompt_and_completion_with_the_prompt_ignored() -> None:
    assert _example((1, 2), (3,)) == {"input_ids": [1, 2, 3], "labels": [-100, -100, 3]}


def test_packed_examples_drop_empty_samples_and_pair_the_rest() -> None:
    examples = _packed_examples([[1], [], [2, 3], [4]], [[5], [], [6], []])
    assert examples == [
        {"input_ids": [1, 5, 2, 3, 6], "labels": [-100, 5, -100, -100, 6], "seq_lengths": [2, 3]},
        {"input_ids": [4], "labels": [-100], "seq_lengths": [1]}]
    assert _packed_examples([[1], [2], [3]], [[], [], []], per_example=3)[0]["seq_lengths"] == [
        1, 1, 1]


class Recorder(TrlLanguageModelingCollator):
    """The stand-in collator, recording how it is built and what it is handed."""

    built: list = []

    def __init__(self, **kwargs) -> None:
        self.built.append(kwargs)
        super().__init__(**kwargs)

    def __call__(self, examples):
        self.built.append(examples)
        return super().__call__(examples)


@pytest.fixture
def recorder(monkeypatch) -> type[Recorder]:
    monkeypatch.setattr(Recorder, "built", [])
    return Recorder


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("multiple", [1, 4])
def test_the_collators_row_is_the_contracts(recorder, packed: bool, multiple: int) -> None:
    out = padding_free_adapter(recorder, packed=packed)(PROMPTS, RESPONSES,
                                                        pad_to_multiple=multiple, pad_token_id=9)
    want = pack_varlen(PROMPTS, RESPONSES, pad_to_multiple=multiple, pad_token_id=9)
    for key in ("input_ids", "position_ids", "cu_seqlens", "target_index", "predict_index",
                "sample_index"):
        assert torch.equal(out[key].reshape(-1), want[key].reshape(-1)), key
    assert out.get_non_tensor("max_seqlen") == want.get_non_tensor("max_seqlen")
    built, examples = recorder.built
    assert built == {"pad_token_id": 9, "padding_free": True, "pad_to_multiple_of": multiple}
    assert examples == (_packed_examples(PROMPTS, RESPONSES) if packed
                        else [_example(p, r) for p, r in zip(PROMPTS, RESPONSES)])


def test_the_defaults_are_the_contracts(recorder) -> None:
    padding_free_adapter(recorder)(PROMPTS, RESPONSES)
    built, examples = recorder.built
    assert built == {"pad_token_id": 0, "padding_free": True, "pad_to_multiple_of": 1}
    assert examples == [_example(p, r) for p, r in zip(PROMPTS, RESPONSES)]  # not packed


def test_a_one_token_sample_is_a_sample() -> None:
    prompts, responses = [[7], [1]], [[], [2]]
    out = padding_free_adapter(TrlLanguageModelingCollator)(prompts, responses)
    assert out["sample_index"].tolist() == [1]
    assert torch.equal(out["sample_index"], pack_varlen(prompts, responses)["sample_index"])


def test_no_token_at_all_has_int64_samples() -> None:
    out = padding_free_adapter(TrlLanguageModelingCollator)([[]], [[]])
    assert out["sample_index"].dtype == torch.int64 and out["sample_index"].numel() == 0


def test_a_segment_beyond_the_samples_is_no_sample() -> None:
    """A collator naming segments past the samples: their targets belong to no sample (-1)."""
    class Beyond(TrlLanguageModelingCollator):
        def __call__(self, examples):
            out = super().__call__(examples)
            return {**out, "seq_idx": out["seq_idx"] + 5}

    for prompts, responses in (([[1]], [[2, 3]]), (PROMPTS, RESPONSES)):
        out = padding_free_adapter(Beyond)(prompts, responses)
        assert set(out["sample_index"].tolist()) == {-1}


def test_the_packed_adapter_packs(recorder) -> None:
    trl.packed_adapter(recorder)(PROMPTS, RESPONSES)
    assert recorder.built[1] == _packed_examples(PROMPTS, RESPONSES)


def test_no_device_argument() -> None:
    with pytest.raises(NotImplementedError,
                       match="^the collator builds CPU tensors; no device argument$"):
        padding_free_adapter(TrlLanguageModelingCollator)(PROMPTS, RESPONSES, device="cpu")


def test_sample_index_is_read_off_trls_segments() -> None:
    """seq_idx k is the k-th non-empty sample: a collator naming the first segment for every
    token gives every target to sample 0."""
    class OneSegment(TrlLanguageModelingCollator):
        def __call__(self, examples):
            out = super().__call__(examples)
            return {**out, "seq_idx": torch.zeros_like(out["seq_idx"])}

    out = padding_free_adapter(OneSegment)(PROMPTS, RESPONSES)
    assert out["sample_index"].tolist() == [0, 0, 0]
    assert out["sample_index"].dtype == torch.int64


def test_targets_are_trls_labels() -> None:
    class NoLabels(TrlLanguageModelingCollator):
        def __call__(self, examples):
            out = super().__call__(examples)
            return {**out, "labels": torch.full_like(out["labels"], -100)}

    out = padding_free_adapter(NoLabels)(PROMPTS, RESPONSES)
    assert out["target_index"].tolist() == [] and out["sample_index"].tolist() == []


# --------------------------------------------------------------------------- pack predicates


def _pack(prompts=PROMPTS, responses=RESPONSES, **kwargs) -> Case:
    return Case((prompts, responses), kwargs)


def test_the_pack_domain() -> None:
    assert pack_domain(_pack()) and pack_domain(_pack(position_ids_start=0))
    assert not pack_domain(_pack(position_ids_start=1))
    assert not pack_domain(_pack(position_ids_start=0.0))
    assert not pack_domain(_pack(device="cpu"))
    assert not pack_domain(_pack([[1]], [[2], [3]]))
    assert not pack_domain(_pack(torch.tensor([[1]]), [[2]]))
    assert not pack_domain(_pack([[1]], [(2,)]))


def test_a_tail_pad_of_two_or_more() -> None:
    total = 6  # tokens of PROMPTS and RESPONSES
    assert tail_pad_split(_pack(pad_to_multiple=4))  # 2 pads
    assert not tail_pad_split(_pack(pad_to_multiple=7))  # 1 pad
    assert not tail_pad_split(_pack(pad_to_multiple=total))
    assert not tail_pad_split(_pack(pad_to_multiple=True))
    assert not tail_pad_split(_pack(pad_to_multiple=0))
    assert not tail_pad_split(_pack(pad_to_multiple=4.0))
    assert tail_pad_split(_pack(pad_to_multiple=8))
    assert not tail_pad_split(_pack([[1]], [[2], [3]], pad_to_multiple=8))


def test_empty_samples() -> None:
    assert has_empty_sample(_pack()) and some_samples_empty(_pack())
    assert not all_samples_empty(_pack())
    assert all_samples_empty(_pack([[], []], [[], []])) and has_empty_sample(_pack([[]], [[]]))
    assert not some_samples_empty(_pack([[]], [[]]))
    assert not has_empty_sample(_pack([[1]], [[]])) and not some_samples_empty(_pack([[1]], [[]]))
    assert not all_samples_empty(_pack([], []))
    assert not has_empty_sample(_pack([[]], [[], []]))
    assert not has_empty_sample(_pack([[1]], [[2]])) and not all_samples_empty(_pack([[1]], [[2]]))


def test_bad_inputs_start_from_what_the_collators_take() -> None:
    assert trl._starts_from_taken(BadCase(_pack([[1]], [[2]]), ValueError))
    assert not trl._starts_from_taken(BadCase(_pack(), ValueError))
    assert trl._starts_from_packable(BadCase(_pack(), ValueError))
    assert not trl._starts_from_packable(BadCase(_pack([[]], [[]]), ValueError))
    assert not all_samples_empty(_pack([[]], [[], []]))


@pytest.mark.parametrize("value, bad", [
    (0, False), (5, False), (-1, False), (0.5, True), (True, True), (2**63, True),
    (None, False), ("0", False),
])
def test_a_bad_pad_token_id(value, bad: bool) -> None:
    assert bad_pad_token_id(_pack(pad_token_id=value)) is bad


@pytest.mark.parametrize("value, bad", [
    (1, False), (4, False), (0, True), (-2, True), (True, True), (False, True),
    (2.0, True), (4.0, False), (0.0, False), ("2", False), (None, False),
])
def test_a_bad_multiple(value, bad: bool) -> None:
    assert bad_multiple(_pack(pad_to_multiple=value)) is bad  # 6 tokens


def test_a_bad_multiple_needs_samples() -> None:
    assert not bad_multiple(_pack([[1]], [[2], [3]], pad_to_multiple=0))


def test_no_samples_and_empty_prompts() -> None:
    assert empty_batch(_pack([], [])) and not empty_batch(_pack())
    assert not empty_batch(_pack([], [[1]]))
    assert empty_prompt_with_response(_pack([[1], []], [[2], [3]]))
    assert not empty_prompt_with_response(_pack()) and not empty_prompt_with_response(
        _pack([[]], [[1], [2]]))


def test_non_int_tokens() -> None:
    assert non_int_token(_pack([[1.0]], [[2]])) and non_int_token(_pack([[1]], [[True]]))
    assert not non_int_token(_pack()) and not non_int_token(_pack([[1.0]], [[2], [3]]))


# --------------------------------------------------------------------------- GRPO's pad


class PadRecorder:
    def __init__(self) -> None:
        self.calls: list = []

    def __call__(self, tensors, padding_value=0, padding_side="right"):
        self.calls.append(([t.tolist() for t in tensors], padding_value, padding_side))
        return trl_pad(tensors, padding_value=padding_value, padding_side=padding_side)


GRPO_PROMPTS, GRPO_RESPONSES = [[1, 2], [3]], [[4], [5, 6, 7]]
TOOL_MASKS, LOGPROBS = [[1.0], [1.0, 0.0, 1.0]], [[-0.5], [-1.0, None, -2.0]]


def test_grpos_composition_is_the_contracts_two_segment_batch() -> None:
    pad = PadRecorder()
    out = grpo_pad_adapter(pad)(GRPO_PROMPTS, GRPO_RESPONSES, pad_token_id=9,
                                loss_masks=TOOL_MASKS, logprobs=LOGPROBS, layout="two_segment")
    want = build_rl_batch(GRPO_PROMPTS, GRPO_RESPONSES, pad_token_id=9, loss_masks=TOOL_MASKS,
                          logprobs=[[-0.5], [-1.0, math.nan, -2.0]], layout="two_segment")
    for key in ("input_ids", "attention_mask", "response_mask", "loss_mask"):
        assert torch.equal(out[key], want[key].to(out[key].dtype)), key
    assert out["loss_mask"].dtype == torch.float32
    assert torch.allclose(out["rollout_logprobs"], want["rollout_logprobs"], equal_nan=True)
    assert out.get_non_tensor("max_response_length") == 3
    assert out.batch_size == torch.Size([2])
    assert pad.calls[:4] == [([[1, 2], [3]], 9, "left"), ([[1, 1], [1]], 0, "left"),
                             ([[4], [5, 6, 7]], 9, "right"), ([[1], [1, 1, 1]], 0, "right")]
    (logprobs, value, side), tool = pad.calls[4:]
    assert (value, side, logprobs[0]) == (0.0, "right", [-0.5]) and math.isnan(logprobs[1][1])
    assert tool == ([[1.0], [1.0, 0.0, 1.0]], 1, "right")


def test_without_tool_masks_the_loss_mask_is_the_completion_mask() -> None:
    out = grpo_pad_adapter(trl_pad)(GRPO_PROMPTS, GRPO_RESPONSES, pad_token_id=0,
                                    layout="two_segment")
    assert out["loss_mask"].tolist() == [[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    assert out["loss_mask"].dtype == torch.float32
    assert "rollout_logprobs" not in out.keys()


@pytest.mark.parametrize("kwargs", [{"layout": "left"}, {"rewards": [1.0, 2.0]},
                                    {"device": "cpu"}])
def test_grpo_builds_two_segment_batches_only(kwargs) -> None:
    kwargs = {"layout": "two_segment", **kwargs}
    with pytest.raises(NotImplementedError,
                       match=r"^GRPO pads prompts left and completions right \(two_segment\); "
                             "rewards are per sample, not laid out$"):
        grpo_pad_adapter(trl_pad)(GRPO_PROMPTS, GRPO_RESPONSES, pad_token_id=0, **kwargs)


def test_grpos_masks_are_int64_whatever_the_ids() -> None:
    out = grpo_pad_adapter(trl_pad)([[1.0, 2.0]], [[3.0]], pad_token_id=0, layout="two_segment")
    assert out["attention_mask"].dtype == out["response_mask"].dtype == torch.int64


def test_the_left_layout_is_the_default_and_refused() -> None:
    with pytest.raises(NotImplementedError):
        grpo_pad_adapter(trl_pad)(GRPO_PROMPTS, GRPO_RESPONSES, pad_token_id=0)


# --------------------------------------------------------------------------- GRPO predicates


def _grpo(prompts=GRPO_PROMPTS, responses=GRPO_RESPONSES, **kwargs) -> Case:
    return Case((prompts, responses), {"pad_token_id": 0, "layout": "two_segment", **kwargs})


def test_the_grpo_domain() -> None:
    assert grpo_domain(_grpo()) and grpo_domain(_grpo(loss_masks=TOOL_MASKS, logprobs=LOGPROBS))
    assert not grpo_domain(_grpo(layout="left"))
    assert not grpo_domain(_grpo(rewards=[1.0, 1.0]))
    assert not grpo_domain(_grpo(device="cpu"))
    assert not grpo_domain(_grpo([[1]], [[2], [3]]))  # counts differ
    assert not grpo_domain(_grpo(torch.tensor([[1]]), [[2]]))
    assert not grpo_domain(_grpo([[None]], [[2]]))
    assert not grpo_domain(_grpo([[[1]]], [[2]]))  # a 2-D row
    assert not grpo_domain(_grpo(loss_masks=TOOL_MASKS[:1]))
    assert not grpo_domain(_grpo(loss_masks=(TOOL_MASKS[0], TOOL_MASKS[1])))
    assert not grpo_domain(_grpo(logprobs=[[-0.5], ["x", 1.0, 1.0]]))
    assert not grpo_domain(_grpo(logprobs=[-0.5, [-1.0]]))
    assert not grpo_domain(_grpo(loss_masks=[[1.0, 1.0], [1.0, 0.0]]))  # 2 columns against 3
    assert grpo_domain(_grpo(loss_masks=[[1.0], [1.0]]))  # one column broadcasts
    assert grpo_domain(_grpo(loss_masks=[[1.0], [[1.0]]]))  # pad raises: TRL's exception
    assert grpo_domain(_grpo(loss_masks=[1.0, 1.0]))  # 0-d rows: pad raises
    assert not grpo_domain(_grpo(loss_masks=[[[1.0, 1.0]], [[1.0, 1.0]]]))
    assert grpo_domain(_grpo(loss_masks=[[[1.0]], [[1.0]]]))
    assert not grpo_domain(_grpo(loss_masks=[[[1.0]] * 3] * 2))  # (2, 3, 1) against (2, 3)
    assert grpo_domain(_grpo([], []))
    assert grpo_domain(_grpo([[1]], [[2]], loss_masks=[[1.0]]))  # one row
    assert grpo_domain(_grpo(loss_masks=[[[1.0, 1.0]], [1.0]]))  # pad raises: TRL's
    no_layout = Case((GRPO_PROMPTS, GRPO_RESPONSES), {"pad_token_id": 0})
    assert not grpo_domain(no_layout)  # the contract's default layout: left


def test_the_first_row_empty() -> None:
    assert first_row_empty(_grpo([[], [1]], [[2], [3]]))
    assert first_row_empty(_grpo([[1], [1]], [[], [3]]))
    assert not first_row_empty(_grpo([[1], []], [[2], []]))
    assert not first_row_empty(_grpo([], []))
    assert not first_row_empty(_grpo(torch.zeros(1, 0), [[]]))


def test_the_last_row_empty() -> None:
    """The row property:permutation puts first; grpo_pad's valid inputs leave it out unless the
    first row is empty too."""
    assert last_row_empty(_grpo([[1], []], [[2], [3]]))
    assert last_row_empty(_grpo([[1], [1]], [[2], []]))
    assert not last_row_empty(_grpo([[], [1]], [[], [3]]))
    assert not last_row_empty(_grpo([[1], [1], [1]], [[2], [], [3]]))
    assert not last_row_empty(_grpo([], []))


def test_a_per_token_length_mismatch() -> None:
    assert grpo_length_mismatch(_grpo(loss_masks=[[1.0, 1.0], [1.0, 1.0, 1.0]]))
    assert grpo_length_mismatch(_grpo(logprobs=[[-1.0], [-1.0]]))
    assert grpo_length_mismatch(_grpo(logprobs=([-1.0], [-1.0])))
    assert not grpo_length_mismatch(_grpo(loss_masks=TOOL_MASKS, logprobs=LOGPROBS))
    assert not grpo_length_mismatch(_grpo(loss_masks=[[[1.0, 1.0]], [[1.0]]]))  # nested
    assert not grpo_length_mismatch(_grpo(loss_masks=[torch.ones(2, 2), torch.ones(3, 1)]))
    assert grpo_length_mismatch(_grpo(loss_masks=[torch.ones(2), torch.ones(3)]))
    assert not grpo_length_mismatch(_grpo(loss_masks=[1.0, torch.tensor(1.0)]))
    assert not grpo_length_mismatch(_grpo(loss_masks=torch.ones(2, 3)))
    assert not grpo_length_mismatch(_grpo(torch.tensor([[1]]), [[2]], loss_masks=[[1.0, 1.0]]))


def test_a_none_logprob() -> None:
    assert grpo_none_logprob(_grpo(logprobs=LOGPROBS))
    assert grpo_none_logprob(_grpo(logprobs=[(None,), [1.0, 1.0, 1.0]]))
    assert not grpo_none_logprob(_grpo(logprobs=[[-0.5], [-1.0, -1.0, -2.0]]))
    assert not grpo_none_logprob(_grpo(logprobs=[None, None]))
    assert not grpo_none_logprob(_grpo(loss_masks=[[None], [1.0, 1.0, 1.0]]))
    assert not grpo_none_logprob(_grpo(torch.tensor([[1]]), [[2]], logprobs=[[None]]))


def test_every_row_nested() -> None:
    assert grpo_all_rows_nested(_grpo(loss_masks=[[[1.0]], [[1.0]]]))
    assert grpo_all_rows_nested(_grpo(logprobs=[torch.ones(1, 1), torch.ones(3, 1)]))
    assert not grpo_all_rows_nested(_grpo(loss_masks=[[[1.0]], [1.0]]))
    assert not grpo_all_rows_nested(_grpo(loss_masks=TOOL_MASKS))
    assert not grpo_all_rows_nested(_grpo(loss_masks=[]))
    assert not grpo_all_rows_nested(_grpo(loss_masks=[torch.ones(1), torch.ones(3)]))
    assert not grpo_all_rows_nested(_grpo(torch.tensor([[1]]), [[2]], loss_masks=[[[1.0]]]))
    assert grpo_all_rows_nested(_grpo(loss_masks=TOOL_MASKS, logprobs=[[[1.0]], [[1.0]]]))


def test_a_float_token() -> None:
    assert grpo_float_token(_grpo([[1.0]], [[2]])) and grpo_float_token(_grpo([[1]], [[2.5]]))
    assert not grpo_float_token(_grpo()) and not grpo_float_token(_grpo(torch.ones(1, 1), [[1.0]]))


# --------------------------------------------------------------------------- BFD packing


class Bars:
    """`datasets`' progress-bar switch, as the adapter reads and sets it."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.during = enabled, []

    def module(self) -> types.ModuleType:
        module = types.ModuleType("datasets")
        module.Dataset = Dataset
        module.is_progress_bar_enabled = lambda: self.enabled
        module.disable_progress_bars = lambda: setattr(self, "enabled", False)
        module.enable_progress_bars = lambda: setattr(self, "enabled", True)
        return module


@pytest.mark.parametrize("enabled", [True, False])
def test_bfd_packs_samples_into_the_datasets_rows(monkeypatch, enabled: bool) -> None:
    bars, seen = Bars(enabled), []
    monkeypatch.setitem(sys.modules, "datasets", bars.module())

    def pack_dataset(dataset, seq_length, strategy):
        seen.append((dataset.columns, seq_length, strategy, bars.enabled))
        return trl_pack_dataset(dataset, seq_length, strategy=strategy)

    lengths = [3, 1, 2, 4]
    assert bfd_bins_adapter(pack_dataset)(lengths, 5) == ffd_bins(lengths, 5)
    assert seen == [({"input_ids": [[0, 0, 0], [1], [2, 2], [3, 3, 3, 3]]}, 5, "bfd", False)]
    assert bars.enabled is enabled


def test_bfd_puts_the_bars_back_when_packing_raises(monkeypatch) -> None:
    bars = Bars(True)
    monkeypatch.setitem(sys.modules, "datasets", bars.module())

    def pack_dataset(dataset, seq_length, strategy):
        raise KeyError

    with pytest.raises(KeyError):
        bfd_bins_adapter(pack_dataset)([1], 1)
    assert bars.enabled


def test_bfd_bins_are_the_rows_segments_first_tokens(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", Bars(False).module())

    def pack_dataset(dataset, seq_length, strategy):
        return Dataset({"input_ids": [[7, 7, 5, 9, 9, 9]], "seq_lengths": [[2, 1, 3]]})

    assert bfd_bins_adapter(pack_dataset)([1], 1) == [[7, 5, 9]]


@pytest.mark.parametrize("kwargs", [{"min_bins": 2}, {"bin_multiple": 2}])
def test_bfd_has_no_bin_count_adjustment(kwargs) -> None:
    with pytest.raises(NotImplementedError, match="^BFD packing has no bin-count adjustment$"):
        bfd_bins_adapter(trl_pack_dataset)([1], 1, **kwargs)


def _bins(lengths, capacity, **kwargs) -> Case:
    return Case((lengths, capacity), kwargs)


def test_the_bfd_domain() -> None:
    assert bfd_domain(_bins([1, 2], 3)) and bfd_domain(_bins([1], 3, min_bins=1, bin_multiple=1))
    assert not bfd_domain(_bins([1, 2], 3, min_bins=2))
    assert not bfd_domain(_bins([1, 2], 3, bin_multiple=2))
    assert not bfd_domain(_bins([], 3)) and not bfd_domain(_bins((1,), 3))
    assert not bfd_domain(_bins([1, True], 3)) and not bfd_domain(_bins([1], 3.0))
    assert not bfd_domain(_bins([1], True))


def test_bfd_predicates() -> None:
    assert length_over_capacity(_bins([1, 4], 3)) and not length_over_capacity(_bins([3], 3))
    assert not length_over_capacity(_bins([4], 0)) and length_over_capacity(_bins([2], 1))
    assert non_positive_length(_bins([0, 1], 3)) and non_positive_length(_bins([-1], 1))
    assert not non_positive_length(_bins([1], 1)) and not non_positive_length(_bins([0], 0))
    assert capacity_zero(_bins([1], 0)) and not capacity_zero(_bins([1], 1))
    assert not capacity_zero(_bins([1], -1)) and not capacity_zero(_bins([], 0))
    assert not length_over_capacity(_bins([4.0], 3)) and not non_positive_length(_bins([0.0], 3))


def test_the_valid_cases_drop_the_bin_count_adjustment() -> None:
    case = trl._without_adjustment(Case(([1, 2], 3), {"min_bins": 2}, "label"))
    assert (case.args, dict(case.kwargs), case.label) == (([1, 2], 3), {}, "label")
