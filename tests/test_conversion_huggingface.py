"""The conversion code of `batchproof.adapters.huggingface` on stand-ins of transformers' functions
(issue 39: the killers of `mutate --mutmut --harness adapters/huggingface`).

transformers is not needed here: the adapters' wraps are handed small stand-ins written after
transformers' own code (`DataCollatorWithFlattening` as in 5.24, or 5.23 with its empty-example
labels; `prepare_fa_kwargs_from_position_ids`; `find_packed_sequence_indices`; a tiny causal LM
whose logit at a token depends on that token and its position only) and asserted on what the
module docstring promises: the collator is built and handed the features the adapter says, every
compared field is read off the collator's output, the packed forward scores each label with the
logit before it, and each domain and known-divergence predicate holds on exactly the inputs its
doc names. Where transformers is installed, one test checks the stand-in collator against it.
"""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch

import batchproof.adapters as adapters_package
from batchproof.adapters import Call, huggingface
from batchproof.adapters.huggingface import (
    BOUNDARIES_FORWARD_KNOWN,
    FA_KNOWN,
    FORWARD_UPSTREAM,
    HYBRID_DOCS,
    MASK_KNOWN,
    POSITION_IDS_FORWARD_KNOWN,
    _as_list,
    _empty_3d,
    _feature,
    _leak,
    _lengths_of,
    _pairs,
    _refused,
    _segments_of_numbers,
    _sides,
    _values,
    fa_kwargs_adapter,
    first_token_is_str,
    flattened_batch,
    has_a_response,
    has_empty_prompt_with_response,
    has_empty_sample,
    has_empty_sample_before_a_response,
    has_float_or_bool_id,
    has_multi_dim_row,
    has_no_columns,
    has_no_tokens,
    has_only_empty_samples,
    is_bad,
    is_empty_batch,
    is_mrope,
    model_family,
    needs_no_tail_pad,
    pack_varlen_adapter,
    packed_forward_adapter,
    packed_indices_adapter,
    response_after_a_sample,
    skips_empty_examples,
    start_expressible,
    start_unchecked,
    token_ids_unchecked,
    without_tail_pad,
)
from batchproof.models import ModelCase, ModelSpec
from batchproof.reference.varlen import pack_varlen, packed_segments, response_logprobs
from batchproof.registry import BadCase, Case

IGNORE = -100
PROMPTS, RESPONSES = [[1, 2], [3], [4, 5]], [[6], [7, 8], [9]]  # 9 tokens

# --------------------------------------------------------------------------- stand-ins


class Flattening:
    """transformers' DataCollatorWithFlattening (5.24: empty examples skipped; with
    `skip_empty = False`, 5.23's `[separator_id] + labels[1:]` for every example), recording how
    it is built and what it is handed."""

    skip_empty = True
    built: list = []

    def __init__(self, *args, return_position_ids=True, separator_id=-100,
                 return_flash_attn_kwargs=False, return_seq_idx=False, position_ids_start=0,
                 return_tensors="pt") -> None:
        self.built.append({"return_flash_attn_kwargs": return_flash_attn_kwargs,
                           "return_seq_idx": return_seq_idx, "separator_id": separator_id,
                           "return_tensors": return_tensors,
                           "position_ids_start": position_ids_start, "args": args})
        self.return_position_ids = return_position_ids
        self.separator_id, self.flash, self.seq_idx = separator_id, return_flash_attn_kwargs, \
            return_seq_idx
        self.start, self.return_tensors = position_ids_start, return_tensors

    def __call__(self, features):
        self.built.append(features)
        if self.skip_empty:
            features = [f for f in features if len(f["input_ids"]) > 0]
            if not features:
                raise ValueError("DataCollatorWithFlattening received a batch where every "
                                 "example is empty.")
        batch = {"input_ids": [], "labels": [], "position_ids": [], "seq_idx": []}
        cu, longest = [0], 0
        for k, sample in enumerate(features):
            ids, labels = _as_list(sample["input_ids"]), _as_list(sample["labels"])
            batch["input_ids"] += ids
            batch["labels"] += [self.separator_id] + labels[1:]
            batch["position_ids"] += [self.start + i for i in range(len(ids))]
            batch["seq_idx"] += [k] * len(ids)
            cu.append(cu[-1] + len(ids))
            longest = max(longest, len(ids))
        out = {key: torch.tensor([batch[key]], dtype=torch.int64)
               for key in ("input_ids", "labels", "position_ids")}
        if self.seq_idx:
            out["seq_idx"] = torch.tensor([batch["seq_idx"]], dtype=torch.int32)
        if self.flash:
            out["cu_seq_lens_q"] = out["cu_seq_lens_k"] = torch.tensor(cu, dtype=torch.int32)
            out["max_length_q"] = out["max_length_k"] = longest
        return out


@pytest.fixture
def collator(monkeypatch) -> type[Flattening]:
    monkeypatch.setattr(Flattening, "built", [])
    return Flattening


@pytest.fixture
def collator_5_23(collator, monkeypatch) -> type[Flattening]:
    monkeypatch.setattr(Flattening, "skip_empty", False)
    return collator


def prepare_fa_kwargs(position_ids):
    """transformers' prepare_fa_kwargs_from_position_ids."""
    flat = position_ids.reshape(-1)
    starts = (flat == flat.min()).nonzero().view(-1).to(torch.int32)
    cu = torch.cat((starts, torch.tensor(flat.size(), dtype=torch.int32)))
    longest = cu.diff().max()
    return (cu, cu), (longest, longest)


def find_packed(position_ids):
    """transformers' find_packed_sequence_indices."""
    diff = torch.diff(position_ids, prepend=position_ids[:, :1] - 1, dim=-1)
    numbers = (diff != 1).cumsum(-1)
    return None if (numbers[:, -1] == 0).all() else numbers


class TinyLM(torch.nn.Module):
    """A causal LM whose logit at a token depends on that token and its position only, so that
    a packed row with restarting positions scores each sample as its own forward does."""

    def __init__(self, vocab: int = 12, dtype: torch.dtype = torch.float32,
                 model_type: str = "llama") -> None:
        super().__init__()
        torch.manual_seed(0)
        self.config = SimpleNamespace(model_type=model_type)
        self.tokens = torch.nn.Embedding(vocab, vocab, dtype=dtype)
        self.positions = torch.nn.Embedding(16, vocab, dtype=dtype)
        self.calls: list[dict] = []

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.tokens

    def forward(self, input_ids, position_ids=None, use_cache=True, **kwargs):
        self.calls.append({"input_ids": input_ids, "position_ids": position_ids,
                           "use_cache": use_cache, **kwargs})
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[-1])[None]
        return SimpleNamespace(logits=self.tokens(input_ids) + self.positions(position_ids))


def _pack(prompts=PROMPTS, responses=RESPONSES, **kwargs) -> Case:
    return Case((prompts, responses), kwargs)


def _segments(position_ids, **kwargs) -> Case:
    return Case((position_ids,), kwargs)


# --------------------------------------------------------------------------- the collator


def test_a_row_as_the_collator_reads_it() -> None:
    """A tensor row goes through .tolist() (Python ints), anything else through list()."""
    got = _as_list(torch.tensor([1, 2]))
    assert got == [1, 2] and all(type(v) is int for v in got)
    assert _as_list((3, 4)) == [3, 4] and isinstance(_as_list((3, 4)), list)
    assert _as_list(range(2)) == [0, 1]


def test_a_feature_is_prompt_and_response_with_the_prompt_ignored() -> None:
    """Lists become lists; two tensors stay tensors, the ignored prompt in the response's
    dtype; a tensor beside a list becomes lists."""
    assert _feature((1, 2), [3]) == {"input_ids": [1, 2, 3], "labels": [-100, -100, 3]}
    feature = _feature(torch.tensor([1, 2], dtype=torch.int32),
                       torch.tensor([3], dtype=torch.int32))
    assert feature["input_ids"].tolist() == [1, 2, 3]
    assert feature["labels"].tolist() == [-100, -100, 3]
    assert feature["labels"].dtype == torch.int32
    mixed = _feature(torch.tensor([1]), [2])
    assert mixed == {"input_ids": [1, 2], "labels": [-100, 2]}
    assert type(mixed["input_ids"][0]) is int
    mixed = _feature([1], torch.tensor([2]))
    assert mixed == {"input_ids": [1, 2], "labels": [-100, 2]}
    assert type(mixed["labels"][1]) is int


def test_the_collator_is_built_as_the_adapter_says(collator) -> None:
    """flash-attn kwargs and seq_idx on, the ignore index as separator, PyTorch tensors, the
    start passed on; one feature per sample."""
    pack_varlen_adapter(collator)(PROMPTS, RESPONSES, position_ids_start=2)
    built, features = collator.built
    assert built == {"return_flash_attn_kwargs": True, "return_seq_idx": True,
                     "separator_id": -100, "return_tensors": "pt", "position_ids_start": 2,
                     "args": ()}
    assert features == [_feature(p, r) for p, r in zip(PROMPTS, RESPONSES)]


def test_the_default_start_is_zero(collator) -> None:
    pack_varlen_adapter(collator)(PROMPTS, RESPONSES)
    assert collator.built[0]["position_ids_start"] == 0


@pytest.mark.parametrize("start", [0, 3])
@pytest.mark.parametrize("form", ["lists", "int64", "int32"])
def test_the_collators_row_is_the_contracts(collator, form: str, start: int) -> None:
    """Every compared field, read off the collator's output, equals the contract's."""
    prompts, responses = [[1, 2], [3], [4]], [[5], [6, 7], []]
    if form != "lists":
        dtype = getattr(torch, form)
        prompts = [torch.tensor(p, dtype=dtype) for p in prompts]
        responses = [torch.tensor(r, dtype=dtype) for r in responses]
    out = pack_varlen_adapter(collator)(prompts, responses, position_ids_start=start,
                                        pad_to_multiple=4, pad_token_id=5)
    want = pack_varlen(prompts, responses, position_ids_start=start)
    for key in ("input_ids", "position_ids", "cu_seqlens", "target_index", "predict_index",
                "sample_index"):
        assert torch.equal(out[key].reshape(-1), want[key].reshape(-1)), key
    assert out["sample_index"].dtype == torch.int64
    assert out.get_non_tensor("max_seqlen") == want.get_non_tensor("max_seqlen") == 3
    assert out.batch_size == torch.Size([])


def test_no_device_argument(collator) -> None:
    with pytest.raises(NotImplementedError,
                       match=r"^the collator returns CPU tensors \(no device argument\)$"):
        pack_varlen_adapter(collator)(PROMPTS, RESPONSES, device="cpu")
    assert collator.built == []


def test_targets_and_samples_are_read_off_the_collator() -> None:
    """target_index is where the collator's labels are not ignored, sample_index its seq_idx
    there (int64), predict_index one before."""
    class Relabelled(Flattening):
        def __call__(self, features):
            out = super().__call__(features)
            labels = torch.full_like(out["labels"], IGNORE)
            labels[0, 1] = 7
            return {**out, "labels": labels, "seq_idx": torch.full_like(out["seq_idx"], 2)}

    out = pack_varlen_adapter(Relabelled)(PROMPTS, RESPONSES)
    assert out["target_index"].tolist() == [1] and out["predict_index"].tolist() == [0]
    assert out["sample_index"].tolist() == [2] and out["sample_index"].dtype == torch.int64


def test_an_empty_example_of_5_23_leaves_its_later_labels_to_no_sample(collator_5_23) -> None:
    """5.23: one label more than tokens per empty example; the labels past the row have no
    seq_idx, so their targets belong to no sample (-1)."""
    out = pack_varlen_adapter(collator_5_23)([[1], [], [2]], [[3], [], [4, 5]])
    assert out["input_ids"].tolist() == [[1, 3, 2, 4, 5]]
    assert out["cu_seqlens"].tolist() == [0, 2, 2, 5]
    # labels [-100, 3, -100, -100, 4, 5]: six for five tokens, the last past the row
    assert out["target_index"].tolist() == [1, 4, 5]
    assert out["sample_index"].tolist() == [0, 2, -1]
    assert out["sample_index"].dtype == torch.int64
    two = pack_varlen_adapter(collator_5_23)([[1], [], [], [2]], [[3], [], [], [4, 5]])
    assert two["target_index"].tolist() == [1, 5, 6] and two["sample_index"].tolist() == [
        0, -1, -1]


def test_an_empty_example_of_5_24_renumbers(collator) -> None:
    """5.24 skips the empty example: its seq_idx then numbers the examples that remain."""
    out = pack_varlen_adapter(collator)([[1], [], [2]], [[3], [], [4, 5]])
    assert out["target_index"].tolist() == [1, 3, 4]
    assert out["sample_index"].tolist() == [0, 1, 1]


def test_the_flattened_batch_names_transformers_keys() -> None:
    """cu_seq_lens_q is cu_seqlens, max_length_q max_seqlen (a non-tensor), predict = target - 1."""
    out = {"input_ids": torch.tensor([[5, 6, 7]]), "position_ids": torch.tensor([[0, 1, 0]]),
           "cu_seq_lens_q": torch.tensor([0, 2, 3]), "cu_seq_lens_k": torch.tensor([9]),
           "max_length_q": 2, "max_length_k": 9}
    td = flattened_batch(out, torch.tensor([1, 2]), torch.tensor([0, 1]))
    assert sorted(td.keys()) == ["cu_seqlens", "input_ids", "max_seqlen", "position_ids",
                                 "predict_index", "sample_index", "target_index"]
    assert td["input_ids"].tolist() == [[5, 6, 7]] and td["position_ids"].tolist() == [[0, 1, 0]]
    assert td["cu_seqlens"].tolist() == [0, 2, 3]
    assert td["predict_index"].tolist() == [0, 1] and td["target_index"].tolist() == [1, 2]
    assert td["sample_index"].tolist() == [0, 1]
    assert td.get_non_tensor("max_seqlen") == 2 and td.batch_size == torch.Size([])


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="transformers is not installed: the stand-in is not compared")
def test_the_stand_in_collator_is_transformers() -> None:
    """Where transformers is installed, its collator and the stand-in give the same batch."""
    from transformers.data.data_collator import DataCollatorWithFlattening

    real = pack_varlen_adapter(DataCollatorWithFlattening)(PROMPTS, RESPONSES,
                                                           position_ids_start=1)
    stand_in = pack_varlen_adapter(Flattening)(PROMPTS, RESPONSES, position_ids_start=1)
    for key in real.keys():
        if key == "max_seqlen":
            assert real.get_non_tensor(key) == stand_in.get_non_tensor(key)
        else:
            assert torch.equal(real[key], stand_in[key]), key


# --------------------------------------------------------------------------- pack predicates


def test_a_length_or_none() -> None:
    assert huggingface._length([1, 2]) == 2 and huggingface._length(torch.zeros(3, 2)) == 3
    assert huggingface._length(5) is None and huggingface._length(torch.tensor(1)) is None


def test_a_rows_values_flattened() -> None:
    """A 2-D tensor's values flattened, a 1-D one's and a list's as they are, [] for a value
    that has none (a scalar, a nested tensor)."""
    assert _values(torch.tensor([[1, 2], [3, 4]])) == [1, 2, 3, 4]
    assert _values(torch.tensor([[[1], [2]]])) == [1, 2]
    assert _values(torch.tensor([1, 2])) == [1, 2] and _values([1, [2]]) == [1, [2]]
    assert _values(torch.tensor(3)) == [] and _values(7) == []
    nested = torch.nested.nested_tensor([torch.tensor([1, 2]), torch.tensor([3])],
                                        layout=torch.jagged)
    assert _values(nested) == []


def test_sides_and_pairs() -> None:
    """Rows of prompts and responses, from a Case or a Call; none when either has no rows."""
    assert _sides(_pack([[1]], ([2],))) == ([[1]], [[2]])
    call = Call.of(_pack([[1], [2]], [[3], [4]]), pack_varlen)
    assert _sides(call) == ([[1], [2]], [[3], [4]])
    assert _pairs(call) == [([1], [3]), ([2], [4])]
    bare = Call.of(Case((), {"prompts": [[1]], "responses": [[2]]}))  # no contract: kwargs only
    assert _pairs(bare) == [([1], [2])]
    assert _sides(_pack(5, [[1]])) is None and _sides(_pack([[1]], None)) is None
    assert _pairs(_pack([[1]], "ab")) == [] and _pairs(_pack(3, [[1]])) == []


def test_the_domain_accepts_what_the_collator_expresses() -> None:
    """No tail pad (a multiple dividing the 9 tokens), a valid pad id, equal counts, rows of
    lists, tuples or tensors."""
    assert needs_no_tail_pad(_pack())
    assert needs_no_tail_pad(_pack(pad_to_multiple=3, pad_token_id=-2**63))
    assert needs_no_tail_pad(_pack(pad_to_multiple=9, pad_token_id=2**63 - 1))
    assert needs_no_tail_pad(_pack(tuple(PROMPTS), tuple(RESPONSES)))
    assert needs_no_tail_pad(_pack(torch.tensor([[1, 2]]), torch.tensor([[3]])))
    assert needs_no_tail_pad(_pack([[IGNORE]], [[1]]))  # a prompt id of -100 is no target
    assert needs_no_tail_pad(_pack([[1]], [[-100.0]]))  # a float: token_ids_unchecked's
    assert needs_no_tail_pad(_pack([], []))
    assert needs_no_tail_pad(Call.of(_pack(), pack_varlen))


@pytest.mark.parametrize("kwargs", [
    {"device": "cpu"}, {"pad_token_id": 2**63}, {"pad_token_id": -2**63 - 1},
    {"pad_token_id": True}, {"pad_token_id": 0.0}, {"pad_token_id": None},
    {"pad_to_multiple": 0}, {"pad_to_multiple": -3}, {"pad_to_multiple": True},
    {"pad_to_multiple": 3.0}, {"pad_to_multiple": 2}, {"pad_to_multiple": 4},
    {"pad_to_multiple": None},
])
def test_the_domain_refuses_a_tail_pad_a_device_and_bad_keywords(kwargs) -> None:
    assert not needs_no_tail_pad(_pack(**kwargs))


@pytest.mark.parametrize("prompts, responses", [
    ([[1]], [[2], [3]]), ([[1], [2]], [[3]]), ("ab", "cd"), (5, [[1]]), ([[1]], None),
    ({"a": 1}, [[1]]), (torch.tensor(1), torch.tensor(2)), ([[1]], [3]), ([2], [[1]]),
    ([[1]], [[IGNORE]]), ([[1]], [torch.tensor([2, IGNORE])]),
    ([[1]], [torch.tensor([[2], [IGNORE]])]), ([[1], [2]], [[3], [4, IGNORE]]),
])
def test_the_domain_refuses_what_the_collator_cannot_express(prompts, responses) -> None:
    """Counts that differ, sides that are no sequences of rows, a row with no length, a
    response id of -100 (the ignore index: it would not be a target)."""
    assert not needs_no_tail_pad(_pack(prompts, responses))


def test_the_domains_defaults_without_the_contract() -> None:
    """A Call without the contract's signature reads pad_to_multiple 1 and pad_token_id 0."""
    bare = Call.of(Case((), {"prompts": [[1]], "responses": [[2, 3]]}))
    assert needs_no_tail_pad(bare)


def test_empty_samples_and_batches() -> None:
    assert has_empty_sample(_pack([[1], []], [[2], []]))
    assert not has_empty_sample(_pack([[1], []], [[2], [3]]))
    assert not has_empty_sample(_pack([[]], [[1]])) and not has_empty_sample(_pack([[1]], [[]]))
    assert not has_empty_sample(_pack(5, [[]]))
    assert is_empty_batch(_pack([], [])) and is_empty_batch(_pack((), [[1]]))
    assert not is_empty_batch(_pack()) and not is_empty_batch(_pack(3, []))
    assert is_empty_batch(Call.of(_pack([], []), pack_varlen))
    assert has_only_empty_samples(_pack([[], []], [[], []]))
    assert not has_only_empty_samples(_pack([[], [1]], [[], [2]]))
    assert not has_only_empty_samples(_pack([], []))
    assert has_only_empty_samples(_pack([[]], [[]]))  # one sample is at least one
    assert not has_only_empty_samples(_pack([[]], [[1]]))
    assert not has_only_empty_samples(_pack([[1]], [[]]))


def test_an_empty_prompt_with_a_response() -> None:
    assert has_empty_prompt_with_response(_pack([[1], []], [[2], [3]]))
    assert not has_empty_prompt_with_response(_pack([[]], [[]]))
    assert not has_empty_prompt_with_response(_pack([[1]], [[2]]))
    assert not has_empty_prompt_with_response(_pack([[]], [5]))  # a response with no length


def test_an_empty_sample_before_a_response() -> None:
    assert has_empty_sample_before_a_response(_pack([[1], [], [2]], [[3], [], [4]]))
    assert has_empty_sample_before_a_response(_pack([[], [], [2]], [[], [], [4]]))
    assert not has_empty_sample_before_a_response(_pack([[1], [2], []], [[3], [4], []]))
    assert not has_empty_sample_before_a_response(_pack([[], [2]], [[], []]))
    assert not has_empty_sample_before_a_response(_pack([[], [1]], [[2], [3]]))
    assert not has_empty_sample_before_a_response(_pack([[1], []], [[], [3]]))
    assert not has_empty_sample_before_a_response(_pack([[1]], [[2]]))


def test_float_or_bool_ids() -> None:
    """A float or bool id in a list or tuple row, or a float or bool tensor row."""
    assert has_float_or_bool_id(_pack([[1.0]], [[2]]))
    assert has_float_or_bool_id(_pack([[1]], [(2, True)]))
    assert has_float_or_bool_id(_pack([torch.tensor([1.0])], [[2]]))
    assert has_float_or_bool_id(_pack([[1]], [torch.tensor([True])]))
    assert has_float_or_bool_id(_pack([[1], [2]], [[3], [4.5]]))
    assert not has_float_or_bool_id(_pack())
    assert not has_float_or_bool_id(_pack([torch.tensor([1])], [torch.tensor([2])]))
    assert not has_float_or_bool_id(_pack(["ab"], [[1]]))  # a str row: not a float
    assert not has_float_or_bool_id(_pack(5, [[1.0]]))  # no pairs


def test_a_str_first_token() -> None:
    """The row's first token (empty rows skipped, tensors included) is a str."""
    assert first_token_is_str(_pack([["a"]], [[1]]))
    assert first_token_is_str(_pack(["ab"], [[1]]))
    assert first_token_is_str(_pack([[]], [["a", 1]]))
    assert first_token_is_str(_pack([torch.tensor([], dtype=torch.int64)], [["a"]]))
    assert first_token_is_str(_pack([[], []], [[], ("a",)]))
    assert not first_token_is_str(_pack([[1]], [["a"]]))
    assert not first_token_is_str(_pack([torch.tensor([1])], [["a"]]))
    assert not first_token_is_str(_pack([[], []], [[], []]))
    assert not first_token_is_str(_pack([[1.0, "a"]], [[]]))
    assert token_ids_unchecked(_pack([["a"]], [[1]]))
    assert token_ids_unchecked(_pack([[1.5]], [[1]]))
    assert not token_ids_unchecked(_pack())


def test_a_multi_dim_row() -> None:
    assert has_multi_dim_row(_pack([torch.zeros(1, 2, dtype=torch.int64)], [[1]]))
    assert has_multi_dim_row(_pack([[1]], [torch.zeros(2, 1)]))
    assert not has_multi_dim_row(_pack([torch.tensor([1])], [[[1]]]))
    assert not has_multi_dim_row(_pack())


def test_without_tail_pad() -> None:
    """A multiple that needs a tail pad is dropped; the rest of the case is kept."""
    case = Case((PROMPTS, RESPONSES), {"pad_to_multiple": 4, "pad_token_id": 3}, "label")
    out = without_tail_pad(case)
    assert (out.args, dict(out.kwargs), out.label) == ((PROMPTS, RESPONSES),
                                                       {"pad_token_id": 3}, "label")
    for kwargs in ({"pad_to_multiple": 3}, {"pad_to_multiple": 9}, {}, {"pad_token_id": 1}):
        kept = Case((PROMPTS, RESPONSES), kwargs, "x")
        assert without_tail_pad(kept) is kept


@pytest.mark.parametrize("version, skips", [
    ("5.24.0", True), ("5.24", True), ("5.25.1", True), ("6.0", True), ("5.23.0", False),
    ("5.23.9", False), ("4.99", False), ("not installed", False), ("-", False),
])
def test_skips_empty_examples_from_5_24(monkeypatch, version: str, skips: bool) -> None:
    asked = []
    monkeypatch.setattr(adapters_package, "distribution_version",
                        lambda name: asked.append(name) or version)
    assert skips_empty_examples() is skips
    assert asked == ["transformers"]


@pytest.mark.parametrize("start, unchecked", [
    (True, True), (False, True), (2.0, True), (-1, True), (0, False), (3, False),
    (None, False), ("1", False),
])
def test_an_unchecked_start(start, unchecked: bool) -> None:
    """A bool, a float or a negative start; a str only when there is no token to add it to."""
    assert start_unchecked(_pack(position_ids_start=start)) is unchecked


def test_a_str_start_with_no_token() -> None:
    assert start_unchecked(_pack([[], []], [[], []], position_ids_start="1"))
    assert start_unchecked(_pack([], [], position_ids_start="1"))
    assert not start_unchecked(_pack([[]], [[1]], position_ids_start="1"))
    assert not start_unchecked(_pack([[1]], [[]], position_ids_start="1"))
    assert not start_unchecked(_pack([[1]], [[2]], position_ids_start="1"))
    assert not start_unchecked(_pack(5, [[]], position_ids_start="1"))
    assert not start_unchecked(_pack([[]], 5, position_ids_start="1"))
    assert not start_unchecked(_pack([[]], [[]], position_ids_start=None))
    assert not start_unchecked(_pack([[]], [[]]))  # the default start, 0
    assert not start_unchecked(Call.of(Case((), {"prompts": [[]], "responses": [[]]})))


# --------------------------------------------------------------------------- boundary detectors

SEGMENT_ROWS = [torch.tensor([[0, 1, 2, 0, 1, 0]]), torch.tensor([[0, 1], [0, 0]]),
                torch.tensor([[2, 3, 2], [2, 3, 4]]), torch.tensor([[0]])]


@pytest.mark.parametrize("positions", SEGMENT_ROWS)
def test_the_flash_attention_path_reads_the_contracts_boundaries(positions) -> None:
    start = int(positions.min())
    out = fa_kwargs_adapter(prepare_fa_kwargs)(positions, position_ids_start=start)
    want = packed_segments(positions, position_ids_start=start)
    assert torch.equal(out["cu_seqlens"].long(), want["cu_seqlens"].long())
    assert out.get_non_tensor("max_seqlen") == want.get_non_tensor("max_seqlen")
    assert type(out.get_non_tensor("max_seqlen")) is int
    assert sorted(out.keys()) == ["cu_seqlens", "max_seqlen"]


def test_the_flash_attention_path_is_read_off_prepare() -> None:
    def prepare(position_ids):
        return (torch.tensor([0, 4]), torch.tensor([9])), (torch.tensor(4), torch.tensor(9))

    out = fa_kwargs_adapter(prepare)(torch.zeros(1, 4, dtype=torch.int64))
    assert out["cu_seqlens"].tolist() == [0, 4] and out.get_non_tensor("max_seqlen") == 4


@pytest.mark.parametrize("positions", SEGMENT_ROWS)
def test_the_mask_path_reads_the_contracts_segments(positions) -> None:
    start = int(positions.min())
    out = packed_indices_adapter(find_packed)(positions, position_ids_start=start)
    want = packed_segments(positions, position_ids_start=start)
    for key in ("cu_seqlens", "seq_idx"):
        assert torch.equal(out[key], want[key]), key
        assert out[key].dtype == torch.int32, key
    assert out.get_non_tensor("max_seqlen") == want.get_non_tensor("max_seqlen")


def test_one_sequence_per_row_is_all_zeros() -> None:
    """find_packed_sequence_indices' None: every row one sequence, numbered 0."""
    seen = []
    out = packed_indices_adapter(lambda p: seen.append(p) or None)(torch.zeros(2, 3))
    assert len(seen) == 1
    assert out["seq_idx"].tolist() == [[0, 0, 0], [0, 0, 0]]
    assert out["cu_seqlens"].tolist() == [0, 3, 6] and out.get_non_tensor("max_seqlen") == 3


def test_segments_of_numbers_across_rows_and_shapes() -> None:
    """A segment starts where the number changes and at every row; cu_seqlens and seq_idx are
    int32; no element is cu_seqlens [0] and max_seqlen 0."""
    out = _segments_of_numbers(torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 2, 2]]))
    assert out["cu_seqlens"].tolist() == [0, 2, 5, 6, 8, 10]
    assert out["cu_seqlens"].dtype == out["seq_idx"].dtype == torch.int32
    assert out["seq_idx"].tolist() == [[0, 0, 1, 1, 1], [0, 1, 1, 2, 2]]
    assert out.get_non_tensor("max_seqlen") == 3
    assert _segments_of_numbers(torch.tensor([[0, 0], [0, 0]]))["cu_seqlens"].tolist() == [
        0, 2, 4]
    three = _segments_of_numbers(torch.tensor([[[0, 0, 1]], [[0, 1, 1]]]))
    assert three["cu_seqlens"].tolist() == [0, 2, 3, 4, 6]
    scalar = _segments_of_numbers(torch.tensor(4))
    assert scalar["cu_seqlens"].tolist() == [0, 1] and scalar.get_non_tensor("max_seqlen") == 1
    assert scalar["seq_idx"].tolist() == 4
    for empty in (torch.zeros(0, 3, dtype=torch.int64), torch.zeros(2, 0, dtype=torch.int64),
                  torch.zeros(3, 0, 2, dtype=torch.int64)):
        out = _segments_of_numbers(empty)
        assert out["cu_seqlens"].tolist() == [0] and out["cu_seqlens"].dtype == torch.int32
        assert out.get_non_tensor("max_seqlen") == 0
        assert out["seq_idx"].shape == empty.shape and out["seq_idx"].dtype == torch.int32
    assert out.batch_size == torch.Size([])


@pytest.mark.parametrize("start, expressible", [
    (0, True), (4, True), (-1, False), (True, False), (1.0, False), (None, False), ("0", False),
])
def test_the_detectors_domain(start, expressible: bool) -> None:
    assert start_expressible(_segments(torch.zeros(1, 2), position_ids_start=start)) \
        is expressible


def test_the_detectors_default_start() -> None:
    assert start_expressible(_segments(torch.zeros(1, 2)))
    assert start_expressible(Call.of(_segments(torch.zeros(1, 2)), packed_segments))
    assert start_expressible(Call.of(Case((), {})))  # no contract: 0


def test_position_shapes() -> None:
    """mRoPE (3-D), no tokens (2-D of no element), no columns ((B, 0)), an empty 3-D tensor."""
    mrope, empty3 = torch.zeros(3, 1, 2), torch.zeros(3, 0, 2)
    assert is_mrope(_segments(mrope)) and is_mrope(_segments(empty3))
    assert not is_mrope(_segments(torch.zeros(1, 2))) and not is_mrope(_segments([[[0]]]))
    assert _empty_3d(_segments(empty3)) and not _empty_3d(_segments(mrope))
    assert not _empty_3d(_segments(torch.zeros(0, 2))) and not _empty_3d(_segments([]))
    assert has_no_tokens(_segments(torch.zeros(0, 2))) and has_no_tokens(
        _segments(torch.zeros(2, 0)))
    assert not has_no_tokens(_segments(torch.zeros(1, 2))) and not has_no_tokens(
        _segments(empty3)) and not has_no_tokens(_segments([[]]))
    assert not has_no_tokens(_segments(torch.zeros(0)))
    assert has_no_columns(_segments(torch.zeros(2, 0))) and has_no_columns(
        _segments(torch.zeros(0, 0)))
    assert not has_no_columns(_segments(torch.zeros(0, 2)))
    assert not has_no_columns(_segments(torch.zeros(3, 2, 0))) and not has_no_columns(
        _segments([[]]))
    assert is_mrope(Call.of(_segments(mrope), packed_segments))
    assert has_no_columns(Case((), {"position_ids": torch.zeros(1, 0)}))


def test_bad_inputs() -> None:
    assert is_bad(BadCase(_segments(torch.zeros(1, 2)), ValueError))
    assert not is_bad(_segments(torch.zeros(1, 2)))
    assert is_bad(Call.of(BadCase(_segments([[0]]), TypeError), packed_segments))


def test_the_detectors_known_divergences() -> None:
    """mRoPE planes (not the empty ones, which raise), no tokens, unchecked positions (the mask
    path's only for tensors)."""
    fa = {k.name: k.applies for k in FA_KNOWN}
    mask = {k.name: k.applies for k in MASK_KNOWN}
    mrope, empty3 = _segments(torch.zeros(3, 1, 2)), _segments(torch.zeros(3, 0, 2))
    assert fa["mrope_planes_read_as_rows"](mrope)
    assert not fa["mrope_planes_read_as_rows"](empty3)
    assert fa["no_tokens_raises"](empty3) and fa["no_tokens_raises"](_segments(torch.zeros(0, 2)))
    assert not fa["no_tokens_raises"](mrope)
    bad_list, bad_tensor = BadCase(_segments([[0]]), TypeError), BadCase(
        _segments(torch.tensor([[1.5]])), TypeError)
    assert fa["positions_unchecked"](bad_list) and fa["positions_unchecked"](bad_tensor)
    assert mask["positions_unchecked"](bad_tensor) and not mask["positions_unchecked"](bad_list)
    assert not mask["positions_unchecked"](_segments(torch.zeros(1, 2)))
    assert mask["mrope_planes_misread"](empty3) and mask["no_columns_raises"](
        _segments(torch.zeros(2, 0)))


# --------------------------------------------------------------------------- packed forwards

FORWARD_PROMPTS, FORWARD_RESPONSES = [[1, 2], [3], [4, 5, 6], [7]], [[8, 9], [], [10], [11, 3]]


@pytest.mark.parametrize("boundaries", [False, True])
def test_the_packed_forward_is_the_per_sample_forwards(collator, boundaries: bool) -> None:
    """One packed row of the samples with tokens, each label scored by the logit before it,
    right-aligned per sample: on a model without cross-token state, the contract's numbers."""
    model = TinyLM()
    out = packed_forward_adapter(collator, boundaries=boundaries)(
        model, FORWARD_PROMPTS, FORWARD_RESPONSES, pad_to_multiple=4, packing="rows")
    (call,) = model.calls
    want = response_logprobs(model, FORWARD_PROMPTS, FORWARD_RESPONSES)
    assert out.shape == want.shape == (4, 2) and out.dtype == torch.float32
    assert torch.allclose(out, want, atol=1e-6, rtol=0), (out, want)
    assert out[1].tolist() == [0.0, 0.0] and out[2, 0].item() == 0.0
    built, features = collator.built
    assert built == {"return_flash_attn_kwargs": boundaries, "return_seq_idx": boundaries,
                     "separator_id": -100, "return_tensors": "pt", "position_ids_start": 0,
                     "args": ()}
    assert features == [{"input_ids": p + r, "labels": [IGNORE] * len(p) + r}
                        for p, r in zip(FORWARD_PROMPTS, FORWARD_RESPONSES)]
    keys = {"input_ids", "position_ids", "use_cache"}
    if boundaries:
        keys |= {"cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx"}
        assert call["cu_seq_lens_q"].tolist() == [0, 4, 5, 9, 12]
        assert call["max_length_q"] == 4 and call["seq_idx"].shape == (1, 12)
    assert set(call) == keys and call["use_cache"] is False
    assert call["position_ids"].tolist() == [[0, 1, 2, 3, 0, 0, 1, 2, 3, 0, 1, 2]]


def test_the_packed_forward_drops_empty_samples_and_scores_floats(collator) -> None:
    """An empty sample is no feature; a float64 model's scores come back float32."""
    model = TinyLM(dtype=torch.float64)
    prompts, responses = [[1], [], [2]], [[3], [], [4, 5]]
    out = packed_forward_adapter(collator)(model, prompts, responses)
    want = response_logprobs(model, prompts, responses)
    assert out.dtype == torch.float32 and out.shape == (3, 2)
    assert torch.allclose(out, want, atol=1e-6, rtol=0)
    assert collator.built[0]["return_flash_attn_kwargs"] is False  # positions only, by default
    assert collator.built[0]["return_seq_idx"] is False
    assert collator.built[1] == [{"input_ids": [1, 3], "labels": [IGNORE, 3]},
                                 {"input_ids": [2, 4, 5], "labels": [IGNORE, 4, 5]}]


def test_the_packed_forward_reads_tensor_rows(collator) -> None:
    model = TinyLM()
    prompts = [torch.tensor([1, 2]), torch.tensor([3])]
    responses = [torch.tensor([4]), torch.tensor([5, 6])]
    out = packed_forward_adapter(collator)(model, prompts, responses)
    assert torch.allclose(out, response_logprobs(model, prompts, responses), atol=1e-6, rtol=0)
    assert collator.built[1][0] == {"input_ids": [1, 2, 4], "labels": [IGNORE, IGNORE, 4]}


def test_nothing_to_score_is_no_forward(collator) -> None:
    """No response token: a (B, 0) float32 result, and neither collator nor model is used."""
    model = TinyLM()
    out = packed_forward_adapter(collator)(model, [[1], [2]], [[], []])
    assert out.shape == (2, 0) and out.dtype == torch.float32 and out.device == torch.device(
        "cpu")
    assert collator.built == [] and model.calls == []
    assert packed_forward_adapter(collator)(model, [], []).shape == (0, 0)


@pytest.mark.parametrize("with_grad", [False, True])
def test_the_packed_forward_follows_with_grad(collator, with_grad: bool) -> None:
    out = packed_forward_adapter(collator)(TinyLM(), [[1]], [[2, 3]], with_grad=with_grad)
    assert out.requires_grad is with_grad
    assert not packed_forward_adapter(collator)(TinyLM(), [[1]], [[2]]).requires_grad  # default


@pytest.fixture
def float64_default():
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(saved)


def test_the_scores_are_float32_whatever_the_default_dtype(collator, float64_default) -> None:
    """The result, its pads and an empty result, are float32 under a float64 default."""
    model = TinyLM(dtype=torch.float32)
    out = packed_forward_adapter(collator)(model, [[1], [2]], [[3], [4, 5]])
    assert out.dtype == torch.float32 and out[0, 0].item() == 0.0
    assert packed_forward_adapter(collator)(model, [[1]], [[]]).dtype == torch.float32


def test_nothing_to_score_is_on_the_models_device(collator) -> None:
    """The (B, 0) result of a model whose parameters are on another device is made there."""
    with torch.device("meta"):
        model = TinyLM()
    assert packed_forward_adapter(collator)(model, [[1]], [[]]).device == torch.device("meta")


def test_labels_are_not_passed_to_the_model(collator) -> None:
    """The labels are read by the adapter (the logit before each scored label), not passed on;
    non-tensor entries of the batch (max_length_q) reach the model as they are."""
    model = TinyLM()
    packed_forward_adapter(collator, boundaries=True)(model, [[1]], [[2]])
    (call,) = model.calls
    assert "labels" not in call and call["max_length_q"] == 2 and call["max_length_k"] == 2


def _forward(model, prompts=FORWARD_PROMPTS, responses=FORWARD_RESPONSES) -> Case:
    return Case((model, prompts, responses), {})


def test_the_models_family() -> None:
    """A ModelSpec's arch; a model's config.model_type, Qwen3.5's text config read as qwen3_5;
    None for anything else."""
    assert model_family(_forward(SimpleNamespace(arch="lfm2"))) == "lfm2"
    assert model_family(ModelCase((FORWARD_PROMPTS, FORWARD_RESPONSES), {},
                                  model=ModelSpec("mamba2", "eager"))) == "mamba2"
    assert model_family(_forward(TinyLM(model_type="qwen3_5_text"))) == "qwen3_5"
    assert model_family(_forward(TinyLM(model_type="bamba"))) == "bamba"
    assert model_family(_forward(SimpleNamespace(arch=3, config=SimpleNamespace(
        model_type="llama")))) == "llama"
    assert model_family(_forward(SimpleNamespace(config=SimpleNamespace(model_type=5)))) is None
    assert model_family(_forward(SimpleNamespace(config=None))) is None
    assert model_family(_forward(None)) is None
    assert model_family(Call.of(_forward(SimpleNamespace(arch="x")),
                                huggingface._logprobs_contract)) == "x"


def test_lengths_and_responses_after_a_sample() -> None:
    assert _lengths_of(_forward(None)) == [(2, 2), (1, 0), (3, 1), (1, 2)]
    assert _lengths_of(_forward(None, 5, [[1]])) == [] and _lengths_of(
        _forward(None, [[1]], None)) == []
    assert response_after_a_sample(_forward(None))
    assert response_after_a_sample(_forward(None, [[1], [2]], [[], [3]]))
    assert not response_after_a_sample(_forward(None, [[1], [2]], [[3], []]))
    assert not response_after_a_sample(_forward(None, [[], [2]], [[], [3]]))
    assert not response_after_a_sample(_forward(None, [[2]], [[3]]))
    assert response_after_a_sample(_forward(None, [[1], [2]], [[3], [4]]))  # p == r counts
    assert not response_after_a_sample(_forward(None, 5, 5))
    assert has_a_response(_forward(None)) and has_a_response(_forward(None, [[1], []], [[], [2]]))
    assert not has_a_response(_forward(None, [[1]], [[]]))
    assert not has_a_response(_forward(None, 5, [[1]]))


def test_the_leaks_and_refusals() -> None:
    """Every hybrid family leaks with positions only; with boundaries all but Mamba2 refuse
    (ValueError) and Mamba2 still leaks; each applies to its own family only."""
    leaks = {k.name: k for k in POSITION_IDS_FORWARD_KNOWN}
    assert list(leaks) == [f"{a}_state_crosses_packed_samples" for a in HYBRID_DOCS]
    names = [k.name for k in BOUNDARIES_FORWARD_KNOWN]
    assert names == [f"{a}_packed_boundaries_refused" for a in HYBRID_DOCS if a != "mamba2"] + [
        "mamba2_state_crosses_packed_samples"]
    packed, alone = (FORWARD_PROMPTS, FORWARD_RESPONSES), ([[1]], [[2]])
    for arch in HYBRID_DOCS:
        leak, refused = _leak(arch), _refused(arch)
        assert leak.name == f"{arch}_state_crosses_packed_samples"
        assert refused.name == f"{arch}_packed_boundaries_refused"
        assert leak.applies(_forward(SimpleNamespace(arch=arch), *packed))
        assert not leak.applies(_forward(SimpleNamespace(arch=arch), *alone))
        assert not leak.applies(_forward(SimpleNamespace(arch="llama"), *packed))
        assert refused.applies(_forward(SimpleNamespace(arch=arch), *alone))
        assert not refused.applies(_forward(SimpleNamespace(arch=arch), [[1]], [[]]))
        assert not refused.applies(_forward(SimpleNamespace(arch="llama"), *alone))
        assert (leak.kind, leak.fields, leak.raises, leak.accepts, leak.upstream) == (
            "valid", ("",), (), False, FORWARD_UPSTREAM)
        assert (refused.kind, refused.raises, refused.fields, refused.accepts,
                refused.upstream) == ("valid", (ValueError,), (), False, FORWARD_UPSTREAM)
    other = _leak("lfm2")
    assert not other.applies(_forward(SimpleNamespace(arch="mamba2"), *packed))


def test_the_leak_and_refusal_docs() -> None:
    assert _leak("lfm2").doc == (
        "LFM2's short convolution (kernel 3): transformers' PyTorch path gives these layers no "
        "boundaries and runs them over the whole packed row, so every sample after the first "
        "starts from the previous sample's state and its logprobs differ from its own forward "
        "(the first sample's agree). Not safe to pack with this path; score one sample per row "
        "(impl's packing='auto' / 'rows'). Found by batchproof check (5.23.0, 5.24.0).")
    assert _leak("mamba2", also=", X").doc.count("(the first sample's agree), X. Not safe") == 1
    assert _refused("bamba").doc == (
        "given the collator's cu_seq_lens / seq_idx, the PyTorch fallback of Bamba's Mamba2 "
        "mixer (scan and convolution) refuses them: ValueError \"`causal_conv1d_fn` can't keep "
        "packed sequences apart without `causal_conv1d`\" (a loud error, the right answer "
        "without the kernels). Found by batchproof check (5.23.0, 5.24.0).")
