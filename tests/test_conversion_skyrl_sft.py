"""The conversion code of `batchproof.adapters.skyrl_sft` on stand-ins of SkyRL's SFT functions
(issue 39: the killers of `mutate --mutmut --harness adapters/skyrl_sft`).

SkyRL is not installed here: the wraps are handed the liveness stand-ins
(`tests/liveness_stand_ins.py`: `collate_sft_batch`, `DefaultCollator`, `PackedDataCollator`,
`make_seq_packer` over the contract) or small recording fakes, and asserted on what the module
docstring promises: each SkyRL function is called as its trainer calls it, every compared field
is read off SkyRL's output, and each domain and known-divergence predicate holds on exactly the
inputs its doc names.
"""

from __future__ import annotations

import math
import sys
import typing

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from liveness_stand_ins import (
    SeqPacker,
    SkyrlDefaultCollator,
    SkyrlPackedDataCollator,
    TensorList,
    TrainingBatch,
    skyrl_collate_sft_batch,
    skyrl_make_seq_packer,
)
from tensordict import TensorDict

from batchproof import adapters
from batchproof.adapters import FrameworkMissing
from batchproof.adapters import skyrl_sft as m
from batchproof.ops import sft as ops
from batchproof.reference import sft as oracle
from batchproof.registry import BadCase, Case


def ex(ids, n, loss, att=None, **more) -> dict:
    """One SFT example; `att=None` leaves attention_mask out."""
    out = {"input_ids": ids, "num_actions": n, "loss_mask": loss, **more}
    if att is not None:
        out["attention_mask"] = att
    return out


def C(examples, **kwargs) -> Case:
    return Case((examples,), kwargs)


ONE = ex([1, 2, 3], 2, [1, 1], [1, 1, 1])
TWO = ex([4, 5], 1, [1], [1, 1])

# --------------------------------------------------------------------------- importing SkyRL


def test_import_skyrl_returns_an_imported_module_as_it_is(monkeypatch) -> None:
    """A module already in sys.modules is returned without importing it again."""
    marker = type(sys)("batchproof_fake_skyrl_module")
    monkeypatch.setitem(sys.modules, "batchproof_fake_skyrl_module", marker)
    assert m.import_skyrl("batchproof_fake_skyrl_module") is marker


def test_import_skyrl_imports_inside_the_typed_dict_patch(tmp_path, monkeypatch) -> None:
    """A fresh import runs with typing.TypedDict patched (on < 3.12) and returns the module."""
    (tmp_path / "batchproof_sft_probe.py").write_text(
        "import typing\nSEEN = typing.TypedDict\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "batchproof_sft_probe", raising=False)
    module = m.import_skyrl("batchproof_sft_probe")
    assert module.__name__ == "batchproof_sft_probe"
    assert sys.modules["batchproof_sft_probe"] is module
    if sys.version_info < (3, 12):
        import typing_extensions

        assert module.SEEN is typing_extensions.TypedDict
    assert typing.TypedDict is not module.SEEN or sys.version_info >= (3, 12)


def test_a_failing_import_is_framework_missing_naming_the_error(tmp_path, monkeypatch) -> None:
    """Any failure of the import chain is FrameworkMissing with the module, the error's type
    and text, and the install hint, chained to the error."""
    (tmp_path / "batchproof_sft_broken.py").write_text("raise RuntimeError('chain broke')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "batchproof_sft_broken", raising=False)
    with pytest.raises(FrameworkMissing) as info:
        m.import_skyrl("batchproof_sft_broken")
    assert str(info.value) == (
        "cannot import batchproof_sft_broken: RuntimeError: chain broke (is skyrl installed? "
        "docs/frameworks-skyrl-sft.md says how to install it beside batchproof)")
    assert isinstance(info.value.__cause__, RuntimeError)


def test_the_tokenizer_carries_the_pad_id() -> None:
    """The stand-in tokenizer's pad_token_id is the contract's pad_token_id."""
    assert m._tokenizer(7).pad_token_id == 7


# --------------------------------------------------------------------------- wrappers


def test_count_is_len_or_zero() -> None:
    """_count is len(examples), 0 for what has no len (an int, a 0-d TensorDict)."""
    assert m._count([1, 2, 3]) == 3
    assert m._count([]) == 0
    assert m._count(5) == 0
    assert m._count(TensorDict({}, batch_size=[])) == 0


def _batch(sequences, attention, loss, response_length, **extra) -> TrainingBatch:
    return TrainingBatch({"sequences": sequences, "attention_mask": attention,
                          "loss_mask": loss, **extra}, {"response_length": response_length})


def test_collated_renames_sequences_and_casts_the_loss_mask() -> None:
    """SkyRL's batch becomes input_ids / attention_mask / float32 loss_mask, rows as batch
    size, response_length as a non-tensor."""
    seq = torch.tensor([[0, 1, 2], [3, 4, 5]])
    att = torch.tensor([[0, 1, 1], [1, 1, 1]])
    loss = torch.tensor([[0, 1], [1, 3]], dtype=torch.int64)
    td = m._collated(_batch(seq, att, loss, 2))
    assert td.batch_size == torch.Size([2])
    assert set(td.keys()) == {"input_ids", "attention_mask", "loss_mask", "response_length"}
    assert td["input_ids"] is seq and td["attention_mask"] is att
    assert td["loss_mask"].dtype == torch.float32
    assert td["loss_mask"].tolist() == [[0.0, 1.0], [1.0, 3.0]]
    assert td.get_non_tensor("response_length") == 2


BATCH = _batch(torch.tensor([[1, 2]]), torch.tensor([[1, 1]]), torch.tensor([[1]]), 1)


def test_collate_adapter_calls_collate_sft_batch_with_a_tokenizer() -> None:
    """collate_sft_batch(examples, tokenizer with the pad id) is what the adapter returns."""
    calls = []

    def collate_sft_batch(examples, tokenizer):
        calls.append((examples, tokenizer.pad_token_id))
        return BATCH

    examples = [ONE]
    out = m.collate_adapter(collate_sft_batch)(examples, pad_token_id=5)
    assert calls == [(examples, 5)] and calls[0][0] is examples
    assert out["input_ids"].tolist() == [[1, 2]] and out["loss_mask"].dtype == torch.float32


@pytest.mark.parametrize("kwargs", [{"normalize": True}, {"normalize": 0},
                                    {"device": "cpu"}])
def test_collate_adapter_refuses_normalize_and_devices(kwargs) -> None:
    """collate_sft_batch neither normalizes nor moves: anything but normalize=False (by
    identity) or a device raises NotImplementedError."""
    with pytest.raises(NotImplementedError, match="^collate_sft_batch neither normalizes nor "
                                                  "moves$"):
        m.collate_adapter(skyrl_collate_sft_batch)([ONE], pad_token_id=0, **kwargs)


def test_collate_adapter_on_the_stand_in_is_the_contract() -> None:
    """Through the stand-in the adapter's output is the contract's collate_sft."""
    got = m.collate_adapter(skyrl_collate_sft_batch)([ONE, TWO], pad_token_id=9)
    want = oracle.collate_sft([ONE, TWO], pad_token_id=9)
    for key in ("input_ids", "attention_mask", "loss_mask"):
        assert torch.equal(got[key], want[key]), key
    assert got.get_non_tensor("response_length") == want.get_non_tensor("response_length")


def test_default_collator_adapter_builds_and_calls_the_collator() -> None:
    """DefaultCollator(tokenizer, micro_train_batch_size_per_gpu=1)(examples, batch_size=N)."""
    built, called = [], []

    class Collator:
        def __init__(self, tokenizer, **kwargs) -> None:
            built.append((tokenizer.pad_token_id, kwargs))

        def __call__(self, examples, **kwargs):
            called.append((examples, kwargs))
            return BATCH

    examples = [ONE, TWO]
    out = m.default_collator_adapter(Collator)(examples, pad_token_id=3, normalize=True)
    assert built == [(3, {"micro_train_batch_size_per_gpu": 1})]
    assert called == [(examples, {"batch_size": 2})] and called[0][0] is examples
    assert out["input_ids"].tolist() == [[1, 2]]


@pytest.mark.parametrize("kwargs", [{}, {"normalize": False}, {"normalize": 1},
                                    {"normalize": True, "device": "cpu"}])
def test_default_collator_adapter_refuses_other_calls(kwargs) -> None:
    """DefaultCollator always normalizes on the CPU: normalize other than True (by identity)
    or a device raises NotImplementedError."""
    with pytest.raises(NotImplementedError,
                       match="^DefaultCollator always normalizes, on the CPU$"):
        m.default_collator_adapter(SkyrlDefaultCollator)([ONE], pad_token_id=0, **kwargs)


def test_default_collator_on_the_stand_in_is_the_contract() -> None:
    """Through the stand-in the adapter's output is the contract's normalized collate."""
    got = m.default_collator_adapter(SkyrlDefaultCollator)([ONE, TWO], pad_token_id=0,
                                                           normalize=True)
    want = oracle.collate_sft([ONE, TWO], pad_token_id=0, normalize=True)
    assert torch.equal(got["loss_mask"], want["loss_mask"])


def test_jagged_joins_rows_as_int64() -> None:
    """_jagged: one jagged int64 tensor whose i-th sequence is row i, flattened."""
    rows = [torch.tensor([3, 2], dtype=torch.int32), torch.tensor([[5]]), torch.tensor([1, 1, 4])]
    out = m._jagged(rows)
    assert out.is_nested and out.values().dtype == torch.int64
    assert out.offsets().tolist() == [0, 2, 3, 6]
    assert out.values().tolist() == [3, 2, 5, 1, 1, 4]


def _packed_batch() -> TrainingBatch:
    return _batch(torch.tensor([[1, 2, 3]]), torch.tensor([[1, 1, 1]]),
                  torch.tensor([[0.0, 0.5]]), 2,
                  sub_seq_lengths=TensorList([torch.tensor([2, 1])]))


@pytest.mark.parametrize("takes_recipe", [False, True])
def test_packed_adapter_builds_the_collator_as_the_trainer_does(takes_recipe) -> None:
    """PackedDataCollator(tokenizer, capacity, tp, pp, cp, dp, N, 1, fp8[, recipe])(examples,
    batch_size=N); its output read field by field, sub_seq_lengths jagged."""
    built, called = [], []

    class Collator:
        def __init__(self, tokenizer, **kwargs) -> None:
            built.append((tokenizer.pad_token_id, kwargs))

        def __call__(self, examples, **kwargs):
            called.append((examples, kwargs))
            return _packed_batch()

    examples = [ONE, TWO]
    out = m.packed_adapter(Collator, takes_recipe=takes_recipe)(
        examples, pad_token_id=4, capacity=8, dp_size=2, tp_size=3, pp_size=5, cp_size=6,
        fp8=True, fp8_recipe="mxfp8")
    want = {"max_tokens_per_microbatch": 8, "tp_size": 3, "pp_size": 5, "cp_size": 6,
            "dp_size": 2, "batch_size": 2, "micro_train_batch_size_per_gpu": 1,
            "fp8_enabled": True}
    if takes_recipe:
        want["fp8_recipe"] = "mxfp8"
    assert built == [(4, want)]
    assert called == [(examples, {"batch_size": 2})] and called[0][0] is examples
    assert out.batch_size == torch.Size([1])
    assert set(out.keys()) == {"input_ids", "attention_mask", "loss_mask", "sub_seq_lengths",
                               "response_length"}
    assert out["input_ids"].tolist() == [[1, 2, 3]]
    assert out["attention_mask"].tolist() == [[1, 1, 1]]
    assert out["loss_mask"].tolist() == [[0.0, 0.5]]
    assert out["sub_seq_lengths"].values().tolist() == [2, 1]
    assert out.get_non_tensor("response_length") == 2


def test_packed_adapter_defaults_are_the_contracts() -> None:
    """Sizes default to 1, fp8 off, recipe 'tensorwise' (0.3.0 takes no recipe at all)."""
    built = []

    class Collator:
        def __init__(self, tokenizer, **kwargs) -> None:
            built.append(kwargs)

        def __call__(self, examples, **kwargs):
            return _packed_batch()

    m.packed_adapter(Collator, takes_recipe=True)([ONE], pad_token_id=0, capacity=4)
    m.packed_adapter(Collator)([ONE], pad_token_id=0, capacity=4)
    assert built[0] == {"max_tokens_per_microbatch": 4, "tp_size": 1, "pp_size": 1,
                        "cp_size": 1, "dp_size": 1, "batch_size": 1,
                        "micro_train_batch_size_per_gpu": 1, "fp8_enabled": False,
                        "fp8_recipe": "tensorwise"}
    assert "fp8_recipe" not in built[1]


def test_packed_adapter_refuses_a_device() -> None:
    """PackedDataCollator packs on the CPU: a device raises NotImplementedError."""
    with pytest.raises(NotImplementedError, match="^PackedDataCollator packs on the CPU$"):
        m.packed_adapter(SkyrlPackedDataCollator)([ONE], pad_token_id=0, capacity=4,
                                                  device="cpu")


def test_packed_adapter_on_the_stand_in_is_the_contract() -> None:
    """Through the stand-in every field but the worker-derived ones is the contract's."""
    examples = [ONE, TWO, ex([7], 1, [1])]
    got = m.packed_adapter(SkyrlPackedDataCollator, takes_recipe=True)(
        examples, pad_token_id=0, capacity=4, dp_size=2)
    want = oracle.pack_sft(examples, pad_token_id=0, capacity=4, dp_size=2)
    for key in ("input_ids", "attention_mask", "loss_mask"):
        assert torch.equal(got[key], want[key]), key
    assert got["sub_seq_lengths"].values().tolist() == want["sub_seq_lengths"].values().tolist()


def test_ffd_adapter_asks_for_first_fit_decreasing() -> None:
    """make_seq_packer('first_fit_decreasing', capacity, min_bins, bin_multiple).pack(lengths)."""
    made = []

    def make_seq_packer(name, **kwargs):
        made.append((name, kwargs))
        return SeqPacker(kwargs["bin_capacity"], kwargs["min_bin_count"],
                         kwargs["bin_count_multiple"])

    assert m.ffd_adapter(make_seq_packer)([3, 2, 2], 4, min_bins=2, bin_multiple=2) == (
        oracle.ffd_bins([3, 2, 2], 4, min_bins=2, bin_multiple=2))
    m.ffd_adapter(make_seq_packer)([1], 4)
    assert made == [("first_fit_decreasing", {"bin_capacity": 4, "min_bin_count": 2,
                                              "bin_count_multiple": 2}),
                    ("first_fit_decreasing", {"bin_capacity": 4, "min_bin_count": 1,
                                              "bin_count_multiple": 1})]
    assert m.ffd_adapter(skyrl_make_seq_packer)([5, 1], 6) == [[0, 1]]


# --------------------------------------------------------------------------- reading a case


def test_listed_is_a_list_argument_only() -> None:
    """_listed: the examples list itself, None for a TensorDict batch or no argument."""
    examples = [ONE]
    assert m._listed(C(examples)) is examples
    assert m._listed(Case((), {})) is None
    assert m._listed(C(ops.jagged_batch([ONE]))) is None
    assert m._listed(C((ONE,))) is None


def _td_batch(**fields) -> TensorDict:
    return TensorDict(fields, batch_size=[2])


def test_batch_rows_are_the_rows_skyrl_iterates() -> None:
    """Each tensor field's row i, non-tensors left out, an integer 0-d num_actions as int."""
    td = _td_batch(input_ids=torch.tensor([[1, 2], [3, 4]]), num_actions=torch.tensor([1, 2]),
                   loss_mask=torch.tensor([[1.0, 0.0], [0.5, 1.0]]))
    td.set_non_tensor("note", "x")
    rows = m._batch_rows(td)
    assert len(rows) == 2 and set(rows[0]) == {"input_ids", "num_actions", "loss_mask"}
    assert rows[0]["input_ids"].tolist() == [1, 2] and rows[1]["input_ids"].tolist() == [3, 4]
    assert rows[0]["num_actions"] == 1 and type(rows[1]["num_actions"]) is int
    assert rows[1]["loss_mask"].tolist() == [0.5, 1.0]


@pytest.mark.parametrize("actions", [torch.tensor([1.0, 2.0]), torch.tensor([True, False]),
                                     torch.tensor([1 + 0j, 2 + 0j]),
                                     torch.tensor([[1], [2]])])
def test_batch_rows_keep_a_non_integer_num_actions_a_tensor(actions) -> None:
    """A float, bool, complex or 1-D num_actions row stays a tensor."""
    rows = m._batch_rows(_td_batch(num_actions=actions))
    assert all(isinstance(row["num_actions"], torch.Tensor) for row in rows)


def test_batch_rows_of_other_batches_are_none() -> None:
    """None for a batch without exactly one batch dimension, or one that cannot be read."""
    assert m._batch_rows(TensorDict({"a": torch.zeros(2, 2)}, batch_size=[2, 2])) is None
    assert m._batch_rows(TensorDict({}, batch_size=[])) is None
    assert m._batch_rows(object()) is None
    assert m._batch_rows(TensorDict({}, batch_size=[0])) == []


def test_examples_reads_lists_and_batches_only() -> None:
    """_examples: a list as given, a TensorDict as its rows, None for anything else."""
    examples = [ONE, 3]
    assert m._examples(C(examples)) is examples
    rows = m._examples(C(ops.jagged_batch([ONE, TWO])))
    assert [r["input_ids"].tolist() for r in rows] == [[1, 2, 3], [4, 5]]
    assert m._examples(C(5)) is None and m._examples(C("ab")) is None
    assert m._examples(Case((), {})) is None
    assert m._mappings(C([ONE, 3, "x", TWO])) == [ONE, TWO]
    assert m._mappings(C(5)) == []


def test_is_int_and_is_real() -> None:
    """_is_int takes any Integral (bools too); _is_real any Real but bools."""
    assert m._is_int(3) and m._is_int(True) and not m._is_int(3.0) and not m._is_int("3")
    assert m._is_real(3) and m._is_real(0.5) and not m._is_real(True)
    assert not m._is_real(1j) and not m._is_real("1")


def test_values_reads_lists_and_1d_tensors() -> None:
    """_values: a list or tuple, a 1-D tensor's values; [] for anything else."""
    assert m._values({"k": (1, 2)}, "k") == [1, 2] and m._values({"k": [3]}, "k") == [3]
    assert m._values({"k": torch.tensor([1.5, 2.0])}, "k") == [1.5, 2.0]
    assert m._values({"k": torch.tensor([[1, 2]])}, "k") == []
    assert m._values({"k": torch.tensor(1)}, "k") == []
    assert m._values({"k": torch.zeros(2, device="meta")}, "k") == []
    assert m._values({"k": ops.jagged_batch([ONE, TWO])["input_ids"]}, "k") == []
    assert m._values({"k": "12"}, "k") == [] and m._values({}, "k") == []


def test_length_is_len_or_none() -> None:
    """_length: len, None for what has none."""
    assert m._length([1, 2]) == 2 and m._length("abc") == 3 and m._length(3) is None


@pytest.mark.parametrize("value, exact", [
    (3, True), (True, True), (2**70, True), ("x", True), (None, True), (1j, True),
    (1.0, True), (0.0, True), (-5.0, True), (-(2.0**63), True), (2.0**62, True),
    (0.5, False), (-0.0, False), (float("nan"), False), (float("inf"), False),
    (float("-inf"), False), (2.0**63, False), (-(2.0**63) - 2048.0, False), (1e300, False)])
def test_exact_in_int64(value, exact) -> None:
    """An int64 holds integers, non-numbers (not this divergence) and finite integral floats
    in [-2**63, 2**63) but -0.0."""
    assert m._exact_in_int64(value) is exact


def test_full_mask_is_what_skyrls_packer_builds() -> None:
    """[0] * (s - num_actions) + loss_mask, [] when s or num_actions cannot be read."""
    assert m._full_mask(ex([1, 2, 3], 2, [1, 0.5])) == [0, 1, 0.5]
    assert m._full_mask(ex([1, 2, 3], 3, [1, 1, 1])) == [1, 1, 1]
    assert m._full_mask(ex([1, 2], 3, [1, 1, 1])) == [1, 1, 1]  # clipped at no prefix
    assert m._full_mask(ex([1, 2], True, [5])) == [0, 5]  # a bool counts as 0/1
    assert m._full_mask(ex(7, 1, [1])) == [] and m._full_mask(ex([1], 1.0, [1])) == []
    assert m._full_mask({"input_ids": [1, 2]}) == []
    assert m._full_mask(ex(torch.tensor([1, 2]), 1, torch.tensor([0.5]))) == [0, 0.5]


# --------------------------------------------------------------------------- input conditions

NO_ATT = ex([1, 2], 1, [1])
T2 = torch.tensor([[1, 2]])


@pytest.mark.parametrize("examples, lacks", [
    ([NO_ATT], True), ([ex((1, 2), 1, [1])], True), ([dict(ONE, attention_mask=None)], True),
    ([ONE], False), ([ONE, NO_ATT], True), ([ex(torch.tensor([1, 2]), 1, [1])], False),
    ([ex(torch.tensor([1, 2]), 1, [1]), NO_ATT], False), ([], False), ([3], False)])
def test_lacks_attention_mask(examples, lacks) -> None:
    """0.3.0's attention_mask_required: an absent / None mask, every input_ids a list."""
    assert m.lacks_attention_mask(C(examples)) is lacks


@pytest.mark.parametrize("loss, rounds", [
    ([1, 1], False), ([0.5, 1], True), ([1.0, -0.0], True), (torch.tensor([1.0, 0.25]), True),
    (torch.tensor([1.0, 2.0]), False)])
def test_loss_not_int64(loss, rounds) -> None:
    """A loss value an int64 mask cannot hold exactly, in a list or a tensor."""
    assert m.loss_not_int64(C([ex([1, 2], 2, loss)])) is rounds


def _weights(*loss) -> Case:
    return C([ex(list(range(len(w))), len(w), list(w)) for w in loss])


@pytest.mark.parametrize("case, differs", [
    (_weights([1, 1]), False), (_weights([1, 2]), False), (_weights([0.0, 0.0]), False),
    (_weights([3, 4]), True), (_weights([3], [3, 1]), True),  # the roundings part
    (_weights([0.5, 1]), True), (_weights([-0.0]), True),  # truncated: 0.0, not -0.0
    (_weights([float("nan")]), True), (_weights([float("inf")]), True),
    (_weights([2.0**63]), True), (_weights([-(2.0**63)]), False),
    (_weights([1], []), False), (_weights([]), False), (C([]), False),
    (_weights(["x", 1]), False), (_weights(["x", 0.5]), True),
    (_weights([True, 1]), False), (_weights([2**62, 2**62]), True)])  # the int64 total wraps
def test_loss_divided_differently(case, differs) -> None:
    """DefaultCollator's int64 mask divided by its int64 total against the contract's
    float32 product, bit for bit; non-numbers fall back to loss_not_int64."""
    assert m.loss_divided_differently(case) is differs


@pytest.mark.parametrize("examples, misses", [
    ([ONE], False), ([{"num_actions": 1, "loss_mask": [1]}], True),
    ([{"input_ids": [1], "loss_mask": [1]}], True), ([{"input_ids": [1], "num_actions": 1}], True),
    ([ONE, {"input_ids": [1], "num_actions": 1}], True), ([ONE, 3], False)])
def test_misses_key(examples, misses) -> None:
    """A mapping without input_ids, num_actions or loss_mask."""
    assert m.misses_key(C(examples)) is misses


@pytest.mark.parametrize("example, defect", [
    (ex(7, 1, [1]), False), (ex([1, 2], 1.0, [1]), False), (ex(T2, 1, [1]), False),
    (ex(torch.tensor([1, 2]), 1, [1]), False), (ex([1, 2], True, [1]), True),
    (ex([1, 2], 0, []), True), (ex([1, 2], 3, [1, 1, 1]), True), (ex([1, 2], -1, []), True),
    (ex([1, 2], 2, [1, 1]), False), (ex([1, 2], 1, [1]), False), (ex([1, 2], 1, [1, 1]), True),
    (ex([1, 2], 2, [1]), True), (ex([1, 2], 1, 5), False), (ex([1, 2], 1, [1], [1]), True),
    (ex([1, 2], 1, [1], [1, 1, 1]), True), (ex([1, 2], 1, [1], [1, 1]), False),
    (ex([1, 2], 1, [1], 5), False), (dict(NO_ATT, attention_mask=None), False)])
def test_structure_defect(example, defect) -> None:
    """num_actions a bool or out of [1, s], a loss mask of another length than num_actions, an
    attention mask of another length than the ids."""
    assert m._structure_defect(example) is defect


@pytest.mark.parametrize("examples, unchecked", [
    ([ONE, TWO], False), ([], False), ([ex([1, 2], 1, [1, 1], [1, 1])], True),
    ([ex([1, 2], 1, [1, 1], [1, 1]), 3], False), ([ex([1, 2], 1, [1, 1])], False),
    ([ex([1, 2, 3], 2, [1]), ex([4, 5], 1, [1])], False),  # loss rows 1 and 2 wide
    # both defective, one width each: loss rows 0 + 2 and 1 + 1, attention 0 + 2 and 1 + 1
    ([ex([1, 2, 3], 2, [1, 1], [1, 1]), ex([4, 5], 1, [1], [1])], True),
    ([ex([1, 2, 3], 2, [1, 1], [1, 1, 1]), ex([4, 5], 1, [1], [1])], False),
    ([ex([1, 2], True, [1], [1, 1]), ex([3], 1, [1, 1, 1], [1])], True),  # a bool diverges either way
    ([ex([1, 2], 0, []), {"input_ids": [1], "num_actions": 1}], False),
    ([ex([1, 2], 0, []), ex([1], 1, None)], False),
    ([ex([1, 2], 0, [], [1, 1]), ex([1], 1, [1], [1])], True),  # loss rows 1 + 0, 0 + 1
    ([ex([1, 2], 1, [], [1, 1]), ex([1], 1, [1], [1, 1])], False)])  # attention 0 + 2, 1 + 2
def test_collate_structure_unchecked(examples, unchecked) -> None:
    """0.3.0's collate lets a structural defect through when every row keeps one width (or a
    num_actions is a bool)."""
    assert m.collate_structure_unchecked(C(examples)) is unchecked


@pytest.mark.parametrize("examples, unchecked", [
    ([ex([1, 2], 1, [1], [1])], False), ([ex([1, 2], 1, [1, 1], [1, 1])], True),
    ([ONE], False), ([ONE, ex([1, 2], 0, [])], True), ([], False)])
def test_packed_structure_unchecked(examples, unchecked) -> None:
    """The packer's defects are num_actions' and the loss mask's; the attention mask aside."""
    assert m.packed_structure_unchecked(C(examples)) is unchecked


@pytest.mark.parametrize("examples, defect", [
    ([NO_ATT], False), ([ONE], False), ([ex([1, 2], 1, [1], [1])], True),
    ([ex(T2, 1, [1], [1]), ex([1, 2], 1, [1], [1])], True),  # a 2-D ids is skipped, not all
    ([ex(T2, 1, [1], [1])], False), ([ex(7, 1, [1], [2])], True), ([ex(7, 1, [1], [1])], False),
    ([ex([1, 2], 1, [1], [1, 2])], True), ([ex([1, 2], 1, [1], [1, "1"])], True),
    ([ex([1, 2], 1, [1], [1, b"1"])], True), ([ex([1, 2], 1, [1], [1, None])], True),
    ([ex([1, 2], 1, [1], [0, 1])], False), ([ex([1, 2], 1, [1], [True, 0.0])], False),
    ([ex([1, 2], 1, [1], [1, 0.5])], True), ([ex([1, 2], 1, [1], torch.tensor([1, 2]))], True),
    ([ex([1, 2], 1, [1], [1, -1])], True)])
def test_attention_defect(examples, defect) -> None:
    """An attention mask of the wrong length or with a value other than 0/1."""
    assert m.attention_defect(C(examples)) is defect


@pytest.mark.parametrize("examples, pad, cells", [
    ([], 0, None), ([ONE, 3], 0, None), ([ONE], 0, (1, 1, 1)), ([ONE, TWO], 0, (1, 1, 1)),
    ([TWO, ONE], 9, (9, 0, 0)), ([TWO, ONE], None, (None, 0, 0)),
    ([ex([4, 5, 6], 1, [7], [1, 1, 1]), ex([1, 2, 3], 2, [1, 1], [1, 1, 1])], 0, (4, 1, 0)),
    ([ex([], 0, [], [])], 0, None), ([{"input_ids": [1], "num_actions": 1}], 0, None),
    ([ex(5, 1, [1], [1])], 0, None), ([ex([1, 2], 1, [3], [2, 1])], 0, (1, 2, 3))])
def test_first_cells(examples, pad, cells) -> None:
    """The first cell of the sequences, attention and loss rows collate_sft_batch builds."""
    assert m._first_cells(C(examples, pad_token_id=pad)) == cells


@pytest.mark.parametrize("examples, unchecked", [
    ([ONE], False), ([ex([1, 2], 1, [1], [1, None])], True), ([ex([1, 2], 1, [1], [1, 2])], True),
    ([ex([1, 2], 1, [1], [1, 0.5])], True), ([ex([1, 2], 1, [1], [1, -1])], True),
    ([ex([1, 2], 1, [1], [1, True])], False), ([ex([1, 2], 1, [1], ["1", 1])], False),
    ([ex([1, 2], 1, [1], [1, "1"])], True),
    ([{"input_ids": [1, 2], "num_actions": 1, "attention_mask": [1, "1"]}], False),
    ([ex([1], 1, [1], ["1"]), ex([1, 2], 1, [1], [1, 1])], True),  # first cell is a pad's 0
    ([ex([1, 2], 1, [1], [1, 1 + 0j])], False)])
def test_attention_values_unchecked(examples, unchecked) -> None:
    """0.3.0 stores an attention number other than 0/1, fails on None with TypeError, and on a
    str with TypeError unless it is the first cell (torch's ValueError)."""
    assert m.attention_values_unchecked(C(examples, pad_token_id=0)) is unchecked


@pytest.mark.parametrize("examples, ignored", [
    ([ONE], False), ([NO_ATT], False), ([ex([1, 2], 1, [1], [0, 1])], True),
    ([ex([1, 2], 1, [1], [1])], True), ([ex([1, 2], 1, [1], torch.tensor([1, 0]))], True)])
def test_packed_attention_ignored(examples, ignored) -> None:
    """The packer never reads the mask: any defect or a zero in it."""
    assert m.packed_attention_ignored(C(examples)) is ignored


def test_list_ids_are_the_list_and_tuple_ids() -> None:
    """_list_ids: each mapping's list or tuple input_ids as a list."""
    assert m._list_ids(C([ex((1, 2), 1, [1]), ex(torch.tensor([3]), 1, [1]), 4, ONE,
                          {"loss_mask": [1]}])) == [[1, 2], [1, 2, 3]]


@pytest.mark.parametrize("examples, unchecked", [
    ([ONE], False), ([ex([1, 2.5], 1, [1], [1, 1])], True), ([ex((1, 2.5), 1, [1])], True),
    ([ex(["a", 2], 1, [1], [1, 1])], True), ([ex([1, "a"], 1, [1], [1, 1])], False),
    ([{"input_ids": ["a", 2], "num_actions": 1}], False),
    ([ex(torch.tensor([1.0, 2.0]), 1, [1], [1, 1])], False)])
def test_token_ids_unchecked(examples, unchecked) -> None:
    """0.3.0 truncates a float id and fails on a str id in the first cell with ValueError."""
    assert m.token_ids_unchecked(C(examples, pad_token_id=0)) is unchecked


@pytest.mark.parametrize("examples, unchecked", [
    ([ONE], False), ([ex(T2, 1, [1])], True), ([ex([1, 2.5], 1, [1])], True),
    ([ex(["a", 2], 1, [1])], True), ([ex([1, "a"], 1, [1])], False), ([ex([], 0, [])], False),
    ([ex(torch.tensor([1.0, 2.0]), 1, [1])], True), ([ex(torch.tensor([1, 2]), 1, [1])], False),
    ([ONE, ex(torch.tensor([1.0]), 1, [1])], True)])
def test_packed_ids_unchecked(examples, unchecked) -> None:
    """0.3.0's packer: a multi-dimensional or float ids tensor, a float id, a str first id."""
    assert m.packed_ids_unchecked(C(examples)) is unchecked


def test_multi_dim_ids() -> None:
    """input_ids as a tensor that is not 1-D."""
    assert m.multi_dim_ids(C([ONE, ex(T2, 1, [1])]))
    assert m.multi_dim_ids(C([ex(torch.tensor(3), 1, [1])]))
    assert not m.multi_dim_ids(C([ONE, ex(torch.tensor([1, 2]), 1, [1])]))


@pytest.mark.parametrize("examples, unchecked", [
    ([ONE], False), ([ex([1], 1, ["1"], [1])], True), ([ex([1], 1, [b"1"], [1])], True),
    ([ex([1], 1, [b"1"], [1]), ex([2], 1, [1], [1])], False),
    ([ex([1, 2], 2, [b"1", 1], [1, 1])], False), ([ex([1], 1, ["1"])], False)])
def test_loss_values_str(examples, unchecked) -> None:
    """A str first loss cell (ValueError), or bytes as the only cell (read as a sequence)."""
    assert m.loss_values_str(C(examples, pad_token_id=0)) is unchecked


@pytest.mark.parametrize("loss, text", [
    ("10", True), (b"1", True), (torch.tensor([1 + 1j]), True), (torch.tensor([1.0]), False),
    ([1], False)])
def test_text_or_complex_loss_mask(loss, text) -> None:
    """A loss mask given as a str or bytes, or as a complex tensor."""
    assert m._text_or_complex_loss_mask(C([ONE, ex([1], 1, loss)])) is text


@pytest.mark.parametrize("examples, unchecked", [
    ([ONE], False), ([ex([1, 2], 2, [1, "1"])], True), ([ex([1, 2], 2, [1, b"1"])], True),
    ([ex([1, 2], 1, "1")], True), ([ex([1, 2], 2, [None, 1])], True),
    ([ex([1, 2], 2, [1j, 1])], True), ([ex([1, 2], 2, [1, None])], False),
    ([ex([1, 2], 2, [1, 1j])], False), ([ex([1, 2], 1, [None])], False),
    ([ex(7, 1, [1])], False), ([ONE, ex([1, 2], 2, [None, 1])], True)])
def test_packed_loss_values_unchecked(examples, unchecked) -> None:
    """0.3.0's packer: a str or bytes value, a text or complex mask, a bad value at full[0]."""
    assert m.packed_loss_values_unchecked(C(examples)) is unchecked


@pytest.mark.parametrize("pad, bad", [(0, False), (2**63 - 1, False), (-(2**63), False),
                                      (2**63, True), (0.5, True), (True, True), ("0", True),
                                      (None, True)])
def test_bad_pad(pad, bad) -> None:
    """_bad_pad: the contract's check_pad_token_id refuses it."""
    assert m._bad_pad(C([], pad_token_id=pad)) is bad


@pytest.mark.parametrize("examples, pad, unchecked", [
    ([ONE, TWO], 0, False), ([ONE], 0.5, True), ([ONE, ONE], "p", True), ([], None, True),
    ([ONE, TWO], 0.5, True), ([ONE, TWO], False, True), ([TWO, ONE], "p", True),
    ([ONE, TWO], "p", False), ([ONE, TWO], None, False), ([ONE, TWO], 2**63, False),
    ([ONE, 3, TWO], "p", False)])
def test_collate_pad_unchecked(examples, pad, unchecked) -> None:
    """0.3.0's collate takes a bad pad no row needs, a float or bool, a str in the first cell."""
    assert m.collate_pad_unchecked(C(examples, pad_token_id=pad)) is unchecked


@pytest.mark.parametrize("pad, unchecked", [
    (0, False), (0.5, True), (True, True), (2**63, True), (-(2**63) - 1, True),
    (2**63 - 1, False), ("0", False), (None, False)])
def test_packed_pad_unchecked(pad, unchecked) -> None:
    """0.3.0's packer writes a float or bool pad and fails its own way beyond int64."""
    assert m.packed_pad_unchecked(C([ONE], pad_token_id=pad)) is unchecked


@pytest.mark.parametrize("examples, kwargs, unchecked", [
    ([ONE], {}, False), ([ONE], {"capacity": 8}, False), ([ONE], {"dp_size": True}, True),
    ([ONE], {"capacity": True}, True), ([ONE], {"tp_size": 0}, True),
    ([ONE], {"cp_size": -1}, True), ([ONE], {"pp_size": 0}, True), ([ONE], {"tp_size": 1}, False),
    ([ONE], {"cp_size": 1, "pp_size": 1}, False), ([ONE], {"dp_size": 0}, False),
    ([ONE], {"tp_size": 2.0}, False), ([ONE], {"pp_size": 2.0}, True),
    ([ONE], {"capacity": 8.0}, True), ([ONE], {"capacity": None}, True),
    ([ONE], {"dp_size": 2.0}, True), ([ONE, TWO], {"dp_size": 2.0}, False),
    ([ONE, TWO, ONE], {"dp_size": 2.0}, False), (5, {"dp_size": 2.0}, False),
    ([ONE], {"pp_size": True}, True), ([ONE], {"cp_size": False}, True)])
def test_sizes_unchecked(examples, kwargs, unchecked) -> None:
    """0.3.0's packer: bool sizes, tp/cp/pp < 1, a float pp or capacity, None capacity, a float
    dp_size above the number of examples."""
    assert m.sizes_unchecked(C(examples, **kwargs)) is unchecked


def test_devices_and_several_devices() -> None:
    """The devices of the examples' tensor fields; more than one is on_several_devices."""
    meta = ex(torch.tensor([1, 2]), 1, torch.ones(1, device="meta"))
    assert m._devices(C([meta, ONE])) == {"cpu", "meta"}
    assert m.on_several_devices(C([meta])) and not m.on_several_devices(C([ONE]))
    assert not m.on_several_devices(C([ex(torch.tensor([1, 2]), 1, torch.ones(1))]))
    assert m._devices(C([ONE, 3])) == set()


def test_unbatched_tensordict_and_fp8_not_bool() -> None:
    """A 0-d TensorDict batch; an fp8 flag that is not a bool."""
    assert m.unbatched_tensordict(C(TensorDict({"input_ids": torch.tensor([1])}, [])))
    assert not m.unbatched_tensordict(C(ops.jagged_batch([ONE])))
    assert not m.unbatched_tensordict(C([ONE])) and not m.unbatched_tensordict(Case((), {}))
    assert not m.fp8_not_bool(C([])) and not m.fp8_not_bool(C([], fp8=True))
    assert m.fp8_not_bool(C([], fp8=1)) and m.fp8_not_bool(C([], fp8="fp8"))


def test_scale_is_float32_one_over_the_total() -> None:
    """_scale: float32(1 / max(total, 1))."""
    assert m._scale(0) == 1.0 and m._scale(0.5) == 1.0 and m._scale(4) == 0.25
    assert m._scale(3) == float(torch.tensor(1 / 3, dtype=torch.float32)) != 1 / 3


@pytest.mark.parametrize("examples, kwargs, packed", [
    ([ONE, TWO], {"capacity": 8}, ([[1.0, 1.0, 0.0, 1.0]], [1.0, 1.0, 1.0])),
    ([ONE, TWO], {"capacity": 4}, ([[1.0, 1.0], [1.0, 0.0]], [1.0, 1.0, 1.0])),
    ([ONE, TWO], {"capacity": 8, "tp_size": 2}, ([[1.0, 1.0, 0.0, 0.0, 1.0]], [1.0, 1.0, 1.0])),
    ([ex([1, 2, 3], 2, [0.5, True])], {"capacity": 8}, ([[0.5, 1.0]], [0.5, 1.0])),
    ([TWO, ONE, TWO], {"capacity": 8, "dp_size": 2},
     ([[1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]], [1.0, 1.0, 1.0, 1.0])),
    ([ex([1, 2], 3, [1, 1, 1])], {"capacity": 8}, None),
    ([ex([1, 2], 1, ["a"])], {"capacity": 8}, None), ([ONE], {}, None),
    ([ONE], {"capacity": "x"}, None), ([ONE], {"capacity": 2}, None),
    ([ONE], {"capacity": 8, "tp_size": 0}, None)])
def test_packed_targets(examples, kwargs, packed) -> None:
    """The contract's unscaled loss rows (width W - 1) and every kept target, None when the
    case cannot be packed."""
    assert m._packed_targets(C(examples, pad_token_id=0, **kwargs)) == packed


def test_torch_and_numpy_sums() -> None:
    """The float32 sum of the rows (torch for 0.3.0, NumPy for 0.4.0), 0.0 with no rows."""
    for total in (m._torch_sum, m._numpy_sum):
        assert total([]) == 0.0 and total([[]]) == 0.0
        assert total([[1.0, 2.0], [3.0, 0.5]]) == 6.5
        assert total([[2.0**24, 1.0]]) == 2.0**24  # float32 rounding
    assert m._numpy_sum([[3e38, 3e38]]) == math.inf


@pytest.mark.parametrize("loss, differs", [
    ([1, 1], False), ([0.5, 0.5], False), ([0.5, 1.0], True), ([float("inf"), 1], True),
    ([float("nan"), 1], True), ([0.25, 0.25], False), ([0.25, 1.5], True)])
def test_skyrl_total_differs(loss, differs) -> None:
    """int() of the float32 sum against the exact sum: another float32 scale, or not finite."""
    case = C([ex([1, 2, 3], 2, loss)], pad_token_id=0, capacity=8)
    assert m._skyrl_total_differs(case, m._torch_sum) is differs
    assert m._skyrl_total_differs(C([ex([1, 2], 3, [1, 1, 1])], capacity=8),
                                  m._torch_sum) is False


def test_narrowed_is_the_lossy_tensor_form() -> None:
    """_narrowed: loss masks as float16 (even batch) or bfloat16 tensors; None if impossible."""
    two = m._narrowed(C([ONE, TWO], capacity=8))
    assert [e["loss_mask"].dtype for e in two.args[0]] == [torch.float16] * 2
    assert two.kwargs == {"capacity": 8}
    assert m._narrowed(C([ONE])).args[0][0]["loss_mask"].dtype == torch.bfloat16
    assert m._narrowed(C(5)) is None


@pytest.mark.parametrize("examples, truncated", [
    ([ONE, TWO], False), ([ex([1, 2, 3], 2, [0.5, 1.0])], True),
    ([ex([1, 2], 1, [70000.0]), ex([1, 2], 1, [1.0])], True),  # float16: inf
    ([ex([1, 2], 1, [70000.0])], False), (5, False)])
def test_packed_total_truncated(examples, truncated) -> None:
    """0.3.0's truncated normalizer, on the case as drawn or in the float16 / bfloat16 form."""
    assert m.packed_total_truncated(C(examples, pad_token_id=0, capacity=8)) is truncated


@pytest.mark.parametrize("lengths, unchecked", [
    ([1, 2], False), ([0], True), ([-1], True), ([1.0], True), ([True], True), ((1, 0), True),
    ([1], False), (5, False), ([], False)])
def test_ffd_lengths_unchecked(lengths, unchecked) -> None:
    """SkyRL packs lengths < 1 and float or bool lengths."""
    assert m.ffd_lengths_unchecked(Case((lengths, 8), {})) is unchecked
    assert not m.ffd_lengths_unchecked(Case((), {}))


def test_ffd_min_bins_zero() -> None:
    """min_bins = 0 only."""
    assert m.ffd_min_bins_zero(Case(([1], 8), {"min_bins": 0}))
    assert not m.ffd_min_bins_zero(Case(([1], 8), {"min_bins": 1}))
    assert not m.ffd_min_bins_zero(Case(([1], 8), {}))


# --------------------------------------------------------------------------- strategies


def test_with_attention_masks_fills_absent_masks_with_ones() -> None:
    """Every mapping without (or with a None) attention mask gets ones over its ids; the rest,
    the other arguments, the kwargs and the label are kept."""
    tensor_ids = ex(torch.tensor([1, 2, 3]), 1, [1])
    case = Case(([NO_ATT, dict(TWO, attention_mask=None), ONE, 3, ex(7, 1, [1]), tensor_ids,
                  ex((1,), 1, [1])], "more"), {"pad_token_id": 2}, "label")
    out = m._with_attention_masks(case)
    filled = out.args[0]
    assert filled[0] == dict(NO_ATT, attention_mask=[1, 1])
    assert filled[1] == dict(TWO, attention_mask=[1, 1])
    assert filled[2] is ONE and filled[3] == 3 and filled[4] == ex(7, 1, [1])
    assert filled[5]["attention_mask"] == [1, 1, 1] and filled[6]["attention_mask"] == [1]
    assert "attention_mask" not in NO_ATT  # not changed in place
    assert out.args[1:] == ("more",) and out.kwargs == {"pad_token_id": 2}
    assert out.label == "label"
    batch = C(ops.jagged_batch([ONE]))
    assert m._with_attention_masks(batch) is batch


def test_integer_weights_turn_float_weights_into_0_1() -> None:
    """A float weight becomes int(v != 0); ints, other values, tensors and non-lists stay."""
    case = Case(([ex([1, 2, 3, 4, 5], 5, [0.5, 0.0, -0.0, 2, "x"]), ex([1], 1, (0.5,)),
                  ex([1], 1, torch.tensor([0.5])), 4, {"input_ids": [1]}], "more"),
                {"k": 1}, "label")
    out = m._integer_weights(case)
    changed = out.args[0]
    assert changed[0]["loss_mask"] == [1, 0, 0, 2, "x"]
    assert [type(v) for v in changed[0]["loss_mask"][:3]] == [int, int, int]
    assert changed[1]["loss_mask"] == (0.5,) and changed[2]["loss_mask"].tolist() == [0.5]
    assert changed[3] == 4 and changed[4] == {"input_ids": [1]}
    assert case.args[0][0]["loss_mask"][0] == 0.5  # not changed in place
    assert out.args[1:] == ("more",) and out.kwargs == {"k": 1} and out.label == "label"
    batch = C(ops.jagged_batch([ONE]))
    assert m._integer_weights(batch) is batch


def test_normalize_sets_a_bool_normalize_only() -> None:
    """_normalize(v) sets normalize=v, keeping a non-bool normalize (a bad input) as it is."""
    assert m._normalize(True)(C([ONE])).kwargs == {"normalize": True}
    assert m._normalize(False)(C([ONE], normalize=True)).kwargs == {"normalize": False}
    bad = C([ONE], normalize=1)
    assert m._normalize(True)(bad) is bad


def test_on_bad_transforms_the_case_and_keeps_the_rest() -> None:
    """_on_bad: the transform applied to the case, raises and why kept."""
    bad = BadCase(C([ONE]), ValueError, "why")
    out = m._on_bad(m._normalize(True))(bad)
    assert out.case.kwargs == {"normalize": True}
    assert out.raises is ValueError and out.why == "why"


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(st.data())
def test_collate_valid_fixes_normalize(data) -> None:
    """Every valid collate case has the adapter's normalize, and is a case of the record."""
    normalize = data.draw(st.booleans())
    case = data.draw(m.collate_valid(normalize))
    assert case.kwargs["normalize"] is normalize
    oracle.collate_sft(*case.args, **case.kwargs)


def test_collate_valid_fills_masks_three_times_in_four() -> None:
    """Most valid cases have every attention mask; some are left as drawn, without one."""
    from hypothesis import find

    def lacking(case: Case) -> bool:
        return any(e.get("attention_mask") is None for e in case.args[0])

    for normalize in (False, True):
        assert lacking(find(m.collate_valid(normalize), lacking,
                            settings=settings(database=None, max_examples=300)))
    seen = []

    @settings(max_examples=60, derandomize=True, database=None, deadline=None)
    @given(m.collate_valid(False))
    def count(case):
        seen.append(lacking(case))

    count()
    assert 0 < sum(seen) < len(seen) / 2


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(st.data())
def test_collate_invalid_fixes_normalize_masks_and_weights(data) -> None:
    """Each bad collate case reaches SkyRL alone: normalize fixed, masks filled, 0/1 weights."""
    normalize = data.draw(st.booleans())
    bad = data.draw(m.collate_invalid(normalize))
    assert isinstance(bad, BadCase)
    case = bad.case
    if isinstance(case.kwargs.get("normalize"), bool):
        assert case.kwargs["normalize"] is normalize
    for e in m._listed(case) or []:
        if isinstance(e, dict) and isinstance(e.get("input_ids"), (list, tuple)):
            assert e.get("attention_mask") is not None
        if isinstance(e, dict) and isinstance(e.get("loss_mask"), list):
            assert not any(isinstance(v, float) for v in e["loss_mask"])


def test_normalize_is_and_on_cpu() -> None:
    """normalize_is(v): normalize is v (default False) and no device; on_cpu: no device."""
    assert m.normalize_is(False)(C([ONE])) and not m.normalize_is(True)(C([ONE]))
    assert m.normalize_is(True)(C([ONE], normalize=True))
    assert not m.normalize_is(True)(C([ONE], normalize=1))
    assert not m.normalize_is(False)(C([ONE], normalize=0))
    assert not m.normalize_is(False)(C([ONE], device="cpu"))
    assert m.on_cpu(C([ONE])) and not m.on_cpu(C([ONE], device="cpu"))


def test_holds_tensors_and_the_0_3_collate_domain() -> None:
    """0.3.0's collate domain: normalize_is and no TensorDict batch, no tensor field."""
    assert m._holds_tensors(C(ops.jagged_batch([ONE])))
    assert m._holds_tensors(C(TensorDict({}, [])))
    for key in m.TENSOR_FIELDS:
        assert m._holds_tensors(C([ONE, dict(TWO, **{key: torch.tensor([1, 1])})])), key
    assert not m._holds_tensors(C([dict(ONE, num_actions=torch.tensor(2)), 3]))
    assert not m._holds_tensors(Case((), {}))
    domain = m.collate_domain_03(True)
    assert domain(C([ONE], normalize=True)) and not domain(C([ONE]))
    assert not domain(C([dict(ONE, input_ids=torch.tensor([1, 2, 3]))], normalize=True))
    assert m.collate_domain_03(False)(C([ONE]))


# --------------------------------------------------------------------------- known divergences


def _summary(known) -> list[tuple]:
    return [(k.name, k.applies, k.kind, k.upstream, k.raises, k.accepts, k.fields) for k in known]


COLLATE_03 = [
    ("attention_mask_required", m.lacks_attention_mask, "both", "U", (KeyError, TypeError),
     False, ()),
    ("loss_mask_int64", m.loss_not_int64, "valid", "U", (RuntimeError,), False, ("loss_mask",)),
    ("missing_key_error", m.misses_key, "errors", "U", (KeyError,), False, ()),
    ("structure_unchecked", m.collate_structure_unchecked, "errors", "U", (ValueError,), True,
     ()),
    ("attention_values_unchecked", m.attention_values_unchecked, "errors", "U", (TypeError,),
     True, ()),
    ("token_ids_unchecked", m.token_ids_unchecked, "errors", "U", (ValueError,), True, ()),
    ("loss_values_unchecked", m.loss_values_str, "errors", "U", (ValueError,), True, ()),
    ("pad_token_id_unchecked", m.collate_pad_unchecked, "errors", "U", (ValueError,), True, ()),
]


def test_collate_known_03() -> None:
    """0.3.0's collate divergences: names, predicates, kinds, upstream, how each shows; the
    normalized adapter's weights divergence is DefaultCollator's division."""
    assert _summary(m.collate_known("U", normalized=False)) == COLLATE_03
    normalized = _summary(m.collate_known("U", normalized=True))
    assert normalized[1] == ("loss_weights_divided", m.loss_divided_differently, "valid", "U",
                             (RuntimeError,), False, ("loss_mask",))
    assert normalized[:1] + normalized[2:] == COLLATE_03[:1] + COLLATE_03[2:]


def test_collate_known_04() -> None:
    """0.4.0's collate divergences; the unbatched TensorDict one only without normalize."""
    plain = _summary(m.collate_known_04("U", normalized=False))
    assert plain == [
        ("attention_mask_required", m.lacks_attention_mask_04, "both", "U",
         (KeyError, TypeError), False, ()),
        ("loss_mask_int64", m.loss_not_int64, "valid", "U", (ValueError, OverflowError), False,
         ("loss_mask",)),
        ("missing_key_error", m.misses_key, "errors", "U", (KeyError,), False, ()),
        ("length1_loss_mask_broadcast", m.length1_loss_broadcast, "errors", "U", (), True, ()),
        ("structure_unchecked", m.collate_structure_unchecked_04, "errors", "U", (ValueError,),
         True, ()),
        ("attention_values_unchecked", m.attention_values_unchecked_04, "errors", "U",
         (TypeError,), True, ()),
        ("token_ids_unchecked", m.token_ids_unchecked_04, "errors", "U", (OverflowError,), True,
         ()),
        ("loss_values_unchecked", m.loss_values_text, "errors", "U", (), True, ()),
        ("pad_token_id_unchecked", m.pad_unchecked_04, "errors", "U", (OverflowError,), True,
         ()),
        ("one_cell_2d_ids", m.one_cell_2d_ids, "errors", "U", (), True, ()),
        ("unbatched_tensordict_type_error", m.unbatched_tensordict, "errors", "U",
         (TypeError,), False, ()),
    ]
    normalized = _summary(m.collate_known_04("U", normalized=True))
    assert normalized[1] == ("loss_weights_divided", m.loss_divided_differently, "valid", "U",
                             (ValueError, OverflowError), False, ("loss_mask",))
    assert normalized[:1] + normalized[2:] == plain[:1] + plain[2:-1]


@pytest.mark.parametrize("make", [m.collate_known, m.collate_known_04])
def test_collate_known_docs(make) -> None:
    """Each doc is one sentence list ending in a full stop; the normalized weights doc adds
    DefaultCollator's division to the int64 one."""
    for normalized in (False, True):
        for known in make("U", normalized=normalized):
            assert known.doc[:1].islower() or known.doc[:1] in "`'", known.doc
            assert known.doc.endswith("."), known.doc
            assert "XX" not in known.doc and known.doc != known.doc.upper()
    plain = make("U", normalized=False)[1].doc
    divided = make("U", normalized=True)[1].doc
    assert plain.startswith("the loss mask is ")
    assert divided == plain[:-1] + (
        ". DefaultCollator then divides by the int64 total (`x / total`) where the contract "
        "multiplies by float32(1 / total): integer weights other than 0 and +-2**k can round "
        "apart.")


def test_sizes_and_recipe() -> None:
    """_sizes: dp, tp, cp ints >= 1 (not bools) and whether fp8 is True; _recipe: a contract
    recipe (default tensorwise) or None."""
    assert m._sizes(C([])) == (1, 1, 1, False)
    assert m._sizes(C([], dp_size=2, tp_size=3, cp_size=4, fp8=True)) == (2, 3, 4, True)
    assert m._sizes(C([], fp8=1)) == (1, 1, 1, False)
    for bad in ({"dp_size": True}, {"tp_size": 0}, {"cp_size": 2.0}, {"dp_size": -1}):
        assert m._sizes(C([], **bad)) is None, bad
    assert m._recipe(C([])) == "tensorwise" and m._recipe(C([], fp8_recipe="mxfp8")) == "mxfp8"
    assert m._recipe(C([], fp8_recipe="auto")) is None
    assert m._recipe(C([], fp8_recipe=None)) is None


@pytest.mark.parametrize("kwargs, unknown, unknown_04", [
    ({}, False, False), ({"fp8_recipe": "tensorwise"}, False, False),
    ({"fp8_recipe": "blockwise", "fp8": True}, False, False),
    ({"fp8_recipe": "auto"}, True, True), ({"fp8_recipe": "auto", "fp8": True}, True, False),
    ({"fp8_recipe": "auto", "fp8": 1}, True, False), ({"fp8_recipe": "auto", "fp8": 0}, True, True),
    ({"fp8_recipe": "auto", "fp8": torch.tensor([1, 1])}, True, False),
    ({"fp8_recipe": None, "fp8": True}, True, True), ({"fp8_recipe": 5}, True, True)])
def test_unknown_recipes(kwargs, unknown, unknown_04) -> None:
    """An fp8_recipe the contract rejects; 0.4.0 refuses 'auto' itself when FP8 is on."""
    assert m.unknown_recipe(C([ONE], **kwargs)) is unknown
    assert m.unknown_recipe_04(C([ONE], **kwargs)) is unknown_04


@pytest.mark.parametrize("tp, cp, fp8, align", [
    (1, 1, False, 1), (2, 1, False, 2), (1, 2, False, 4), (2, 2, False, 8), (3, 2, False, 12),
    (1, 1, True, 16), (4, 1, True, 16), (2, 2, True, 32), (32, 1, True, 32), (1, 3, True, 48)])
def test_skyrl_03_align(tp, cp, fp8, align) -> None:
    """0.3.0's get_packed_seq_align_size: lcm(layout, 16 * cp) with fp8."""
    assert m.skyrl_03_align(tp, cp, fp8) == align


@pytest.mark.parametrize("kwargs, blind", [
    ({}, False), ({"tp_size": 4}, False), ({"fp8": True}, False),
    ({"fp8": True, "tp_size": 2}, False), ({"fp8": True, "tp_size": 4}, True),
    ({"fp8": True, "tp_size": 2, "fp8_recipe": "blockwise"}, True),
    ({"fp8": True, "fp8_recipe": "blockwise"}, False), ({"fp8": True, "fp8_recipe": "mxfp8"}, True),
    ({"fp8": True, "tp_size": 4, "fp8_recipe": "auto"}, False),
    ({"fp8": True, "tp_size": 0}, False), ({"fp8": 1, "tp_size": 4}, False)])
def test_fp8_recipe_blind(kwargs, blind) -> None:
    """FP8 where 0.3.0's one rule is not the recipe's alignment."""
    assert m.fp8_recipe_blind(C([ONE], **kwargs)) is blind


# --------------------------------------------------------------------------- skyrl 0.4.0


def test_fits() -> None:
    """NumPy takes as many values as the slot, or one broadcast."""
    assert m._fits(3, 3) and m._fits(3, 1) and m._fits(0, 0) and m._fits(0, 1)
    assert not m._fits(3, 2) and not m._fits(3, None) and not m._fits(1, 0)


@pytest.mark.parametrize("examples, broadcast", [
    ([ex([1, 2, 3], 2, [1])], True), ([ex([1, 2, 3], 3, [1])], True), ([ex([1, 2], 1, [1])], False),
    ([ex([1, 2], 3, [1])], False), ([ONE, ex([1, 2, 3], 2, [1])], True),
    ([ex([1, 2, 3], 2, [1]), ex([1, 2], 1, [1, 1])], False),
    ([ex([1, 2, 3], 2, [1]), ex([1, 2], 0, [])], False),
    ([ex([1, 2, 3], 2, [1]), ex([1, 2], 3, [1, 1, 1])], False),
    ([ex([1, 2, 3], 2, [1]), ex(7, 1, [1])], False), ([ex([1, 2, 3], True, [1])], False),
    ([ex([1, 2, 3], 2.0, [1])], False), ([ex([1, 2, 3], 2, 5), ex([1, 2, 3], 2, [1])], False),
    ([], False)])
def test_length1_loss_broadcast(examples, broadcast) -> None:
    """A length-1 loss mask for 1 < num_actions <= s, every other example right."""
    assert m.length1_loss_broadcast(C(examples)) is broadcast


@pytest.mark.parametrize("ids, taken", [
    (torch.tensor([1, 2]), True), (torch.tensor([1.5]), True), (torch.tensor([[3]]), True),
    (torch.tensor([[[3]]]), True), (torch.tensor([[1, 2]]), False), (torch.tensor(3), False),
    (ops.jagged_batch([ONE])["input_ids"], False), ([1, 2.5], True), ((1, 2), True),
    ([2**63], False), ([-(2**63)], True), ([" +3", "-4"], True), (["3a"], False),
    (["3.0"], False), ([None], False), ("12", False), ([], True), (5, False)])
def test_ids_taken_04(ids, taken) -> None:
    """What 0.4.0's `sequences_np[i, pad:] = ids` takes."""
    assert m._ids_taken_04(ids) is taken


@pytest.mark.parametrize("examples, lacks", [
    ([NO_ATT], True), ([ONE], False), ([ONE, NO_ATT], True), ([], False), ([NO_ATT, 3], False),
    ([{"input_ids": [1], "num_actions": 1}], False), ([ex([1], True, [1])], False),
    ([ex([1], 1.0, [1])], False), ([ex(torch.tensor([1, 2]), 1, [1])], True),
    ([ex(["a"], 1, [1])], False), ([ex(["a"], 1, [1], [1]), NO_ATT], False),
    ([dict(NO_ATT, attention_mask=None)], True), ([ONE, ex([1], 1, [1], [1])], False),
    ([ex([1], 1, [1], [1]), {"input_ids": [1], "loss_mask": [1]}], False),
    ([ex([1], 1, [1], [1]), {"num_actions": 1, "loss_mask": [1]}], False)])
def test_lacks_attention_mask_04(examples, lacks) -> None:
    """0.4.0 reaches a missing attention mask once every num_actions is an int and the ids up
    to it are taken."""
    assert m.lacks_attention_mask_04(C(examples)) is lacks


@pytest.mark.parametrize("examples, unchecked", [
    ([ONE], False), ([], False), ([ex([1, 2], 1, [1, 1])], False),  # 2 values into 1 column
    ([ex([1, 2], 2, [1])], True), ([ex([1, 2], 0, [])], True), ([ex([1, 2], 0, [1])], True),
    ([ex([1, 2], 3, [1, 1, 1])], True), ([ex([1, 2], -1, [])], False),
    ([ex([1, 2], -1, []), ONE], True), ([ex([1, 2], 1, [1], [1])], True),
    ([ex([1, 2], 1, [1], [1, 1, 1])], False), ([ex([1, 2], True, [1])], False),
    ([ex([1, 2], True, [1]), ONE], True), ([ex([1, 2], 0, []), 3], False),
    ([ex([1, 2], 0, []), ex([1], 1.0, [1])], False), ([ex([1, 2], 0, []), ex(5, 1, [1])], False),
    ([ex([1, 2], 0, []), ex([1], 1, [1], 5)], False)])
def test_collate_structure_unchecked_04(examples, unchecked) -> None:
    """0.4.0's collate lets a defect through when every mask fits its slot (or is one value);
    a bool num_actions diverges unless it is the largest."""
    assert m.collate_structure_unchecked_04(C(examples)) is unchecked


@pytest.mark.parametrize("att, unchecked", [
    ([1, 1], False), ([0, 1], False), ([1, None], True), ([1, "1"], True), ([1, 2], True),
    ([1, 0.5], True), ([1, -1], True), ([True, False], False), (torch.tensor([1, 2]), True)])
def test_attention_values_unchecked_04(att, unchecked) -> None:
    """0.4.0 stores numbers other than 0/1 and digit strings, fails on None with TypeError."""
    assert m.attention_values_unchecked_04(C([ONE, ex([1, 2], 1, [1], att)])) is unchecked


def test_beyond_int64() -> None:
    """An integer (not a bool) outside [-2**63, 2**63)."""
    assert m._beyond_int64(2**63) and m._beyond_int64(-(2**63) - 1)
    assert not m._beyond_int64(2**63 - 1) and not m._beyond_int64(-(2**63))
    assert not m._beyond_int64(True) and not m._beyond_int64(2.0**64)


@pytest.mark.parametrize("examples, unchecked, packed", [
    ([ONE], False, False), ([ex([1, 2.5], 1, [1])], True, True), ([ex([1, "2"], 1, [1])], True, True),
    ([ex([2**63], 1, [1])], True, True), ([ex((1, 2**63), 1, [1])], True, True),
    ([ex(torch.tensor([1.0]), 1, [1])], True, True), ([ex(torch.tensor([1]), 1, [1])], False, False),
    ([ex(torch.tensor([[1]]), 1, [1])], False, True), ([ex(T2, 1, [1])], False, False),
    ([ex(torch.tensor([[1.0]]), 1, [1])], True, True), ([ex([True], 1, [1])], False, False)])
def test_token_ids_unchecked_04(examples, unchecked, packed) -> None:
    """0.4.0: a float, str or beyond-int64 id, float-tensor ids; the packer also a (1, 1)."""
    assert m.token_ids_unchecked_04(C(examples)) is unchecked
    assert m.packed_ids_unchecked_04(C(examples)) is packed
    assert m.one_cell_2d_ids(C(examples)) is (packed and not unchecked
                                              or examples[0]["input_ids"] is not None
                                              and isinstance(examples[0]["input_ids"],
                                                             torch.Tensor)
                                              and examples[0]["input_ids"].dim() == 2
                                              and examples[0]["input_ids"].numel() == 1)


@pytest.mark.parametrize("loss, text, packed", [
    ([1, 1], False, False), ([1, "1"], True, True), ([1, b"1"], True, True),
    ([1, None], False, True), ("11", False, True), (torch.tensor([1j]), False, True),
    (torch.tensor([1.0, 0.0]), False, False)])
def test_loss_values_04(loss, text, packed) -> None:
    """0.4.0 parses str / bytes values; the packer also None (NaN), text and complex masks."""
    case = C([ONE, ex([1, 2, 3], 2, loss)])
    assert m.loss_values_text(case) is text
    assert m.packed_loss_values_unchecked_04(case) is packed


@pytest.mark.parametrize("pad, unchecked", [
    (0, False), (0.5, True), (True, True), ("0", True), (2**63, True), (None, False)])
def test_pad_unchecked_04(pad, unchecked) -> None:
    """0.4.0's np.full takes any bad pad but None (TypeError, the contract's type)."""
    assert m.pad_unchecked_04(C([ONE], pad_token_id=pad)) is unchecked


@pytest.mark.parametrize("examples, capacity, unchecked", [
    ([ONE], 8, False), ([ex([1, 2], 0, [])], 8, True), ([ex([1, 2], 2, [1])], 8, True),
    ([ex([1, 2], 1, [1, 1])], 8, False), ([ex([1, 2], 3, [1, 1, 1])], 8, False),
    ([ex([1, 2], 3, [1, 1])], 8, False), ([ex([1, 2], 3, [1])], 8, True),  # full[-1:]
    ([ex([1, 2], -1, [])], 8, True), ([ex([1, 2], -1, [1])], 8, True),  # full[3:] takes 1
    ([ex([1, 2], -1, [1, 1])], 8, False), ([ex([1, 2], 0, [])], 1, False),
    ([ex([1, 2], 0, [])], None, False), ([ex([1, 2], True, [1, 1])], 8, True),
    ([ex([1, 2], 0, []), ex(7, 1, [1])], 8, False), ([ex([1, 2], 0, []), ex([1], 1.0, [1])], 8,
                                                       False),
    ([ex([1, 2], 0, []), ONE], 8, True), ([ex([1, 2], 0, []), ex([1, 2], 1, [1, 1])], 8, False),
    ([ex([1, 2], 1, [1], [1])], 8, False)])
def test_packed_structure_unchecked_04(examples, capacity, unchecked) -> None:
    """0.4.0's packer lets a defect through when `full_mask[s - n:] = loss_mask` takes it and
    every example is within the capacity; a bool num_actions diverges either way."""
    assert m.packed_structure_unchecked_04(C(examples, capacity=capacity)) is unchecked


@pytest.mark.parametrize("examples, kwargs, unchecked", [
    ([ONE], {"capacity": 8}, False), ([ONE], {}, False), ([ONE], {"tp_size": True}, True),
    ([ONE], {"capacity": False}, True), ([ONE], {"tp_size": 0}, False),
    ([ONE], {"cp_size": -1}, False), ([ONE], {"pp_size": 0}, True), ([ONE], {"pp_size": 1}, False),
    ([ONE], {"pp_size": 2.0}, True), ([ONE], {"pp_size": -3}, True),
    ([ONE], {"capacity": 8.0}, True), ([ONE], {"capacity": None}, True),
    ([ONE], {"dp_size": 2.0}, True), ([ONE, TWO], {"dp_size": 2.0}, False),
    ([ONE], {"dp_size": 1.0}, False), (5, {"dp_size": 2.0}, False),
    ([ONE], {"dp_size": 2}, False)])
def test_sizes_unchecked_04(examples, kwargs, unchecked) -> None:
    """0.4.0 checks tp / cp itself; still unchecked: bools, pp, a float or None capacity, a
    float dp_size above the number of examples."""
    assert m.sizes_unchecked_04(C(examples, **kwargs)) is unchecked


@pytest.mark.parametrize("examples, kwargs, truncated", [
    ([ONE, TWO], {}, False), ([ex([1, 2, 3], 2, [0.5, 1.0])], {}, True),
    ([ex([1, 2, 3], 2, [1e38, 1e38]), ex([1, 2, 3], 2, [1e38, 1e38])], {}, True),
    ([ex([1, 2], 3, [1, 1, 1])], {}, False),
    # FP8 layouts that differ from the contract's: only a sum that may not be finite counts
    ([ex([1, 2, 3], 2, [0.5, 1.0])], {"fp8": True, "tp_size": 2}, False),
    ([ex([1, 2, 3], 2, [float("inf"), 1.0])], {"fp8": True, "tp_size": 2}, True),
    ([ex([1, 2, 3], 2, [2.0**126, 2.0**126])], {"fp8": True, "tp_size": 2}, True),
    ([ex([1, 2, 3], 2, [2.0**126, -(2.0**126)])], {"fp8": True, "tp_size": 2}, True),
    ([ex([1, 2, 3], 2, [2.0**126, 2.0**125])], {"fp8": True, "tp_size": 2}, False),
    ([ex([1, 2, 3], 2, [2.0**125, 2.0**125])], {"fp8": True, "tp_size": 2}, False),
    ([ex([1, 2, 3], 2, [2.0**125, 2.0**124])], {"fp8": True, "tp_size": 2}, False),
    ([ex([1, 2], 3, [1, 1, 1])], {"fp8": True, "tp_size": 2}, False)])
def test_packed_total_truncated_04(examples, kwargs, truncated) -> None:
    """0.4.0's truncated NumPy float32 normalizer; where its FP8 layout is not the contract's,
    a non-finite target or |targets| summing to 2**127 or more."""
    case = C(examples, pad_token_id=0, capacity=kwargs.pop("capacity", 16), **kwargs)
    assert m.packed_total_truncated_04(case) is truncated


@pytest.mark.parametrize("examples, capacity, within", [
    ([ONE, TWO], 3, True), ([ONE, TWO], 2, False), ([ONE], 3.0, False), ([ONE], None, False),
    ([ex(7, 1, [1])], 8, False), ([], 1, True)])
def test_within_capacity(examples, capacity, within) -> None:
    """Every example's length within an int capacity."""
    assert m._within_capacity(C(examples, capacity=capacity)) is within


def test_packed_length1_broadcast() -> None:
    """length1_loss_broadcast within the capacity."""
    assert m.packed_length1_broadcast(C([ex([1, 2, 3], 2, [1])], capacity=3))
    assert not m.packed_length1_broadcast(C([ex([1, 2, 3], 2, [1])], capacity=2))
    assert not m.packed_length1_broadcast(C([ONE], capacity=3))


@pytest.mark.parametrize("tp, cp, fp8, recipe, align", [
    (1, 1, False, "mxfp8", 1), (2, 1, False, "tensorwise", 2), (2, 2, False, "tensorwise", 8),
    (1, 2, False, "tensorwise", 4), (1, 1, True, "mxfp8", 32), (2, 2, True, "mxfp8", 128),
    (1, 1, True, "tensorwise", 16), (1, 2, True, "blockwise", 32), (2, 1, True, "tensorwise", 256),
    (2, 2, True, None, 512), (3, 1, True, "blockwise", 384)])
def test_skyrl_04_align(tp, cp, fp8, recipe, align) -> None:
    """0.4.0's rule: mxfp8 32*tp*cp, any other recipe block scaling's (128*tp*cp if tp > 1)."""
    assert m.skyrl_04_align(tp, cp, fp8, recipe) == align
    if recipe == "tensorwise":
        assert m.skyrl_04_align(tp, cp, fp8) == align


@pytest.mark.parametrize("kwargs, blockwise", [
    ({"fp8": True, "tp_size": 2}, True), ({"fp8": True}, False), ({"tp_size": 2}, False),
    ({"fp8": True, "tp_size": 2, "fp8_recipe": "blockwise"}, False),
    ({"fp8": True, "tp_size": 2, "fp8_recipe": "mxfp8"}, False),
    ({"fp8": True, "tp_size": 2, "dp_size": 0}, False), ({"fp8": 1, "tp_size": 2}, False)])
def test_fp8_blockwise_alignment(kwargs, blockwise) -> None:
    """Per-tensor FP8 with tp > 1, the one layout 0.4.0 aligns per block."""
    assert m.fp8_blockwise_alignment(C([ONE], **kwargs)) is blockwise


LONG = ex(list(range(17)), 1, [1])


@pytest.mark.parametrize("examples, kwargs, differs", [
    ([ONE, TWO], {"capacity": 8}, False),  # no FP8
    ([ONE, TWO], {"capacity": 8, "fp8": True}, True),  # aligned 16 + 16 > 16: two bins
    ([ONE], {"capacity": 8, "fp8": True}, False),  # one bin either way
    ([ONE, TWO], {"capacity": 32, "fp8": True}, True),  # 16 + 16: ties binned in another order
    ([ONE, TWO], {"capacity": 3, "fp8": True}, True),  # [[0], [1]] against [[1], [0]]
    ([LONG, ONE], {"capacity": 64, "fp8": True}, False),  # 32 + 16 in one bin, in order
    ([LONG, ONE], {"capacity": 33, "fp8": True}, True),  # 32 + 16 > 33
    ([ex(list(range(17)), 1, [1]), ONE], {"capacity": 20, "fp8": True}, True),  # 32 > 20
    ([ONE, TWO], {"capacity": 8, "fp8": True, "tp_size": 2}, False),  # blockwise_alignment
    ([ONE, TWO], {"capacity": 8, "fp8": True, "fp8_recipe": "auto"}, False),
    ([ONE, TWO], {"capacity": 8, "fp8": True, "tp_size": 0}, False),
    ([], {"capacity": 8, "fp8": True}, False), ([ONE, TWO], {"fp8": True}, False),
    ([ONE, TWO], {"capacity": 2, "fp8": True}, False), ([ONE, 3], {"capacity": 8, "fp8": True},
                                                        False),
    ([ONE, TWO, ONE, TWO], {"capacity": 16, "fp8": True, "dp_size": 2}, True),
    ([LONG, ONE], {"capacity": 64, "fp8": True, "dp_size": 2}, False),  # one a bin
    ([ONE, TWO, TWO], {"capacity": 32, "fp8": True, "fp8_recipe": "mxfp8"}, True),
    ([ONE, TWO], {"capacity": 64, "fp8": True, "fp8_recipe": "mxfp8"}, True),
    ([ex(list(range(33)), 1, [1]), ONE], {"capacity": 96, "fp8": True, "fp8_recipe": "mxfp8"},
     False)])
def test_fp8_bins_on_aligned_lengths(examples, kwargs, differs) -> None:
    """Where 0.4.0 aligns as the contract does, it bins the aligned lengths with capacity
    max(capacity, a): other bins, or a ValueError on a valid input."""
    assert m.fp8_bins_on_aligned_lengths(C(examples, pad_token_id=0, **kwargs)) is differs
    assert m.fp8_layout_differs(C(examples, pad_token_id=0, **kwargs)) is (
        differs or m.fp8_blockwise_alignment(C(examples, **kwargs)))


def test_without_fp8() -> None:
    """fp8=True is turned off; False, absent and non-bool flags are kept."""
    assert m._without_fp8(C([ONE], fp8=True)).kwargs == {"fp8": False}
    for kwargs in ({}, {"fp8": False}, {"fp8": 1}):
        case = C([ONE], **kwargs)
        assert m._without_fp8(case) is case


# --------------------------------------------------------------------------- the adapters


@pytest.fixture
def registered(monkeypatch):
    """register_sft_release run afresh into a copy of the adapter table, for both releases
    under a test suffix; yields the table."""
    import dataclasses

    table = dict(adapters._ADAPTERS)
    monkeypatch.setattr(adapters, "_ADAPTERS", table)
    monkeypatch.setattr(adapters, "_ORIGINS", dict(adapters._ORIGINS))
    for release, suffix in ((m.SKYRL_03, "_t3"), (m.SKYRL_04, "_t4")):
        m.register_sft_release(dataclasses.replace(release, suffix=suffix))
    return table


@pytest.mark.parametrize("suffix, release", [("_t3", m.SKYRL_03), ("_t4", m.SKYRL_04)])
def test_a_release_registers_its_three_adapters(registered, suffix, release) -> None:
    """collate_sft, default_collator and pack_sft of a release, each on its record and
    target, with the release's versions, domain, strategies and known divergences."""
    collate = registered[f"skyrl.collate_sft{suffix}"]
    default = registered[f"skyrl.default_collator{suffix}"]
    pack = registered[f"skyrl.pack_sft{suffix}"]
    for adapter in (collate, default, pack):
        assert (adapter.framework, adapter.distribution) == ("skyrl", "skyrl")
        assert adapter.versions == release.versions
        assert adapter.importing is m.typed_dict_for_pydantic
    assert (collate.record, default.record, pack.record) == (
        "sft.collate_sft", "sft.collate_sft", "sft.pack_sft")
    assert collate.target == "skyrl.train.sft_trainer:collate_sft_batch"
    assert default.target == "skyrl.train.dataset.collators:DefaultCollator"
    assert pack.target == "skyrl.train.dataset.collators:PackedDataCollator"
    assert collate.wrap is m.collate_adapter and default.wrap is m.default_collator_adapter
    assert pack.wrap is release.pack_wrap
    assert collate.doc == (f"{release.label} left-padding SFT collate function against "
                           "collate_sft(normalize=False)")
    assert default.doc == (f"{release.label} DefaultCollator (collate + token-mean loss "
                           "normalization) against collate_sft(normalize=True)")
    assert pack.doc == f"{release.label} PackedDataCollator ({release.pack_doc}) against pack_sft"
    assert collate.forms == default.forms == ("lists",) and pack.forms == release.pack_forms
    assert _summary(collate.known) == _summary(release.collate_known(release.trainer,
                                                                     normalized=False))
    assert _summary(default.known) == _summary(release.collate_known(release.collators,
                                                                     normalized=True))
    assert pack.known == release.pack_known
    assert pack.not_provided == ("position_ids", "cu_seqlens_padded")
    assert collate.not_provided == default.not_provided == ()
    plain, normalized = C([ONE], pad_token_id=0), C([ONE], pad_token_id=0, normalize=True)
    assert collate.supports(plain) and not collate.supports(normalized)
    assert default.supports(normalized) and not default.supports(plain)
    assert pack.supports(plain) and not pack.supports(C([ONE], device="cpu"))
    assert pack.supports(C([ONE], normalize=1))  # on_cpu: nothing else


@pytest.mark.parametrize("suffix", ["_t3", "_t4"])
def test_the_registered_strategies(registered, suffix) -> None:
    """The collate adapters draw the record's cases with their normalize fixed; the packer's
    bad cases have 0/1 weights (0.4.0's also FP8 off)."""
    found = {}

    @settings(max_examples=25, derandomize=True, database=None, deadline=None)
    @given(registered[f"skyrl.collate_sft{suffix}"].valid,
           registered[f"skyrl.default_collator{suffix}"].valid,
           registered[f"skyrl.default_collator{suffix}"].invalid,
           registered[f"skyrl.pack_sft{suffix}"].invalid)
    def draw(plain, normalized, bad, bad_pack):
        assert plain.kwargs["normalize"] is False and normalized.kwargs["normalize"] is True
        if isinstance(bad.case.kwargs.get("normalize"), bool):
            assert bad.case.kwargs["normalize"] is True
        for e in m._listed(bad_pack.case) or []:
            if isinstance(e, dict) and isinstance(e.get("loss_mask"), list):
                assert not any(isinstance(v, float) for v in e["loss_mask"])
        found.setdefault("fp8", set()).add(bad_pack.case.kwargs.get("fp8"))

    draw()
    if suffix == "_t4":
        assert True not in found["fp8"]


def test_the_0_3_and_0_4_release_data() -> None:
    """0.3.0 is `~=0.3.0` with no suffix and every form; 0.4.0 `~=0.4.0`, `_v0_4`, no narrow
    form, its packer given the recipe, its bad packing calls without FP8."""
    assert (m.SKYRL_03.versions, m.SKYRL_03.suffix, m.SKYRL_03.pack_forms) == (
        "~=0.3.0", "", None)
    assert (m.SKYRL_04.versions, m.SKYRL_04.suffix) == ("~=0.4.0", "_v0_4")
    assert ops.NARROW_FORM not in m.SKYRL_04.pack_forms
    assert set(m.SKYRL_04.pack_forms) | {ops.NARROW_FORM} == set(ops.FORMS)
    built = []

    class Collator:
        def __init__(self, tokenizer, **kwargs) -> None:
            built.append(kwargs)

        def __call__(self, examples, **kwargs):
            return _packed_batch()

    m.SKYRL_04.pack_wrap(Collator)([ONE], pad_token_id=0, capacity=4, fp8_recipe="mxfp8")
    m.SKYRL_03.pack_wrap(Collator)([ONE], pad_token_id=0, capacity=4)
    assert built[0]["fp8_recipe"] == "mxfp8" and "fp8_recipe" not in built[1]
    bad = C([ex([1, 2], 2, [0.5, 1])], fp8=True)
    assert m.SKYRL_04.pack_invalid(bad).kwargs["fp8"] is False
    assert m.SKYRL_04.pack_invalid(bad).args[0][0]["loss_mask"] == [1, 1]
    assert m.SKYRL_03.pack_invalid(bad).kwargs["fp8"] is True


def test_the_registered_ffd_adapter() -> None:
    """skyrl.ffd_bins: make_seq_packer for both releases, every form, its two divergences."""
    ffd = adapters.get_adapter("skyrl.ffd_bins")
    assert ffd.target == "skyrl.train.dataset.bin_packing:make_seq_packer"
    assert ffd.wrap is m.ffd_adapter and ffd.forms is None and ffd.known == m.FFD_KNOWN
    assert ffd.fits("0.3.0") and ffd.fits("0.4.2") and not ffd.fits("0.5.0")
