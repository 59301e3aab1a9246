"""SkyRL SFT adapters (PyPI distribution `skyrl`; see docs/frameworks-skyrl-sft.md).

    sft.collate_sft (normalize=False)  skyrl.train.sft_trainer.collate_sft_batch(examples,
                                       tokenizer): pad id on a stand-in tokenizer;
                                       sequences -> input_ids; its int64 loss_mask is compared
                                       as float32 (its values are what is under test)
    sft.collate_sft (normalize=True)   skyrl.train.dataset.collators.DefaultCollator(tokenizer,
                                       1)(examples, batch_size=N): the same batch, loss mask
                                       divided by its total
    sft.pack_sft                       skyrl.train.dataset.collators.PackedDataCollator(
                                       tokenizer, capacity, tp, pp, cp, dp, N, 1, fp8)(examples,
                                       batch_size=N): sequences -> input_ids; the TensorList
                                       sub_seq_lengths -> a jagged tensor; no position_ids and
                                       no cu_seqlens_padded (SkyRL's worker derives both)
    sft.ffd_bins                       skyrl.train.dataset.bin_packing.make_seq_packer(
                                       "first_fit_decreasing", capacity, min_bins,
                                       bin_multiple).pack(lengths)

Importing SkyRL's SFT modules on Python < 3.12: their import chain reaches pydantic models built
on `typing.TypedDict` (`skyrl/tinker/types.py`, `MultiModalKwargs`), which pydantic refuses
before Python 3.12 (`PydanticUserError: Please use typing_extensions.TypedDict instead of
typing.TypedDict on Python < 3.12`). The adapters import them with `typing.TypedDict` replaced
by `typing_extensions.TypedDict` for the duration of that import only (and only on Python <
3.12), then restore it (`import_skyrl`). A module first imported during that window and doing
`from typing import TypedDict` binds the backport too; it is the same construct for every use
except `typing.is_typeddict`, which does not recognise backport classes on 3.11.

Checked: skyrl 0.3.0 (Python 3.11, `versions="~=0.3.0"`) and skyrl 0.4.0 (Python 3.12 wheel
installed on 3.11 with `--ignore-requires-python`, `versions="~=0.4.0"`).
"""

from __future__ import annotations

import importlib
import math
import numbers
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from hypothesis import strategies as st
from tensordict import TensorDict, TensorDictBase

from batchproof.adapters import (
    Adapter,
    FrameworkMissing,
    KnownDivergence,
    register_adapter,
    values,
)
from batchproof.adapters.skyrl import typed_dict_for_pydantic
from batchproof.ops import sft as ops
from batchproof.reference import sft as oracle
from batchproof.reference._checks import check_pad_token_id
from batchproof.registry import BadCase, Case

SFT_TRAINER = "skyrl.train.sft_trainer"
COLLATORS = "skyrl.train.dataset.collators"
BIN_PACKING = "skyrl.train.dataset.bin_packing"

# --------------------------------------------------------------------------- importing SkyRL


def import_skyrl(module: str):
    """Import a SkyRL module, `typing.TypedDict` patched for the import (see the module doc).
    Raises `FrameworkMissing` (an ImportError) when it cannot be imported."""
    if module in sys.modules:
        return sys.modules[module]
    try:
        with typed_dict_for_pydantic():
            return importlib.import_module(module)
    except Exception as err:  # noqa: BLE001 - ImportError, or a failure of the import chain
        raise FrameworkMissing(
            f"cannot import {module}: {type(err).__name__}: {err} (is skyrl installed? "
            "docs/frameworks-skyrl-sft.md says how to install it beside batchproof)") from err


def _tokenizer(pad_token_id: Any) -> SimpleNamespace:
    return SimpleNamespace(pad_token_id=pad_token_id)


# --------------------------------------------------------------------------- wrappers


def _count(examples: Any) -> int:
    """`len(examples)`, or 0 when it has none: the batch size the wrappers pass to SkyRL's
    collators (DefaultCollator ignores it; PackedDataCollator packs when it equals the one it
    was built with, which the wrapper sets to the same number). Never raises: an input SkyRL
    rejects reaches SkyRL."""
    try:
        return len(examples)
    except Exception:  # noqa: BLE001 - an int, a 0-d TensorDict
        return 0


def _collated(batch: Mapping) -> TensorDict:
    """SkyRL's left-padded batch as the contract's TensorDict (loss mask as float32)."""
    rows = batch["sequences"].shape[0]
    td = TensorDict({"input_ids": batch["sequences"], "attention_mask": batch["attention_mask"],
                     "loss_mask": batch["loss_mask"].to(torch.float32)}, batch_size=[rows])
    td.set_non_tensor("response_length", batch.metadata["response_length"])
    return td


def collate_adapter(collate_sft_batch: Callable[..., Any]) -> Callable[..., TensorDict]:
    """`collate_sft_batch(examples, tokenizer)` behind `collate_sft(normalize=False)`."""

    def collate_sft(examples, *, pad_token_id, normalize=False, device=None) -> TensorDict:
        if normalize is not False or device is not None:
            raise NotImplementedError("collate_sft_batch neither normalizes nor moves")
        return _collated(collate_sft_batch(examples, _tokenizer(pad_token_id)))

    return collate_sft


def default_collator_adapter(collator_class: type) -> Callable[..., TensorDict]:
    """`DefaultCollator(tokenizer, 1)(examples, batch_size=N)` behind
    `collate_sft(normalize=True)`."""

    def collate_sft(examples, *, pad_token_id, normalize=False, device=None) -> TensorDict:
        if normalize is not True or device is not None:
            raise NotImplementedError("DefaultCollator always normalizes, on the CPU")
        collator = collator_class(_tokenizer(pad_token_id), micro_train_batch_size_per_gpu=1)
        return _collated(collator(examples, batch_size=_count(examples)))

    return collate_sft


def _jagged(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    lengths = [int(row.numel()) for row in rows]
    offsets = torch.tensor([0, *lengths]).cumsum(0)
    values = torch.cat([row.reshape(-1).to(torch.int64) for row in rows])
    return torch.nested.nested_tensor_from_jagged(values, offsets=offsets)


def packed_adapter(collator_class: type, *, takes_recipe: bool = False
                   ) -> Callable[..., TensorDict]:
    """`PackedDataCollator(...)(examples, batch_size=N)` behind `pack_sft` (the training-step
    path: the collator's batch_size is N, so it packs). 0.4.0's collator takes the FP8 recipe
    (`takes_recipe`); 0.3.0's has one rule for every recipe."""

    def pack_sft(examples, *, pad_token_id, capacity, dp_size=1, tp_size=1, pp_size=1,
                 cp_size=1, fp8=False, fp8_recipe="tensorwise", device=None) -> TensorDict:
        if device is not None:
            raise NotImplementedError("PackedDataCollator packs on the CPU")
        n = _count(examples)
        recipe = {"fp8_recipe": fp8_recipe} if takes_recipe else {}
        collator = collator_class(_tokenizer(pad_token_id), max_tokens_per_microbatch=capacity,
                                  tp_size=tp_size, pp_size=pp_size, cp_size=cp_size,
                                  dp_size=dp_size, batch_size=n,
                                  micro_train_batch_size_per_gpu=1, fp8_enabled=fp8, **recipe)
        batch = collator(examples, batch_size=n)
        rows = len(batch["sequences"])
        td = TensorDict({"input_ids": batch["sequences"],
                         "attention_mask": batch["attention_mask"],
                         "loss_mask": batch["loss_mask"],
                         "sub_seq_lengths": _jagged(batch["sub_seq_lengths"].tensors)},
                        batch_size=[rows])
        td.set_non_tensor("response_length", batch.metadata["response_length"])
        return td

    return pack_sft


def ffd_adapter(make_seq_packer: Callable[..., Any]) -> Callable[..., list[list[int]]]:
    """`make_seq_packer("first_fit_decreasing", ...).pack(lengths)` behind `ffd_bins`."""

    def ffd_bins(lengths, capacity, *, min_bins=1, bin_multiple=1) -> list[list[int]]:
        packer = make_seq_packer("first_fit_decreasing", bin_capacity=capacity,
                                 min_bin_count=min_bins, bin_count_multiple=bin_multiple)
        return packer.pack(lengths)

    return ffd_bins


# --------------------------------------------------------------------------- reading a case


def _listed(case: Case) -> list | None:
    """The examples argument when it is a list (the `lists` form), else None (what the
    strategies change: a TensorDict batch is kept as it is)."""
    examples = case.args[0] if case.args else None
    return examples if isinstance(examples, list) else None


def _batch_rows(batch: TensorDictBase) -> list[dict] | None:
    """The rows SkyRL iterates in a TensorDict batch (`for ex in examples`): each tensor
    field's row i (a jagged field's i-th sequence), an integer 0-d num_actions as an int (as
    `reference.sft.batch_rows` reads them); None for a batch without one batch dimension
    (iterating it raises TypeError) or one that cannot be read."""
    try:
        if batch.batch_dims != 1:
            return None
        rows = []
        for i in range(batch.batch_size[0]):
            row = {key: batch.get(key)[i] for key in batch.keys() if not batch.is_non_tensor(key)}
            actions = row.get("num_actions")
            if (isinstance(actions, torch.Tensor) and actions.dim() == 0
                    and not (actions.is_floating_point() or actions.is_complex()
                             or actions.dtype == torch.bool)):
                row["num_actions"] = int(actions)
            rows.append(row)
        return rows
    except Exception:  # noqa: BLE001 - a predicate never raises: an unreadable batch has no rows
        return None


def _examples(case: Case) -> list | None:
    """The examples as SkyRL iterates them: a list as given, a TensorDict batch as its rows
    (`_batch_rows`); None for anything else (an int, a str, a 0-d TensorDict)."""
    examples = case.args[0] if case.args else None
    if isinstance(examples, TensorDictBase):
        return _batch_rows(examples)
    return examples if isinstance(examples, list) else None


def _mappings(case: Case) -> list[Mapping]:
    return [ex for ex in _examples(case) or [] if isinstance(ex, Mapping)]


def _is_int(value: Any) -> bool:
    """An int the way SkyRL's arithmetic takes it (bools included)."""
    return isinstance(value, numbers.Integral)


def _values(ex: Mapping, key: str) -> list:
    """A field's values as a plain list: a list or tuple, a 1-D tensor's values; [] for
    anything else (a tensor without readable values, such as one on the meta device, or of
    another dimension; a str; None)."""
    value = ex.get(key)
    if isinstance(value, torch.Tensor):
        return (values(value) or []) if not value.is_nested and value.dim() == 1 else []
    return list(value) if isinstance(value, (list, tuple)) else []


def _length(value: Any) -> int | None:
    try:
        return len(value)
    except TypeError:
        return None


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _exact_in_int64(value: Any) -> bool:
    """Whether SkyRL's int64 loss mask holds `value` exactly (as float32: -0.0 loses its sign,
    fractions are truncated, non-finite or huge values cannot be converted)."""
    if isinstance(value, numbers.Integral):
        return True
    if not _is_real(value):
        return True  # not a number: a bad input, not this divergence
    v = float(value)
    return (math.isfinite(v) and v == int(v) and -(2**63) <= v < 2**63
            and not (v == 0 and math.copysign(1.0, v) < 0))


def _full_mask(ex: Mapping) -> list:
    """[0] * (s - num_actions) + loss_mask (what SkyRL's packer builds), or [] if unreadable."""
    s, n = _length(ex.get("input_ids")), ex.get("num_actions")
    if s is None or not _is_int(n):
        return []
    return [0] * max(s - int(n), 0) + _values(ex, "loss_mask")


# --------------------------------------------------------------------------- input conditions


def lacks_attention_mask(case: Case) -> bool:
    """An example without `attention_mask` (or with None): SkyRL's tokenizers always set it.
    (Only with list input_ids: a tensor fails on `list + Tensor` first.)"""
    examples = _mappings(case)
    return (all(isinstance(ex.get("input_ids"), (list, tuple)) for ex in examples)
            and any(ex.get("attention_mask") is None for ex in examples))


def loss_not_int64(case: Case) -> bool:
    """A loss-mask value SkyRL's int64 loss mask cannot hold exactly (a fraction, -0.0, a
    non-finite or huge value)."""
    return any(not _exact_in_int64(v) for ex in _mappings(case) for v in _values(ex, "loss_mask"))


def loss_divided_differently(case: Case) -> bool:
    """DefaultCollator's loss mask differs from the contract's: replays both on the weights.
    SkyRL truncates each weight into its int64 mask (a NaN, an inf or a value beyond int64
    raises: the divergence too), then divides by the int64 total (`mask.float() / max(total,
    1)`); the contract multiplies the float32 weights by float32(1 / max(exact total, 1)).
    They differ where a weight is truncated (unless the contract's product underflows to the
    same value) or where the two roundings part (an integer weight other than 0 and +-2**k can
    give another last bit). Weights that are not plain numbers (bad input) fall back to
    `loss_not_int64`."""
    weights = [v for ex in _mappings(case) for v in _values(ex, "loss_mask")]
    if not all(isinstance(v, numbers.Real) for v in weights):
        return loss_not_int64(case)
    floats = [float(v) for v in weights]
    if not all(math.isfinite(f) and -(2.0**63) <= f < 2.0**63 for f in floats):
        return True  # SkyRL's int64 mask cannot hold it: it raises
    if not floats:
        return False
    ints = torch.tensor([int(f) for f in floats], dtype=torch.int64)
    skyrl = ints.float() / max(ints.sum().item(), 1)
    given = torch.tensor(floats, dtype=torch.float32)
    scale = torch.tensor(1.0 / max(oracle.exact_sum(given.tolist()), 1), dtype=torch.float32)
    contract = given * scale
    same = (skyrl.view(torch.int32) == contract.view(torch.int32)) | (
        skyrl.isnan() & contract.isnan())
    return not bool(same.all())


def misses_key(case: Case) -> bool:
    return any(key not in ex for ex in _mappings(case) for key in oracle.REQUIRED_KEYS)


def _structure_defect(ex: Mapping) -> bool:
    """num_actions a bool or out of [1, s], or a loss mask / attention mask of the wrong
    length (SkyRL checks none of these)."""
    ids, n = ex.get("input_ids"), ex.get("num_actions")
    s = _length(ids)
    if s is None or not _is_int(n) or (isinstance(ids, torch.Tensor) and ids.dim() != 1):
        return False
    loss = _length(ex.get("loss_mask"))
    attention = ex.get("attention_mask")
    return (isinstance(n, bool) or not 1 <= n <= s or (loss is not None and loss != n)
            or (attention is not None and _length(attention) not in (None, s)))


def collate_structure_unchecked(case: Case) -> bool:
    """A structural defect (`_structure_defect`) that `collate_sft_batch` lets through: its rows
    still have one width each (else torch.tensor raises ValueError, the contract's type; a
    bool num_actions, where the contract raises TypeError, diverges either way)."""
    examples = _mappings(case)
    if len(examples) != len(_examples(case) or []) or not any(map(_structure_defect, examples)):
        return False
    try:
        lengths = [len(ex["input_ids"]) for ex in examples]
        actions = [int(ex["num_actions"]) for ex in examples]
        loss_rows = {max(max(actions) - n, 0) + len(ex["loss_mask"])
                     for ex, n in zip(examples, actions)}
        attention_rows = {max(max(lengths) - s, 0) + len(ex["attention_mask"])
                          for ex, s in zip(examples, lengths)}
    except (KeyError, TypeError):
        return False
    bool_actions = any(isinstance(ex["num_actions"], bool) for ex in examples)
    return bool_actions or (len(loss_rows) == 1 and len(attention_rows) == 1)


def packed_structure_unchecked(case: Case) -> bool:
    """A structural defect of num_actions or the loss mask (`_structure_defect`, attention
    aside): PackedDataCollator only asserts `len(full_mask) == len(input_ids)`."""
    for ex in _mappings(case):
        if "attention_mask" in ex:
            ex = {k: v for k, v in ex.items() if k != "attention_mask"}
        if _structure_defect(ex):
            return True
    return False


def attention_defect(case: Case) -> bool:
    """An attention mask the contract rejects: wrong length, a value other than 0/1 (a list or
    a tensor, a TensorDict batch's row included)."""
    for ex in _mappings(case):
        mask, ids = ex.get("attention_mask"), ex.get("input_ids")
        s = _length(ids)
        if mask is None or (isinstance(ids, torch.Tensor) and ids.dim() != 1):
            continue  # (a multi-dimensional ids tensor is its own defect)
        if s is not None and _length(mask) != s:
            return True
        for v in _values(ex, "attention_mask"):
            if isinstance(v, (str, bytes)) or v is None or not (v == 0 or v == 1):
                return True
    return False


def _first_cells(case: Case) -> tuple[Any, Any, Any] | None:
    """The first cell of `collate_sft_batch`'s sequences, attention and loss rows (torch
    infers how to read a nested list from its first scalar: a str there is a ValueError,
    elsewhere a TypeError), or None when they cannot be built."""
    examples = _mappings(case)
    if not examples or len(examples) != len(_examples(case) or []):
        return None
    try:
        lengths = [len(ex["input_ids"]) for ex in examples]
        actions = [ex["num_actions"] for ex in examples]
        first, width, response = examples[0], max(lengths), max(actions)
        seq = case.kwargs.get("pad_token_id") if width > lengths[0] else first["input_ids"][0]
        att = 0 if width > lengths[0] else first["attention_mask"][0]
        loss = 0 if response > actions[0] else first["loss_mask"][0]
    except (KeyError, TypeError, IndexError, ValueError):
        return None
    return seq, att, loss


def attention_values_unchecked(case: Case) -> bool:
    """An attention value `collate_sft_batch` writes as it is (a number other than 0/1: stored,
    a fraction truncated) or fails on with TypeError (None, or a str that is not the first
    cell); the contract raises ValueError. (A str in the first cell makes torch raise
    ValueError: the contract's type.)"""
    first = _first_cells(case)
    for ex in _mappings(case):
        for v in _values(ex, "attention_mask"):
            if v is None or (isinstance(v, numbers.Real) and not (v == 0 or v == 1)):
                return True
            if isinstance(v, str) and first is not None and first[1] is not v:
                return True
    return False


def packed_attention_ignored(case: Case) -> bool:
    """Any attention-mask defect, or zeros in it: PackedDataCollator never reads the mask."""
    if attention_defect(case):
        return True
    return any(0 in _values(ex, "attention_mask") for ex in _mappings(case))


def _list_ids(case: Case) -> list[list]:
    return [list(ex["input_ids"]) for ex in _mappings(case)
            if isinstance(ex.get("input_ids"), (list, tuple))]


def token_ids_unchecked(case: Case) -> bool:
    """A float token id (truncated into the int64 sequences), or a str id in the first cell
    (torch's ValueError); the contract raises TypeError. (A str elsewhere makes torch raise
    TypeError: the contract's type.)"""
    first = _first_cells(case)
    return any(isinstance(v, float) or (isinstance(v, str) and first is not None
                                        and first[0] is v)
               for ids in _list_ids(case) for v in ids)


def multi_dim_ids(case: Case) -> bool:
    """`input_ids` given as a tensor that is not 1-D (the contract raises ValueError)."""
    return any(isinstance(ex.get("input_ids"), torch.Tensor) and ex["input_ids"].dim() != 1
               for ex in _mappings(case))


def packed_ids_unchecked(case: Case) -> bool:
    """`token_ids_unchecked`, or `input_ids` as a float or multi-dimensional tensor:
    `torch.tensor(ids, dtype=torch.long)` converts them or fails its own way."""
    if multi_dim_ids(case):
        return True
    for ids in _list_ids(case):  # one tensor per example: a str is read first in its own
        if any(isinstance(v, float) for v in ids) or (ids and isinstance(ids[0], str)):
            return True
    return any(isinstance(ex.get("input_ids"), torch.Tensor)
               and ex["input_ids"].is_floating_point() for ex in _mappings(case))


def loss_values_str(case: Case) -> bool:
    """A str loss value in the first cell of the loss rows (torch's ValueError), or a bytes
    value that is the only cell (read as a sequence: a (1, 1, 1) loss mask); the contract raises
    TypeError. (Elsewhere torch raises TypeError: the contract's type.)"""
    first = _first_cells(case)
    if first is None:
        return False
    loss = first[2]
    if isinstance(loss, str):
        return True
    examples = _mappings(case)
    return (isinstance(loss, bytes) and len(examples) == 1
            and _length(examples[0].get("loss_mask")) == 1)


def _text_or_complex_loss_mask(case: Case) -> bool:
    """A loss mask given as a str or bytes (not a list of values), or as a complex tensor."""
    return any(isinstance(ex.get("loss_mask"), (str, bytes))
               or (isinstance(ex.get("loss_mask"), torch.Tensor) and ex["loss_mask"].is_complex())
               for ex in _mappings(case))


def packed_loss_values_unchecked(case: Case) -> bool:
    """A str or bytes loss value (`float()` takes both), or any bad value where the packer never
    reads it: full[0], the first token's mask value (it is no target); or a loss mask given as a
    str or bytes (`list(loss_mask)`: its characters, each through `float()`) or as a complex
    tensor (`float()` of each complex value: its real part, or RuntimeError when the imaginary
    part is not 0)."""
    if any(isinstance(v, (str, bytes)) for ex in _mappings(case)
           for v in _values(ex, "loss_mask")):
        return True
    if _text_or_complex_loss_mask(case):
        return True
    for ex in _mappings(case):
        full = _full_mask(ex)
        if full and (isinstance(full[0], (str, bytes, complex)) or full[0] is None):
            return True
    return False


def _bad_pad(case: Case) -> bool:
    try:
        check_pad_token_id(case.kwargs.get("pad_token_id"))
    except (TypeError, ValueError):
        return True
    return False


def collate_pad_unchecked(case: Case) -> bool:
    """A pad id the contract rejects that `collate_sft_batch` takes: no row needs padding, or
    it is a float or bool (written, truncated), or a str in the first cell (torch's
    ValueError; elsewhere TypeError, the contract's type)."""
    if not _bad_pad(case):
        return False
    pad = case.kwargs.get("pad_token_id")
    lengths = [_length(ex.get("input_ids")) for ex in _mappings(case)]
    if len(set(lengths)) <= 1:
        return True
    first = _first_cells(case)
    return isinstance(pad, (float, bool)) or (isinstance(pad, str) and first is not None
                                               and first[0] is pad)


def packed_pad_unchecked(case: Case) -> bool:
    """A float or bool pad id (`torch.full` writes it) or one beyond int64 (RuntimeError or
    OverflowError from `torch.full`); the contract raises TypeError / ValueError."""
    pad = case.kwargs.get("pad_token_id")
    return _bad_pad(case) and (isinstance(pad, (float, bool))
                               or (isinstance(pad, int) and not -(2**63) <= pad < 2**63))


def sizes_unchecked(case: Case) -> bool:
    """A size PackedDataCollator takes or fails on its own way: a bool size (True acts as 1),
    tp/cp/pp < 1, a non-int pp (only `pp > 1` is read), a float or None capacity, a float
    dp_size above the number of examples (the bin-count ValueError comes first)."""
    kw = case.kwargs
    sizes = {name: kw.get(name, 1) for name in ("dp_size", "tp_size", "pp_size", "cp_size")}
    if any(isinstance(v, bool) for v in (*sizes.values(), kw.get("capacity"))):
        return True
    if any(isinstance(sizes[n], int) and sizes[n] < 1 for n in ("tp_size", "cp_size", "pp_size")):
        return True
    dp, examples = sizes["dp_size"], _examples(case)
    fewer_than_dp = (isinstance(dp, float) and examples is not None and len(examples) < dp)
    return (isinstance(sizes["pp_size"], float) or isinstance(kw.get("capacity"), float)
            or kw.get("capacity", 0) is None or fewer_than_dp)


def _devices(case: Case) -> set[str]:
    """The devices of the examples' tensor fields."""
    return {value.device.type for ex in _mappings(case) for value in ex.values()
            if isinstance(value, torch.Tensor)}


def on_several_devices(case: Case) -> bool:
    """Tensor fields on more than one device (the record's pin puts a loss mask on the meta
    device, standing for a second device on a machine with one)."""
    return len(_devices(case)) > 1


def unbatched_tensordict(case: Case) -> bool:
    """Examples given as a TensorDict without a batch dimension: `for ex in examples` raises
    TypeError ('iteration over a 0-d tensordict'); the contract raises ValueError."""
    examples = case.args[0] if case.args else None
    return isinstance(examples, TensorDictBase) and examples.batch_dims == 0


def fp8_not_bool(case: Case) -> bool:
    return not isinstance(case.kwargs.get("fp8", False), bool)


def _scale(total: float) -> float:
    return float(torch.tensor(1.0 / max(total, 1), dtype=torch.float32))


def _packed_targets(case: Case) -> tuple[list[list[float]], list[float]] | None:
    """The unscaled (rows, W - 1) loss rows of the contract's layout, and the kept targets
    (full[1:] of every example), or None when the case cannot be packed."""
    examples = _mappings(case)
    try:
        rows = ops._rows_of(case)
        align = ops._align(case)
    except (TypeError, ValueError, KeyError):
        return None
    slots = [sum(-(-len(examples[i]["input_ids"]) // align) * align for i in row)
             for row in rows]
    width = max(slots) - 1
    matrix, kept = [], []
    for row in rows:
        line, offset = [0.0] * width, 0
        for i in row:
            full = _full_mask(examples[i])
            if len(full) != _length(examples[i].get("input_ids")):  # num_actions > S: unpackable
                return None
            targets = full[1:]
            if not all(isinstance(v, numbers.Real) for v in targets):
                return None
            targets = [float(v) for v in targets]
            line[offset:offset + len(targets)] = targets
            kept += targets
            offset += -(-len(examples[i]["input_ids"]) // align) * align
        matrix.append(line)
    return matrix, kept


def _skyrl_total_differs(case: Case, float32_sum: Callable[[list], float]) -> bool:
    """SkyRL normalizes by `int()` of the float32 sum of its loss rows (OverflowError /
    ValueError when inf / NaN), the contract by the exact sum: whether the float32 scales
    `float32(1 / max(total, 1))` differ (or SkyRL's sum is not finite)."""
    packed = _packed_targets(case)
    if packed is None:
        return False
    matrix, kept = packed
    approx = float32_sum(matrix)
    if not math.isfinite(approx):
        return True
    exact = math.fsum(float(torch.tensor(v, dtype=torch.float32)) for v in kept)
    return _scale(int(approx)) != _scale(exact)


def _torch_sum(matrix: list) -> float:
    return float(torch.tensor(matrix, dtype=torch.float32).sum()) if matrix and matrix[0] else 0.0


def _narrowed(case: Case) -> Case | None:
    """The case in the record's lossy input form (`ops.NARROW_FORM`: loss masks as float16 or
    bfloat16 tensors, by the batch size), whose rounded weights both sides are given: a weight
    past 65504 is inf in float16. None when the case cannot take that form."""
    try:
        return ops._to_narrow_tensors(case)
    except Exception:  # noqa: BLE001 - an input the form cannot convert: no such call
        return None


def packed_total_truncated(case: Case) -> bool:
    """skyrl 0.3.0: `int(loss_mask.sum())` (torch, float32) is the normalizer; on the case as
    drawn or in the lossy float16 / bfloat16 form it is also given (`_narrowed`)."""
    if _skyrl_total_differs(case, _torch_sum):
        return True
    narrowed = _narrowed(case)
    return narrowed is not None and _skyrl_total_differs(narrowed, _torch_sum)


def ffd_lengths_unchecked(case: Case) -> bool:
    """A length < 1, or a float or bool length (SkyRL compares and sums whatever it gets)."""
    lengths = case.args[0] if case.args else None
    if not isinstance(lengths, (list, tuple)):
        return False
    return any(isinstance(v, (float, bool)) or (isinstance(v, int) and v < 1) for v in lengths)


def ffd_min_bins_zero(case: Case) -> bool:
    return case.kwargs.get("min_bins") == 0


# --------------------------------------------------------------------------- strategies


def _with_attention_masks(case: Case) -> Case:
    """Every example without an attention mask gets an all-ones one (as SkyRL's tokenizers
    build them), so a defect under test is reached."""
    examples = _listed(case)
    if examples is None:
        return case
    filled = [dict(ex, attention_mask=[1] * len(ex["input_ids"]))
              if isinstance(ex, Mapping) and ex.get("attention_mask") is None
              and isinstance(ex.get("input_ids"), (list, tuple, torch.Tensor)) else ex
              for ex in examples]
    return Case((filled, *case.args[1:]), case.kwargs, case.label)


def _integer_weights(case: Case) -> Case:
    """Float loss weights replaced by 0/1 (bad values of other types kept), so that a weight
    SkyRL handles its own way does not fail first and hide the defect under test."""
    examples = _listed(case)
    if examples is None:
        return case
    changed = []
    for ex in examples:
        if isinstance(ex, Mapping) and isinstance(ex.get("loss_mask"), list):
            ex = dict(ex, loss_mask=[int(v != 0) if isinstance(v, float) else v
                                     for v in ex["loss_mask"]])
        changed.append(ex)
    return Case((changed, *case.args[1:]), case.kwargs, case.label)


def _normalize(value: bool) -> Callable[[Case], Case]:
    def set_normalize(case: Case) -> Case:
        if not isinstance(case.kwargs.get("normalize", False), bool):
            return case  # a bad normalize stays bad (outside the adapter's domain)
        return case.replace(normalize=value)
    return set_normalize


def _on_bad(transform: Callable[[Case], Case]) -> Callable[[BadCase], BadCase]:
    def on_bad(bad: BadCase) -> BadCase:
        return BadCase(transform(bad.case), bad.raises, bad.why)
    return on_bad


def collate_valid(normalize: bool) -> st.SearchStrategy[Case]:
    """The record's collate cases, normalize fixed; 3 in 4 with every attention mask given
    (so most reach the equivalence check), the rest as drawn."""
    drawn = ops.collate_cases().map(_normalize(normalize))
    return st.one_of(drawn.map(_with_attention_masks), drawn.map(_with_attention_masks),
                     drawn.map(_with_attention_masks), drawn)


def collate_invalid(normalize: bool) -> st.SearchStrategy[BadCase]:
    """The record's bad collate cases, normalize fixed, attention masks filled, integer
    weights (each defect alone reaches SkyRL)."""
    def fix(case: Case) -> Case:
        return _integer_weights(_with_attention_masks(_normalize(normalize)(case)))
    return ops.bad_collate_cases().map(_on_bad(fix))


def normalize_is(value: bool) -> Callable[[Case], bool]:
    def supports(case: Case) -> bool:
        return case.kwargs.get("normalize", False) is value and case.kwargs.get("device") is None
    return supports


def on_cpu(case: Case) -> bool:
    return case.kwargs.get("device") is None


TENSOR_FIELDS = ("input_ids", "attention_mask", "loss_mask")


def _holds_tensors(case: Case) -> bool:
    """The examples are a TensorDict batch, or an example holds a tensor field."""
    examples = case.args[0] if case.args else None
    if isinstance(examples, TensorDictBase):
        return True
    return any(isinstance(ex.get(key), torch.Tensor)
               for ex in _mappings(case) for key in TENSOR_FIELDS)


def collate_domain_03(normalize: bool) -> Callable[[Case], bool]:
    """skyrl 0.3.0's `collate_sft_batch` (and DefaultCollator, which calls it): `normalize_is`,
    and examples as lists. It builds each row by list concatenation (`[pad] * k +
    ex["input_ids"]`, `[0] * k + ex["attention_mask"]`, `[0] * k + ex["loss_mask"]`), so a
    tensor field raises TypeError ('can only concatenate list (not "Tensor") to list') whatever
    it holds, valid values included, and a TensorDict batch is rows of tensors (or, without a
    batch dimension, cannot be iterated: TypeError): inputs the function cannot be given (its
    examples are the tokenizer's lists; the adapter's forms are lists only). The record's pins
    and bad inputs that hold tensors are outside this domain; 0.4.0 fills NumPy buffers, takes
    tensors, and is checked on them."""
    in_normalize = normalize_is(normalize)

    def supports(case: Case) -> bool:
        return in_normalize(case) and not _holds_tensors(case)

    return supports


# --------------------------------------------------------------------------- known divergences

TRAINER_03 = "skyrl/train/sft_trainer.py: collate_sft_batch (skyrl 0.3.0)"
COLLATORS_03 = "skyrl/train/dataset/collators.py (skyrl 0.3.0)"
PACKER_03 = "skyrl/train/dataset/collators.py: PackedDataCollator.__call__ (skyrl 0.3.0)"
BINS = "skyrl/train/dataset/bin_packing.py: SeqPacker (skyrl 0.3.0 and 0.4.0)"


def collate_known(upstream: str, *, normalized: bool) -> tuple[KnownDivergence, ...]:
    """What `collate_sft_batch` (and so `DefaultCollator`) does differently."""
    weights = KnownDivergence(
        "loss_weights_divided" if normalized else "loss_mask_int64", kind="valid",
        applies=loss_divided_differently if normalized else loss_not_int64,
        upstream=upstream, fields=("loss_mask",), raises=RuntimeError,
        doc="the loss mask is built as an int64 tensor: a fractional weight is truncated "
            "toward 0 (0.5 -> 0), -0.0 loses its sign, NaN/inf or a value beyond int64 raises "
            "RuntimeError; the contract keeps float32 weights"
            + (". DefaultCollator then divides by the int64 total (`x / total`) where the "
               "contract multiplies by float32(1 / total): integer weights other than 0 and "
               "+-2**k can round apart" if normalized else "") + ".")
    return (
        KnownDivergence(
            "attention_mask_required", lacks_attention_mask, kind="both", upstream=upstream,
            raises=(KeyError, TypeError),
            doc="every example must carry `attention_mask` (SkyRL's tokenization always sets "
                "it): absent -> KeyError, None -> TypeError; the contract treats absent/None "
                "as all ones."),
        weights,
        KnownDivergence(
            "missing_key_error", misses_key, kind="errors", upstream=upstream, raises=KeyError,
            doc="a missing input_ids / num_actions / loss_mask raises KeyError, not ValueError."),
        KnownDivergence(
            "structure_unchecked", collate_structure_unchecked, kind="errors", upstream=upstream,
            accepts=True, raises=ValueError,
            doc="num_actions (range, bool), len(loss_mask) == num_actions and "
                "len(attention_mask) == len(input_ids) are not checked: when every row still "
                "has one width the batch is returned (e.g. num_actions > len(input_ids) gives a "
                "loss mask wider than the sequence); a bool num_actions acts as 0/1."),
        KnownDivergence(
            "attention_values_unchecked", attention_values_unchecked, kind="errors",
            upstream=upstream, accepts=True, raises=TypeError,
            doc="attention values are not checked: 2 or -1 are stored, 0.5 is truncated to 0, "
                "None raises TypeError; the contract raises ValueError."),
        KnownDivergence(
            "token_ids_unchecked", token_ids_unchecked, kind="errors", upstream=upstream,
            accepts=True, raises=ValueError,
            doc="a float token id is truncated into the int64 sequences (2.5 -> 2), a str id "
                "raises ValueError ('too many dimensions'); the contract raises TypeError."),
        KnownDivergence(
            "loss_values_unchecked", loss_values_str, kind="errors", upstream=upstream,
            accepts=True, raises=ValueError,
            doc="a str loss value raises ValueError ('too many dimensions'), a bytes value is "
                "read as a sequence of its byte values; the contract raises TypeError."),
        KnownDivergence(
            "pad_token_id_unchecked", collate_pad_unchecked, kind="errors", upstream=upstream,
            accepts=True, raises=ValueError,
            doc="pad_token_id comes from the tokenizer and is not validated: unused when no row "
                "needs padding, a float or bool is written (truncated), a str raises ValueError; "
                "the contract raises TypeError / ValueError whenever it is not an int64."),
    )


PACKED_FIELDS = ("input_ids", "attention_mask", "loss_mask", "sub_seq_lengths",
                 "response_length")


def _sizes(case: Case) -> tuple[int, int, int, bool] | None:
    kw = case.kwargs
    dp, tp, cp = kw.get("dp_size", 1), kw.get("tp_size", 1), kw.get("cp_size", 1)
    fp8 = kw.get("fp8", False)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (dp, tp, cp)):
        return None
    return dp, tp, cp, fp8 is True


def _recipe(case: Case) -> str | None:
    recipe = case.kwargs.get("fp8_recipe", "tensorwise")
    return recipe if recipe in oracle.FP8_RECIPES else None


def unknown_recipe(case: Case) -> bool:
    """An fp8_recipe the contract rejects (not one of its recipes: another str, None)."""
    return "fp8_recipe" in case.kwargs and _recipe(case) is None


def unknown_recipe_04(case: Case) -> bool:
    """`unknown_recipe`, except 'auto' with FP8 on (truthy): 0.4.0's `_fp8_token_align` refuses
    it with ValueError, the contract's type."""
    if not unknown_recipe(case):
        return False
    try:
        fp8_on = bool(case.kwargs.get("fp8"))
    except Exception:  # noqa: BLE001 - a value without a truth value: SkyRL's `if` raises
        return False
    return not (case.kwargs.get("fp8_recipe") == "auto" and fp8_on)


def skyrl_03_align(tp: int, cp: int, fp8: bool) -> int:
    """0.3.0's `get_packed_seq_align_size`: lcm(layout, 16*cp) with fp8, whatever the recipe."""
    layout = tp * cp * 2 if cp > 1 else tp
    return math.lcm(layout, 16 * cp) if fp8 else layout


def fp8_recipe_blind(case: Case) -> bool:
    """FP8 where 0.3.0's single rule is not the recipe's (docs/sft.md): per-tensor scaling with
    4 | tp, block scaling with tp > 1, MXFP8 almost always."""
    sizes, recipe = _sizes(case), _recipe(case)
    if sizes is None or not sizes[3] or recipe is None:
        return False
    _, tp, cp, _ = sizes
    return skyrl_03_align(tp, cp, True) != oracle.align_size(tp, cp, fp8=True,
                                                             fp8_recipe=recipe)


PACK_KNOWN_03 = (
    KnownDivergence(
        "loss_total_truncated", packed_total_truncated, kind="valid", upstream=PACKER_03,
        fields=("loss_mask",), raises=(OverflowError, ValueError),
        doc="the normalizer is `int(loss_mask.sum())` (the count of non-zero targets, replaced "
            "by the float32 sum truncated to an int when they differ): with fractional weights "
            "it is not the exact sum (weights 0.5 x 3 -> total 1, the contract 1.5), and an "
            "inf / NaN sum raises OverflowError / ValueError."),
    KnownDivergence(
        "missing_key_error", misses_key, kind="errors", upstream=PACKER_03, raises=KeyError,
        doc="a missing input_ids / num_actions / loss_mask raises KeyError, not ValueError."),
    KnownDivergence(
        "structure_checked_by_assert", packed_structure_unchecked, kind="errors",
        upstream=PACKER_03, accepts=True, raises=AssertionError,
        doc="num_actions and len(loss_mask) are checked only through `assert len(full_mask) == "
            "len(input_ids)` (AssertionError, gone under `python -O`); num_actions = 0 with an "
            "empty mask, or a bool num_actions, passes it."),
    KnownDivergence(
        "attention_mask_ignored", packed_attention_ignored, kind="errors", upstream=PACKER_03,
        accepts=True,
        doc="the examples' attention masks are never read: zeros (which a packed row cannot "
            "express), values other than 0/1 and a wrong length are all accepted; the contract "
            "raises ValueError."),
    KnownDivergence(
        "token_ids_unchecked", packed_ids_unchecked, kind="errors", upstream=PACKER_03,
        accepts=True, raises=(ValueError, RuntimeError, AssertionError),
        doc="`torch.tensor(input_ids, dtype=torch.long)` truncates float ids (lists or float "
            "tensors), raises ValueError on a str id, and a 2-D tensor fails the length assert "
            "or a RuntimeError (or passes, 1 x 1); the contract raises TypeError / ValueError."),
    KnownDivergence(
        "loss_values_unchecked", packed_loss_values_unchecked, kind="errors",
        upstream=PACKER_03, accepts=True, raises=(ValueError, RuntimeError),
        doc="loss values go through `float()`: '1' and b'1' are accepted as 1.0, and a value at "
            "full[0] (the first token, never a target) is never read at all; a loss mask given "
            "as a str is read character by character (`'10'` is the mask [1.0, 0.0]; a "
            "character that is no number: ValueError), a complex tensor by its real parts "
            "(RuntimeError where an imaginary part is not 0); the contract raises TypeError "
            "(pins loss_mask_a_string, complex_loss_mask)."),
    KnownDivergence(
        "pad_token_id_unchecked", packed_pad_unchecked, kind="errors", upstream=PACKER_03,
        accepts=True, raises=(RuntimeError, OverflowError),
        doc="a float or bool pad id is written by `torch.full` (0.0 -> 0); one beyond int64 "
            "raises RuntimeError / OverflowError; the contract raises TypeError / ValueError."),
    KnownDivergence(
        "sizes_unchecked", sizes_unchecked, kind="errors", upstream=PACKER_03, accepts=True,
        raises=(ZeroDivisionError, ValueError, RuntimeError),
        doc="tp/cp/pp sizes are not validated: tp = 0 divides by zero, negative tp/cp and "
            "cp = 0 are accepted (cp <= 1 means no CP) or end in a RuntimeError (a negative "
            "row width), pp is only compared with 1 (any "
            "number passes), a bool size acts as 0/1, a float capacity is used as it is and "
            "None raises ValueError, a float dp_size fails the bin count with ValueError when "
            "there are fewer examples; the contract raises TypeError / ValueError."),
    KnownDivergence(
        "fp8_flag_truthiness", fp8_not_bool, kind="errors", upstream=PACKER_03, accepts=True,
        doc="fp8_enabled is used for its truthiness (1, 'fp8' turn FP8 alignment on); the "
            "contract raises TypeError for a non-bool."),
    KnownDivergence(
        "fp8_alignment_recipe_blind", fp8_recipe_blind, kind="valid", upstream=PACKER_03,
        fields=PACKED_FIELDS,
        doc="one FP8 rule, lcm(layout, 16*cp), for every recipe: with per-tensor scaling and "
            "4 | tp a TP rank gets fewer than the 8 tokens Transformer Engine asserts (tp 4: "
            "16 columns, 4 per rank; the contract 32); block scaling with tp > 1 and MXFP8 need "
            "128*tp*cp and 32*tp*cp (docs/sft.md, FP8 alignment). SkyRL bug for per-tensor "
            "4 | tp (fix: lcm(layout, 16*cp, 8*tp*cp)); 0.4.0 takes the recipe."),
    KnownDivergence(
        "fp8_recipe_unchecked", unknown_recipe, kind="errors", upstream=PACKER_03,
        accepts=True,
        doc="0.3.0 has no recipe argument: an unknown fp8_recipe ('auto', None) is not "
            "rejected; the contract raises ValueError / TypeError."),

    KnownDivergence(
        "devices_unchecked", on_several_devices, kind="errors", upstream=PACKER_03,
        accepts=True, raises=RuntimeError,
        doc="examples holding tensors on several devices are not rejected: each loss value is "
            "read with `float()`, and the record's pin (a loss mask on the meta device, standing "
            "for a second device) fails there with RuntimeError ('Tensor.item() cannot be called "
            "on meta tensors'); the contract raises ValueError naming the devices (pin "
            "tensors_on_two_devices)."),
    KnownDivergence(
        "unbatched_tensordict_type_error", unbatched_tensordict, kind="errors",
        upstream=PACKER_03, raises=TypeError,
        doc="examples given as a TensorDict without a batch dimension fail `for ex in "
            "examples` with TypeError ('iteration over a 0-d tensordict'); the contract raises "
            "ValueError (pin batch_without_batch_dimension)."),
)

FFD_KNOWN = (
    KnownDivergence(
        "lengths_unchecked", ffd_lengths_unchecked, kind="errors", upstream=BINS, accepts=True,
        raises=ValueError,
        doc="lengths are not validated: 0 or negative lengths and float / bool lengths are "
            "packed (a float over capacity raises the capacity ValueError); the contract "
            "raises ValueError / TypeError naming the index."),
    KnownDivergence(
        "min_bins_zero_accepted", ffd_min_bins_zero, kind="errors", upstream=BINS,
        accepts=True,
        doc="min_bin_count = 0 is accepted (only negatives are refused); the contract raises "
            "ValueError for min_bins < 1."),
)


# --------------------------------------------------------------------------- adapters (0.3.0)



# --------------------------------------------------------------------------- skyrl 0.4.0
#
# 0.4.0 fills NumPy buffers by slice assignment (`buffer[i, start:] = values`), which converts
# each value with `int()` / `float()` (a digit string parses, a fraction truncates, an int beyond
# int64 raises OverflowError) and broadcasts a length-1 value over its slot. The packer aligns
# FP8 sub-sequences per recipe and bins their aligned lengths.


def _fits(slot: int, values: int | None) -> bool:
    """Whether NumPy takes `values` items into a slot of `slot` (equal, or broadcast from 1)."""
    return values is not None and (values == slot or values == 1)


def length1_loss_broadcast(case: Case) -> bool:
    """A length-1 loss mask for num_actions > 1 (every other structure right): NumPy broadcasts
    it over the num_actions columns."""
    found = False
    for ex in _mappings(case):
        s, n, m = _length(ex.get("input_ids")), ex.get("num_actions"), _length(ex.get("loss_mask"))
        if s is None or not _is_int(n) or isinstance(n, bool):
            return False
        if m == 1 and 1 < n <= s:
            found = True
        elif m != n or not 1 <= n <= s:
            return False
    return found


def _ids_taken_04(ids: Any) -> bool:
    """Whether 0.4.0's `sequences_np[i, pad:] = ex["input_ids"]` takes the ids: a 1-D tensor
    (of any dtype: cast) or a one-cell tensor, a list or tuple of numbers (floats truncated)
    or of strs that parse as ints."""
    if isinstance(ids, torch.Tensor):
        return not ids.is_nested and (ids.dim() == 1 or (ids.dim() >= 2 and ids.numel() == 1))
    return isinstance(ids, (list, tuple)) and all(
        (isinstance(v, numbers.Real) and not _beyond_int64(v))
        or (isinstance(v, str) and v.strip().lstrip("+-").isdigit()) for v in ids)


def lacks_attention_mask_04(case: Case) -> bool:
    """An example without `attention_mask` (or with None) that 0.4.0's collate reaches: every
    num_actions an int (else `np.zeros((N, max num_actions))` raises TypeError first), and, as
    it fills example after example, ids before attention, every example up to that one with ids
    NumPy takes (`_ids_taken_04`; tensors included, unlike 0.3.0's list concatenation)."""
    examples = _mappings(case)
    if not examples or len(examples) != len(_examples(case) or []):
        return False
    if not all("input_ids" in ex and "num_actions" in ex and "loss_mask" in ex
               for ex in examples):
        return False  # a missing key is a KeyError first (missing_key_error)
    if not all(_is_int(ex["num_actions"]) and not isinstance(ex["num_actions"], bool)
               for ex in examples):
        return False  # np.zeros((N, max num_actions)) raises TypeError first
    for ex in examples:
        if not _ids_taken_04(ex.get("input_ids")):
            return False
        if ex.get("attention_mask") is None:
            return True
    return False


def collate_structure_unchecked_04(case: Case) -> bool:
    """A structural defect that 0.4.0's `collate_sft_batch` lets through: every loss mask fits
    its slot of max(num_actions, 0) columns and every attention mask its s columns (equal, or
    broadcast from length 1); else NumPy raises ValueError (the contract's type), except for a
    bool num_actions (the contract raises TypeError)."""
    examples = _mappings(case)
    if len(examples) != len(_examples(case) or []) or not any(map(_structure_defect, examples)):
        return False
    actions = [ex.get("num_actions") for ex in examples]
    if not all(_is_int(n) for n in actions) or isinstance(max(actions), bool):
        return False  # np.zeros((N, True)) raises TypeError: the contract's type
    if max(actions) < 0:
        return False  # np.zeros((N, -1)) raises ValueError: the contract's type
    if any(isinstance(n, bool) for n in actions):
        return True
    for ex in examples:
        s, n = _length(ex.get("input_ids")), ex.get("num_actions")
        if s is None:
            return False
        attention = ex.get("attention_mask")
        if not _fits(max(int(n), 0), _length(ex.get("loss_mask"))):
            return False
        if attention is not None and not _fits(s, _length(attention)):
            return False
    return True


def attention_values_unchecked_04(case: Case) -> bool:
    """An attention value 0.4.0 stores (a number other than 0/1, a fraction truncated, a digit
    string parsed) or fails on with TypeError (None); the contract raises ValueError."""
    return any(v is None or isinstance(v, str)
               or (isinstance(v, numbers.Real) and not (v == 0 or v == 1))
               for ex in _mappings(case) for v in _values(ex, "attention_mask"))


def _beyond_int64(value: Any) -> bool:
    return (isinstance(value, numbers.Integral) and not isinstance(value, bool)
            and not -(2**63) <= value < 2**63)


def token_ids_unchecked_04(case: Case) -> bool:
    """A float id (truncated), a str id (parsed), an id beyond int64 (OverflowError, not the
    contract's ValueError), or float-tensor ids (truncated); the contract raises TypeError /
    ValueError."""
    if any(isinstance(v, (float, str)) or _beyond_int64(v)
           for ids in _list_ids(case) for v in ids):
        return True
    return any(isinstance(ex.get("input_ids"), torch.Tensor)
               and ex["input_ids"].is_floating_point() for ex in _mappings(case))


def one_cell_2d_ids(case: Case) -> bool:
    """`input_ids` as a (1, 1) tensor: NumPy takes it into the one-token slot; the contract
    raises ValueError (a field must be 1-D). (Larger 2-D tensors fail NumPy's broadcast with
    ValueError, the contract's type.)"""
    return any(isinstance(ex.get("input_ids"), torch.Tensor) and ex["input_ids"].dim() != 1
               and ex["input_ids"].numel() == 1 for ex in _mappings(case))


def loss_values_text(case: Case) -> bool:
    """A str or bytes loss value: NumPy parses b'1' / '1' as 1; the contract raises
    TypeError."""
    return any(isinstance(v, (str, bytes)) for ex in _mappings(case)
               for v in _values(ex, "loss_mask"))


def pad_unchecked_04(case: Case) -> bool:
    """A pad id the contract rejects that `np.full(..., pad, dtype=int64)` takes (a float or
    bool, a digit string) or fails on with OverflowError (beyond int64); None raises TypeError,
    the contract's type."""
    return _bad_pad(case) and case.kwargs.get("pad_token_id") is not None


def packed_structure_unchecked_04(case: Case) -> bool:
    """A structural defect of num_actions or the loss mask that 0.4.0's packer lets through:
    `full_mask[s - n:] = loss_mask` takes it (the slot matches, or one value is broadcast;
    num_actions <= 0 gives an empty slot); else NumPy raises ValueError (the contract's type),
    except for a bool num_actions (the contract raises TypeError)."""
    examples = _mappings(case)
    if not any(packed_structure_unchecked(Case(([ex],), {})) for ex in examples):
        return False
    if not _within_capacity(case):
        return False
    if any(isinstance(ex.get("num_actions"), bool) for ex in examples):
        return True
    for ex in examples:
        s, n = _length(ex.get("input_ids")), ex.get("num_actions")
        if s is None or not _is_int(n):
            return False
        if not _fits(len(range(s)[s - int(n):]), _length(ex.get("loss_mask"))):
            return False
    return True


def packed_ids_unchecked_04(case: Case) -> bool:
    """`np.asarray(input_ids, dtype=int64)`: a float id or float tensor (truncated), a str id
    (parsed), an id beyond int64 (OverflowError), a (1, 1) tensor (taken as one token)."""
    return token_ids_unchecked_04(case) or one_cell_2d_ids(case)


def packed_loss_values_unchecked_04(case: Case) -> bool:
    """`np.asarray(loss_mask, dtype=float32)` parses '1' / b'1' and turns None into NaN (a NaN
    total then raises ValueError; a None at full[0], never a target, passes); a loss mask given
    as a str is one parsed value broadcast over the response ('10' -> 10.0 for every token; a
    non-number: ValueError), a complex tensor loses its imaginary part."""
    return _text_or_complex_loss_mask(case) or any(
        isinstance(v, (str, bytes)) or v is None for ex in _mappings(case)
        for v in _values(ex, "loss_mask"))


def sizes_unchecked_04(case: Case) -> bool:
    """0.4.0 checks tp/cp >= 1 itself (ValueError, the contract's type); still unchecked: a
    bool size, pp (only `pp > 1` is read), a float or None capacity, a float dp_size above the
    number of examples."""
    kw = case.kwargs
    sizes = {name: kw.get(name, 1) for name in ("dp_size", "tp_size", "pp_size", "cp_size")}
    if any(isinstance(v, bool) for v in (*sizes.values(), kw.get("capacity"))):
        return True
    pp = sizes["pp_size"]
    if isinstance(pp, float) or (isinstance(pp, int) and pp < 1):
        return True
    dp, examples = sizes["dp_size"], _examples(case)
    return (isinstance(kw.get("capacity"), float) or kw.get("capacity", 0) is None
            or (isinstance(dp, float) and examples is not None and len(examples) < dp))


def _numpy_sum(matrix: list) -> float:
    import numpy as np

    if not (matrix and matrix[0]):
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):  # SkyRL's sum overflows as it does
        return float(np.asarray(matrix, dtype=np.float32).sum())


def packed_total_truncated_04(case: Case) -> bool:
    """skyrl 0.4.0: `int(loss_mask_np.sum())` (NumPy, float32) is the normalizer. Where its
    FP8 layout differs from the contract's (another summation order), only a sum that may not
    be finite is predicted (a non-finite target, or |targets| summing to 2**127 or more)."""
    if not fp8_layout_differs(case):
        return _skyrl_total_differs(case, _numpy_sum)
    packed = _packed_targets(case)
    if packed is None:
        return False
    kept = packed[1]
    return (not all(math.isfinite(v) for v in kept)
            or math.fsum(abs(v) for v in kept) >= 2.0**127)


def _within_capacity(case: Case) -> bool:
    """Every example fits the capacity (else both sides raise the capacity ValueError)."""
    capacity = case.kwargs.get("capacity")
    lengths = [_length(ex.get("input_ids")) for ex in _mappings(case)]
    return (isinstance(capacity, int) and all(n is not None and n <= capacity
                                              for n in lengths))


def packed_length1_broadcast(case: Case) -> bool:
    return length1_loss_broadcast(case) and _within_capacity(case)


def skyrl_04_align(tp: int, cp: int, fp8: bool, recipe: str = "tensorwise") -> int:
    """0.4.0's `get_packed_seq_align_size`: "mxfp8" 32*tp*cp; any other recipe is aligned like
    blockwise FP8 (128*tp*cp when tp > 1, else 16*cp)."""
    layout = tp * cp * 2 if cp > 1 else tp
    if not fp8:
        return layout
    if recipe == "mxfp8":
        return math.lcm(layout, 32 * tp * cp)
    return math.lcm(layout, 128 * tp * cp if tp > 1 else 16 * cp)


def fp8_blockwise_alignment(case: Case) -> bool:
    """Per-tensor FP8 with tp > 1: 0.4.0 pads every sub-sequence to lcm(layout, 128*tp*cp)
    (the block-scaling rule, for every recipe but MXFP8), the contract to the per-tensor
    lcm(layout, 16*cp, 8*tp*cp)."""
    sizes = _sizes(case)
    return (sizes is not None and sizes[3] and sizes[1] > 1
            and _recipe(case) == "tensorwise")


def fp8_bins_on_aligned_lengths(case: Case) -> bool:
    """FP8 where 0.4.0 aligns as the contract does: 0.4.0 runs FFD on the aligned lengths
    roundup(s, a) with capacity max(capacity, a); the contract on the raw lengths: the bins
    differ, or an aligned length over the capacity makes SkyRL raise ValueError on a valid
    input."""
    sizes = _sizes(case)
    examples = _mappings(case)
    recipe = _recipe(case)
    if (sizes is None or not sizes[3] or not examples or recipe is None
            or fp8_blockwise_alignment(case)):
        return False
    dp, tp, cp, _ = sizes
    align = skyrl_04_align(tp, cp, True, recipe)
    try:
        lengths = [len(ex["input_ids"]) for ex in examples]
        capacity = case.kwargs["capacity"]
        raw = oracle.ffd_bins(lengths, capacity, min_bins=dp, bin_multiple=dp)
    except (KeyError, TypeError, ValueError):
        return False
    try:
        aligned = oracle.ffd_bins([-(-s // align) * align for s in lengths],
                                  max(capacity, align), min_bins=dp, bin_multiple=dp)
    except ValueError:
        return True
    return aligned != raw


def _without_fp8(case: Case) -> Case:
    """fp8=True turned off (a bad input then reaches the defect under test, not 0.4.0's
    aligned FFD, which may refuse the batch first); a non-bool fp8 (a defect) is kept."""
    return case.replace(fp8=False) if case.kwargs.get("fp8") is True else case


def fp8_layout_differs(case: Case) -> bool:
    return fp8_blockwise_alignment(case) or fp8_bins_on_aligned_lengths(case)


TRAINER_04 = "skyrl/train/sft_trainer.py: collate_sft_batch (skyrl 0.4.0)"
COLLATORS_04 = "skyrl/train/dataset/collators.py (skyrl 0.4.0)"
PACKER_04 = "skyrl/train/dataset/collators.py: PackedDataCollator.__call__ (skyrl 0.4.0)"
ALIGN_04 = ("skyrl/backends/skyrl_train/distributed/megatron/packing_utils.py: "
            "_fp8_token_align, get_packed_seq_align_size (skyrl 0.4.0)")
# where SkyRL returns another number of rows than the contract, the comparison reports the
# batch size of the whole output: the field ""
ROWS = ("",)


def collate_known_04(upstream: str, *, normalized: bool) -> tuple[KnownDivergence, ...]:
    weights = KnownDivergence(
        "loss_weights_divided" if normalized else "loss_mask_int64", kind="valid",
        applies=loss_divided_differently if normalized else loss_not_int64,
        upstream=upstream, fields=("loss_mask",), raises=(ValueError, OverflowError),
        doc="the loss mask is an int64 NumPy buffer: a fractional weight is truncated toward 0 "
            "(0.5 -> 0), -0.0 loses its sign, NaN raises ValueError and inf or a value beyond "
            "int64 OverflowError; the contract keeps float32 weights"
            + (". DefaultCollator then divides by the int64 total (`x / total`) where the "
               "contract multiplies by float32(1 / total): integer weights other than 0 and "
               "+-2**k can round apart" if normalized else "") + ".")
    return (
        KnownDivergence(
            "attention_mask_required", lacks_attention_mask_04, kind="both", upstream=upstream,
            raises=(KeyError, TypeError),
            doc="every example must carry `attention_mask`: absent -> KeyError (also in a "
                "TensorDict batch without that field), None -> TypeError; the contract treats "
                "absent/None as all ones."),
        weights,
        KnownDivergence(
            "missing_key_error", misses_key, kind="errors", upstream=upstream, raises=KeyError,
            doc="a missing input_ids / num_actions / loss_mask raises KeyError, not ValueError."),
        KnownDivergence(
            "length1_loss_mask_broadcast", length1_loss_broadcast, kind="errors",
            upstream=upstream, accepts=True,
            doc="a length-1 loss_mask for num_actions > 1 is broadcast over the num_actions "
                "columns (`loss_mask_np[i, A - n:] = [v]`); the contract raises ValueError "
                "(its pin broadcast_length1_loss_mask)."),
        KnownDivergence(
            "structure_unchecked", collate_structure_unchecked_04, kind="errors",
            upstream=upstream, accepts=True, raises=ValueError,
            doc="num_actions (range, bool), len(loss_mask) and len(attention_mask) are not "
                "checked: a mask that fits its slot (or has length 1: broadcast) is taken, "
                "num_actions <= 0 leaves an empty slot, num_actions > len(input_ids) a loss "
                "mask wider than the sequence."),
        KnownDivergence(
            "attention_values_unchecked", attention_values_unchecked_04, kind="errors",
            upstream=upstream, accepts=True, raises=TypeError,
            doc="attention values go through int(): 2 and -1 are stored, 0.5 becomes 0, '1' "
                "becomes 1, None raises TypeError; the contract raises ValueError."),
        KnownDivergence(
            "token_ids_unchecked", token_ids_unchecked_04, kind="errors", upstream=upstream,
            accepts=True, raises=OverflowError,
            doc="token ids go through int(): 2.5 -> 2, '3' -> 3, float tensors truncated, an id "
                "beyond int64 raises OverflowError; the contract raises TypeError / "
                "ValueError."),
        KnownDivergence(
            "loss_values_unchecked", loss_values_text, kind="errors", upstream=upstream,
            accepts=True,
            doc="'1' and b'1' loss values are parsed as 1; the contract raises TypeError."),
        KnownDivergence(
            "pad_token_id_unchecked", pad_unchecked_04, kind="errors", upstream=upstream,
            accepts=True, raises=OverflowError,
            doc="`np.full(..., pad_token_id, dtype=int64)`: a float or bool pad is written "
                "(truncated), '0' parsed, one beyond int64 raises OverflowError (even when no "
                "row needs padding); the contract raises TypeError / ValueError."),
        KnownDivergence(
            "one_cell_2d_ids", one_cell_2d_ids, kind="errors", upstream=upstream, accepts=True,
            doc="input_ids as a (1, 1) tensor fill the one-token slot; the contract raises "
                "ValueError (a field must be 1-D)."),
    ) + (() if normalized else (  # (the record's only such input, a pin, has no normalize)
        KnownDivergence(
            "unbatched_tensordict_type_error", unbatched_tensordict, kind="errors",
            upstream=upstream, raises=TypeError,
            doc="examples given as a TensorDict without a batch dimension fail `max(len(ex["
                "'input_ids']) for ex in examples)` with TypeError ('iteration over a 0-d "
                "tensordict'); the contract raises ValueError (pin "
                "batch_without_batch_dimension)."),
    ))


PACK_FORMS_04 = tuple(name for name in ops.FORMS if name != ops.NARROW_FORM)

PACK_KNOWN_04 = (
    KnownDivergence(
        "fp8_blockwise_alignment", fp8_blockwise_alignment, kind="valid", upstream=ALIGN_04,
        fields=(*PACKED_FIELDS, *ROWS), raises=ValueError,
        doc="per-tensor FP8 (the contract's fp8_recipe 'tensorwise', passed through) with tp > 1: "
            "every sub-sequence is padded to lcm(layout, 128*tp*cp), the block-scaling rule that "
            "0.4.0 applies to every recipe but 'mxfp8'; the contract pads per-tensor FP8 to "
            "lcm(layout, 16*cp, 8*tp*cp) (over-padding: 256 columns at tp 2 where 16 suffice). "
            "The bins are computed on those aligned lengths too (fp8_bins_on_aligned_lengths): "
            "other rows, or a valid batch fails with ValueError. docs/sft.md, FP8 alignment."),
    KnownDivergence(
        "fp8_bins_on_aligned_lengths", fp8_bins_on_aligned_lengths, kind="valid",
        upstream=PACKER_04, fields=(*PACKED_FIELDS, *ROWS), raises=ValueError,
        doc="with fp8 the FFD bins are computed on the aligned lengths roundup(s, a) with "
            "capacity max(capacity, a), the contract's on the raw lengths: other bins (other "
            "rows), or a ValueError ('Sequence length 32 exceeds bin capacity 20') on a valid "
            "input: a SkyRL bug (a sequence within the raw capacity refused only because of the "
            "FP8 padding)."),
    KnownDivergence(
        "loss_total_truncated", packed_total_truncated_04, kind="valid", upstream=PACKER_04,
        fields=("loss_mask",), raises=(OverflowError, ValueError),
        doc="the normalizer is `int(loss_mask_np.sum())` (float32 NumPy sum, truncated): with "
            "fractional weights it is not the exact sum, and an inf / NaN sum raises "
            "OverflowError / ValueError."),
    KnownDivergence(
        "missing_key_error", misses_key, kind="errors", upstream=PACKER_04, raises=KeyError,
        doc="a missing input_ids / num_actions / loss_mask raises KeyError, not ValueError."),
    KnownDivergence(
        "length1_loss_mask_broadcast", packed_length1_broadcast, kind="errors",
        upstream=PACKER_04, accepts=True,
        doc="a length-1 loss_mask for num_actions > 1 is broadcast over the response "
            "(`full_mask[s - n:] = [v]`); the contract raises ValueError."),
    KnownDivergence(
        "structure_unchecked", packed_structure_unchecked_04, kind="errors",
        upstream=PACKER_04, accepts=True, raises=ValueError,
        doc="num_actions and len(loss_mask) are not checked (0.4.0 dropped 0.3.0's length "
            "assert, which can no longer fail): a loss mask that fits `full_mask[s - n:]` is "
            "taken, num_actions <= 0 leaves an empty slot, a bool num_actions acts as 0/1."),
    KnownDivergence(
        "attention_mask_ignored", packed_attention_ignored, kind="errors", upstream=PACKER_04,
        accepts=True,
        doc="the examples' attention masks are never read (zeros, values, length); the "
            "contract raises ValueError."),
    KnownDivergence(
        "token_ids_unchecked", packed_ids_unchecked_04, kind="errors", upstream=PACKER_04,
        accepts=True, raises=OverflowError,
        doc="`np.asarray(input_ids, dtype=int64)`: 2.5 -> 2, '3' -> 3, float tensors "
            "truncated, a (1, 1) tensor taken as one token, an id beyond int64 raises "
            "OverflowError; the contract raises TypeError / ValueError."),
    KnownDivergence(
        "loss_values_unchecked", packed_loss_values_unchecked_04, kind="errors",
        upstream=PACKER_04, accepts=True, raises=ValueError,
        doc="`np.asarray(loss_mask, dtype=float32)`: '1' and b'1' are parsed, None becomes "
            "NaN (a NaN total raises ValueError: cannot convert float NaN to integer; at "
            "full[0] it is never a target and passes); a loss mask given as a str is one parsed "
            "value broadcast over the response (`'10'` is 10.0 on every response token), a "
            "complex tensor loses its imaginary parts (NumPy's ComplexWarning); the contract "
            "raises TypeError (pins loss_mask_a_string, complex_loss_mask)."),
    KnownDivergence(
        "pad_token_id_unchecked", pad_unchecked_04, kind="errors", upstream=PACKER_04,
        accepts=True, raises=OverflowError,
        doc="`np.full(..., pad_token_id, dtype=int64)`: a float or bool pad is written, one "
            "beyond int64 raises OverflowError; the contract raises TypeError / ValueError."),
    KnownDivergence(
        "sizes_unchecked", sizes_unchecked_04, kind="errors", upstream=PACKER_04,
        accepts=True, raises=ValueError,
        doc="tp/cp are now checked (>= 1, ValueError); still unchecked: a bool size acts as "
            "0/1, pp is only compared with 1, a float capacity is used as it is and None "
            "raises ValueError, a float dp_size fails the bin count with ValueError when "
            "there are fewer examples."),
    KnownDivergence(
        "fp8_flag_truthiness", fp8_not_bool, kind="errors", upstream=PACKER_04, accepts=True,
        raises=ValueError,
        doc="fp8_enabled is used for its truthiness (1, 'fp8' turn FP8 on: aligned packing, "
            "which can raise ValueError on an aligned length over the capacity)."),

    KnownDivergence(
        "fp8_recipe_unchecked", unknown_recipe_04, kind="errors", upstream=ALIGN_04,
        accepts=True,
        doc="fp8_recipe is not validated: without FP8 it is never read, and with FP8 only "
            "'auto' is refused (ValueError, the contract's type); any other value but 'mxfp8' "
            "(None, 5) is aligned like block scaling. The contract raises TypeError for a "
            "non-str and ValueError for an unknown recipe."),
    KnownDivergence(
        "devices_unchecked", on_several_devices, kind="errors", upstream=PACKER_04,
        accepts=True, raises=TypeError,
        doc="examples holding tensors on several devices are not rejected: each field goes "
            "through `np.asarray`, and the record's pin (a loss mask on the meta device, "
            "standing for a second device) fails there with TypeError ('can't convert meta "
            "device type tensor to numpy'); the contract raises ValueError naming the devices "
            "(pin tensors_on_two_devices)."),
    KnownDivergence(
        "unbatched_tensordict_type_error", unbatched_tensordict, kind="errors",
        upstream=PACKER_04, raises=TypeError,
        doc="examples given as a TensorDict without a batch dimension fail `for ex in "
            "examples` with TypeError ('iteration over a 0-d tensordict'); the contract raises "
            "ValueError (pin batch_without_batch_dimension)."),
)


# --------------------------------------------------------------------------- the adapters
#
# The collate, DefaultCollator and packing adapters of each release are declared once; what
# differs between releases is data (`SftRelease`): the versions, the domain, the known
# divergences, the upstream places and, for the packer, its forms and arguments.


@dataclass(frozen=True)
class SftRelease:
    """What the SFT adapters of one SkyRL release differ in."""

    versions: str  # the pip specifier its adapters accept
    suffix: str  # of the adapters' names ("" for the first release checked)
    label: str  # how the docs name it ("SkyRL's", "SkyRL 0.4's")
    collate_domain: Callable[[bool], Callable[[Case], bool]]  # normalize -> `supports`
    collate_known: Callable[..., tuple[KnownDivergence, ...]]  # (upstream, normalized=)
    trainer: str  # upstream place of collate_sft_batch
    collators: str  # upstream place of DefaultCollator
    pack_known: tuple[KnownDivergence, ...]
    pack_forms: tuple[str, ...] | None  # None: every input form
    pack_wrap: Callable[[type], Callable[..., TensorDict]]
    pack_invalid: Callable[[Case], Case]  # applied to each bad packing call
    pack_doc: str


def register_sft_release(release: SftRelease) -> None:
    """Register the release's collate_sft, default_collator and pack_sft adapters."""
    common = {"framework": "skyrl", "distribution": "skyrl", "versions": release.versions,
              "importing": typed_dict_for_pydantic}
    for normalized, name, target, wrap, upstream, what in (
            (False, "collate_sft", f"{SFT_TRAINER}:collate_sft_batch", collate_adapter,
             release.trainer, "left-padding SFT collate function"),
            (True, "default_collator", f"{COLLATORS}:DefaultCollator",
             default_collator_adapter, release.collators,
             "DefaultCollator (collate + token-mean loss normalization)")):
        register_adapter(Adapter(
            name=f"skyrl.{name}{release.suffix}", record="sft.collate_sft", target=target,
            wrap=wrap, doc=f"{release.label} {what} against collate_sft(normalize={normalized})",
            forms=("lists",),  # `[pad] * k + input_ids` concatenates lists
            supports=release.collate_domain(normalized), valid=collate_valid(normalized),
            invalid=collate_invalid(normalized),
            known=release.collate_known(upstream, normalized=normalized), **common))
    register_adapter(Adapter(
        name=f"skyrl.pack_sft{release.suffix}", record="sft.pack_sft",
        target=f"{COLLATORS}:PackedDataCollator", wrap=release.pack_wrap,
        doc=f"{release.label} PackedDataCollator ({release.pack_doc}) against pack_sft",
        forms=release.pack_forms, supports=on_cpu,
        invalid=ops.bad_pack_cases().map(_on_bad(release.pack_invalid)),
        known=release.pack_known, not_provided=("position_ids", "cu_seqlens_padded"), **common))


SKYRL_03 = SftRelease(
    versions="~=0.3.0", suffix="", label="SkyRL's", collate_domain=collate_domain_03,
    collate_known=collate_known, trainer=TRAINER_03, collators=COLLATORS_03,
    pack_known=PACK_KNOWN_03, pack_forms=None,  # every input form, a jagged TensorDict too
    pack_wrap=packed_adapter, pack_invalid=_integer_weights,
    pack_doc="FFD bins, shard-major rows, TP/CP/FP8-aligned sub-sequences")

SKYRL_04 = SftRelease(
    versions="~=0.4.0", suffix="_v0_4", label="SkyRL 0.4's",
    collate_domain=normalize_is,  # 0.4 takes tensors and a TensorDict batch too
    collate_known=collate_known_04, trainer=TRAINER_04, collators=COLLATORS_04,
    # every input form but float16 / bfloat16 loss-mask tensors: NumPy has no bfloat16
    # (`np.asarray(loss_mask, dtype=np.float32)` raises TypeError 'Got unsupported ScalarType
    # BFloat16'), a dtype the packer cannot be given; that form draws it for half the batches
    pack_known=PACK_KNOWN_04, pack_forms=PACK_FORMS_04,
    pack_wrap=lambda collator: packed_adapter(collator, takes_recipe=True),
    pack_invalid=lambda case: _integer_weights(_without_fp8(case)),
    pack_doc="the contract's fp8_recipe passed through")

register_sft_release(SKYRL_03)
register_adapter(Adapter(
    name="skyrl.ffd_bins", framework="skyrl", record="sft.ffd_bins",
    target=f"{BIN_PACKING}:make_seq_packer", wrap=ffd_adapter, distribution="skyrl",
    versions=">=0.3.0,<0.5",
    importing=typed_dict_for_pydantic,
    doc="SkyRL's first-fit-decreasing SeqPacker (with the DP bin-count adjustment) against "
        "ffd_bins", forms=None, known=FFD_KNOWN,
))

register_sft_release(SKYRL_04)
