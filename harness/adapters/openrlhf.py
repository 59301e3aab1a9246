"""OpenRLHF adapters (PyPI distribution `openrlhf`, checked with 0.11.2; see
docs/frameworks-openrlhf.md).

OpenRLHF packs a padded (B, S) batch into one row for its flash-attention forward
(`packing_samples`) and scatters per-token results back; the dynamic batcher balances
micro-batches by token count:

    varlen.unpad                  openrlhf.models.ring_attn_utils.unpad_and_slice_tensor(
                                  sequences, attention_mask, ring_attn_group=None):
                                  values = the packed row, indices = its `indices`;
                                  cu_seqlens / max_seqlen are not returned by OpenRLHF: the
                                  adapter derives them from OpenRLHF's packed position_ids the way
                                  the flash-attention path of transformers does (a segment starts
                                  wherever the position id is 0), i.e. the segments the attention
                                  kernel is given
    varlen.repad                  openrlhf.models.ring_attn_utils.gather_and_pad_tensor(
                                  tensor, ring_attn_group=None, ring_attn_pad_len=0, indices,
                                  batch, seqlen): the contract's (nnz, ...) values are handed over
                                  as OpenRLHF's packed row, (1, nnz, ...)
    balance.balanced_partitions   openrlhf.utils.seqlen_balancing.get_seqlen_balanced_partitions(
                                  seqlen_list, k_partitions, equal_size)

`openrlhf.models.ring_attn_utils` imports `flash_attn.bert_padding` at module level, and
`import flash_attn` imports the compiled CUDA extension `flash_attn_2_cuda`, which a CPU-only
install of flash-attn (`FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE`) does not have. The functions under
test call flash-attn's pure-torch `bert_padding` (`unpad_input`, `pad_input`,
`index_first_axis`), never the CUDA extension. So, only where importing the module fails on
exactly that missing extension, the varlen adapters import it with an empty stand-in module
registered as `flash_attn_2_cuda` and then restore `sys.modules`: the stand-in is removed, and so
is every `flash_attn` module imported while it was there (a later `import flash_attn` fails as it
did before). The flash-attn code that runs is flash-attn's own.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from hypothesis import strategies as st

from batchproof.adapters import Adapter, Call, KnownDivergence, register_adapter
from batchproof.registry import Case

RING = "openrlhf.models.ring_attn_utils"
RING_UPSTREAM = "openrlhf/models/ring_attn_utils.py (openrlhf 0.11.2)"
SEQLEN = "openrlhf.utils.seqlen_balancing"
SEQLEN_UPSTREAM = "openrlhf/utils/seqlen_balancing.py (openrlhf 0.11.2)"
CUDA_EXTENSION = "flash_attn_2_cuda"


# --------------------------------------------------------------------------- importing


@contextlib.contextmanager
def cuda_extension_stand_in() -> Iterator[None]:
    """While open, when flash-attn's compiled CUDA extension is not installed, an empty module
    stands in for it in `sys.modules`; on exit the stand-in and every flash_attn module imported
    meanwhile are removed. Where the extension is installed it does nothing."""
    if importlib.util.find_spec(CUDA_EXTENSION) is not None:
        yield
        return
    before = set(sys.modules)
    sys.modules[CUDA_EXTENSION] = types.ModuleType(CUDA_EXTENSION)
    try:
        yield
    finally:
        sys.modules.pop(CUDA_EXTENSION, None)
        for name in set(sys.modules) - before:
            if name == "flash_attn" or name.startswith("flash_attn."):
                del sys.modules[name]


def import_without_cuda_extension(module_name: str) -> types.ModuleType:
    """`module_name`, imported inside `cuda_extension_stand_in()`."""
    with cuda_extension_stand_in():
        return importlib.import_module(module_name)


# --------------------------------------------------------------------------- unpad


def packed_segments(position_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(cu_seqlens int32, max_seqlen) of a packed row: a segment starts at every position id 0
    and the last one ends at the row's end. This is what transformers' flash-attention path
    derives from packed position_ids (`prepare_fa_kwargs_from_position_ids`, which in
    transformers 5.23 looks for the smallest position id: 0 in every row packed from a 0/1
    mask)."""
    flat = position_ids.reshape(-1)
    starts = (flat == 0).nonzero().reshape(-1)
    cu_seqlens = torch.cat([starts, torch.tensor([flat.numel()], device=flat.device)]).to(
        torch.int32)
    max_seqlen = int(cu_seqlens.diff().max()) if cu_seqlens.numel() > 1 else 0
    return cu_seqlens, max_seqlen


def unpad_adapter(unpad_and_slice_tensor: Callable[..., Any]) -> Callable[..., Any]:
    """unpad(x, mask) -> (packed row, indices, cu_seqlens and max_seqlen of OpenRLHF's packed
    position_ids), without ring attention (ring_attn_group=None)."""

    def unpad(x, attention_mask):
        sequences, position_ids, _labels, _pad, indices = unpad_and_slice_tensor(
            x, attention_mask, None)
        cu_seqlens, max_seqlen = packed_segments(position_ids)
        return sequences[0], indices, cu_seqlens, max_seqlen

    return unpad


def _first_feature(x: torch.Tensor, keep_axis: bool) -> torch.Tensor:
    """x (B, S, ...) reduced to (B, S), or to (B, S, 1) when keep_axis."""
    while x.dim() > 2:
        x = x[..., 0]
    return (x.unsqueeze(-1) if keep_axis else x).contiguous()


def _tensor(value: Any) -> torch.Tensor | None:
    """value when it is a tensor with data (not on the meta device, not nested), else None."""
    if isinstance(value, torch.Tensor) and not value.is_meta and not value.is_nested:
        return value
    return None


def token_rows(call: Call) -> bool:
    """OpenRLHF packs (B, S) token ids: it adds the feature axis flash-attn needs itself and
    returns a (1, nnz) row. x (B, S, 1, ...) (every trailing dim 1) comes back right too; x
    (B, S, F) with F > 1 comes back as (F, nnz, 1): outside the function's domain."""
    x = call.arg("x")
    return not isinstance(x, torch.Tensor) or all(n == 1 for n in x.shape[2:])


@st.composite
def token_row_cases(draw) -> Case:
    """The record's valid inputs with x reduced to (B, S) or (B, S, 1)."""
    from batchproof.ops.varlen import masked_tensors

    x, mask = draw(masked_tensors())
    return Case((_first_feature(x, draw(st.booleans())), mask))


def _mask(call: Call) -> torch.Tensor | None:
    """attention_mask when it is a tensor with data, else None."""
    return _tensor(call.arg("attention_mask"))


def has_empty_row(call: Call) -> bool:
    """A (B, S) 0/1 mask with a row of no 1 (B >= 1)."""
    mask = _mask(call)
    return (mask is not None and mask.dim() == 2  # (B = 0: no row, so none empty)
            and bool((mask != 0).sum(1).eq(0).any()) and not mask.is_floating_point())


def empty_batch(call: Call) -> bool:
    """A (0, S) mask, with sequences that are a tensor."""
    mask = _mask(call)
    return (isinstance(call.arg("x"), torch.Tensor) and mask is not None
            and mask.dim() == 2 and mask.shape[0] == 0)


def mask_not_binary(call: Call) -> bool:
    mask = _mask(call)
    return (mask is not None and not mask.is_floating_point()
            and bool(((mask != 0) & (mask != 1)).any()))


def float_mask(call: Call) -> bool:
    mask = call.arg("attention_mask")
    return isinstance(mask, torch.Tensor) and mask.is_floating_point()


def mask_not_2d(call: Call) -> bool:
    mask = call.arg("attention_mask")
    return isinstance(mask, torch.Tensor) and mask.dim() != 2


def shapes_differ(call: Call) -> bool:
    x, mask = call.arg("x"), call.arg("attention_mask")
    return (isinstance(x, torch.Tensor) and isinstance(mask, torch.Tensor) and x.dim() == 2
            and mask.dim() == 2 and tuple(x.shape) != tuple(mask.shape) and mask.shape[0] > 0)


def x_not_2d(call: Call) -> bool:
    x = call.arg("x")
    return isinstance(x, torch.Tensor) and x.dim() < 2


def mask_not_a_tensor(call: Call) -> bool:
    """x a tensor of at least 2 dims (torch.roll(dims=1) passes) and a mask that is not a
    tensor."""
    x = call.arg("x")
    return (isinstance(x, torch.Tensor) and x.dim() >= 2
            and not isinstance(call.arg("attention_mask"), torch.Tensor))


def devices_differ(call: Call) -> bool:
    """x and a (B, S) mask, both tensors, on different devices."""
    x, mask = call.arg("x"), call.arg("attention_mask")
    return (isinstance(x, torch.Tensor) and isinstance(mask, torch.Tensor) and x.dim() >= 2
            and mask.dim() == 2 and x.device != mask.device)


UNPAD_KNOWN = (
    KnownDivergence(
        "empty_row_has_no_segment", has_empty_row, kind="valid", upstream=RING_UPSTREAM,
        fields=("[2]", "[3]"),  # cu_seqlens, max_seqlen of (values, indices, cu_seqlens, max)
        doc="contract difference: a row with no real token adds no segment to OpenRLHF's "
            "packed row (its position ids never restart for it), so the cu_seqlens the "
            "attention kernel derives has no repeated boundary for it; flash-attn's "
            "unpad_input (the contract) keeps one boundary per row. values and indices agree."),
    KnownDivergence(
        "empty_batch_fails", empty_batch, kind="both", upstream=RING_UPSTREAM,
        raises=RuntimeError,
        doc="a batch of 0 rows fails in flash-attn's unpad_input (`seqlens_in_batch.max()` of an "
            "empty tensor: RuntimeError), whatever else the input has; the contract returns "
            "empty outputs (or raises the error of the input's other defect)."),
    KnownDivergence(
        "mask_values_unchecked", mask_not_binary, kind="errors", upstream=RING_UPSTREAM,
        accepts=True,
        doc="an attention_mask holding 2 or -1 is accepted: indices come from nonzero(), but "
            "OpenRLHF's position ids are cumsum(mask) - 1, so they skip (a 2) or repeat (a -1) "
            "and a row whose first real token is a 2 never restarts at 0: it joins the previous "
            "row's attention segment. The contract raises ValueError."),
    KnownDivergence(
        "float_mask_accepted", float_mask, kind="errors", upstream=RING_UPSTREAM,
        accepts=True,
        doc="a floating-point attention_mask is accepted and the packed position_ids come out "
            "float32 (cumsum of a float mask); the contract raises TypeError."),
    KnownDivergence(
        "mask_shape_unchecked", mask_not_2d, kind="errors", upstream=RING_UPSTREAM,
        raises=RuntimeError,
        doc="a 1-D attention_mask fails inside flash-attn's unpad_input (F.pad of a 0-d "
            "tensor: RuntimeError); the contract raises ValueError."),
    KnownDivergence(
        "shapes_unchecked", shapes_differ, kind="errors", upstream=RING_UPSTREAM,
        accepts=True,
        doc="sequences with more rows than the mask are accepted (the indices address the first "
            "rows); the contract raises ValueError."),
    KnownDivergence(
        "mask_type_unchecked", mask_not_a_tensor, kind="errors", upstream=RING_UPSTREAM,
        raises=AttributeError,
        doc="an attention_mask that is not a tensor (a list of rows) fails in flash-attn's "
            "unpad_input with AttributeError ('list' object has no attribute 'sum'); the "
            "contract raises TypeError."),
    KnownDivergence(
        "devices_unchecked", devices_differ, kind="errors", upstream=RING_UPSTREAM,
        accepts=True,
        doc="x and attention_mask on different devices are not compared: nothing in "
            "unpad_and_slice_tensor or flash-attn's unpad_input looks at a device. With x on "
            "the meta device (the record's stand-in for another device) and the mask on the "
            "CPU every op succeeds and a meta packed row is returned; the contract raises "
            "ValueError naming both devices. (On two real devices torch's gather would fail "
            "on the mismatch instead; not run here: the matrix has no second device.)"),
    KnownDivergence(
        "x_dims_unchecked", x_not_2d, kind="errors", upstream=RING_UPSTREAM,
        raises=IndexError,
        doc="1-D sequences fail in torch.roll(dims=1) with IndexError ('Dimension out of "
            "range'); the contract raises ValueError."),
)

UNPAD = register_adapter(Adapter(
    name="openrlhf.unpad_and_slice_tensor",
    framework="openrlhf",
    record="varlen.unpad",
    target=f"{RING}:unpad_and_slice_tensor",
    wrap=unpad_adapter,
    distribution="openrlhf",
    versions="~=0.11.2",
    importing=cuda_extension_stand_in,
    doc="OpenRLHF's packing of a padded batch into one row (packing_samples, no ring "
        "attention): the packed row and indices, and the segments its position_ids give",
    forms=None,
    supports=token_rows,
    valid=token_row_cases(),
    known=UNPAD_KNOWN,
))


# --------------------------------------------------------------------------- repad


def repad_adapter(gather_and_pad_tensor: Callable[..., Any]) -> Callable[..., Any]:
    """repad(values, indices, batch, seqlen): values (nnz, ...) go to OpenRLHF as its packed
    row (1, nnz, ...), without ring attention (no gather, no ring pad)."""

    def repad(values, indices, batch, seqlen):
        row = values.unsqueeze(0) if isinstance(values, torch.Tensor) else [values]
        return gather_and_pad_tensor(row, None, 0, indices, batch, seqlen)

    return repad


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def has_feature_dims(call: Call) -> bool:
    """values (nnz, ...) whose trailing dims are not () or (1,)."""
    values = call.arg("values")
    return (isinstance(values, torch.Tensor) and values.dim() >= 2
            and tuple(values.shape[1:]) != (1,))


def repad_empty_batch(call: Call) -> bool:
    """batch == 0 (with values a tensor)."""
    batch = call.arg("batch")
    return isinstance(call.arg("values"), torch.Tensor) and _int(batch) and batch == 0


def _plain_indices(call: Call) -> torch.Tensor | None:
    """indices when they are a 1-D integer tensor with data, one entry per value, else None."""
    values, indices = call.arg("values"), _tensor(call.arg("indices"))
    if not (isinstance(values, torch.Tensor) and indices is not None
            and indices.dim() == 1 and not indices.is_floating_point()
            and indices.dtype != torch.bool and values.dim() >= 1
            and indices.numel() == values.shape[0]):
        return None
    return indices


def indices_repeat(call: Call) -> bool:
    """In-range indices, one per value, with one position twice."""
    indices, batch, seqlen = _plain_indices(call), call.arg("batch"), call.arg("seqlen")
    if indices is None or not (_int(batch) and _int(seqlen)):
        return False
    in_range = bool(((indices >= 0) & (indices < batch * seqlen)).all())
    return in_range and indices.unique().numel() < indices.numel()


def one_value_many_indices(call: Call) -> bool:
    """One value and more than one 1-D integer index (torch broadcasts the value)."""
    values, indices = call.arg("values"), call.arg("indices")
    return (isinstance(values, torch.Tensor) and isinstance(indices, torch.Tensor)
            and values.dim() >= 1 and values.shape[0] == 1 and indices.dim() == 1
            and not indices.is_floating_point() and indices.numel() > 1)


def indices_malformed(call: Call) -> bool:
    """indices that are not a 1-D integer tensor of one in-range entry per value (except one
    value with several indices: `one_value_many_indices`)."""
    values, indices = call.arg("values"), call.arg("indices")
    batch, seqlen = call.arg("batch"), call.arg("seqlen")
    if not (isinstance(values, torch.Tensor) and isinstance(indices, torch.Tensor)):
        return False
    if one_value_many_indices(call):
        return False
    plain = _plain_indices(call)
    if plain is None:
        return True
    if not (_int(batch) and _int(seqlen)):
        return False
    return bool(((plain < 0) | (plain >= batch * seqlen)).any())


def negative_size(call: Call) -> bool:
    batch, seqlen = call.arg("batch"), call.arg("seqlen")
    return (isinstance(call.arg("values"), torch.Tensor) and _int(batch) and _int(seqlen)
            and min(batch, seqlen) < 0)


def values_not_a_tensor(call: Call) -> bool:
    return not isinstance(call.arg("values"), torch.Tensor)


def indices_not_a_tensor(call: Call) -> bool:
    """values a tensor of at least 1 dim (its transpose passes) and indices not a tensor."""
    values = call.arg("values")
    return (isinstance(values, torch.Tensor) and values.dim() >= 1
            and not isinstance(call.arg("indices"), torch.Tensor))


REPAD_KNOWN = (
    KnownDivergence(
        "feature_dims_get_an_extra_axis", has_feature_dims, kind="valid", upstream=RING_UPSTREAM,
        fields=("",),
        doc="OpenRLHF bug: per-token outputs with feature dims (logits (1, nnz, V)) come back as "
            "(B, S, 1, V): `pad_input(tensor.transpose(0, 1), ...)` puts the row's axis of size "
            "1 behind the tokens and `.squeeze(-1)` removes only a trailing 1. Only 1-D "
            "per-token values (log-probs, entropy) come back as (B, S). Reached through "
            "Actor.forward(..., allgather_logits=True) with packing_samples."),
    KnownDivergence(
        "empty_batch_fails", repad_empty_batch, kind="both", upstream=RING_UPSTREAM,
        raises=ZeroDivisionError,
        doc="batch = 0 fails in flash-attn's pad_input: einops' rearrange('(b s) ... -> b s "
            "...', b=0) raises ZeroDivisionError (whatever else the input has); the contract "
            "returns a (0, seqlen, ...) tensor."),
    KnownDivergence(
        "duplicate_indices_accepted", indices_repeat, kind="errors", upstream=RING_UPSTREAM,
        accepts=True,
        doc="a position given twice is accepted: flash-attn's pad_input (`output[indices] = "
            "values`) keeps one of the two values silently. The contract raises ValueError."),
    KnownDivergence(
        "indices_checked_by_torch", indices_malformed, kind="errors", upstream=RING_UPSTREAM,
        raises=(IndexError, RuntimeError, AssertionError),
        doc="indices outside [0, batch * seqlen) or of a float dtype fail with torch's "
            "IndexError, one index too many with RuntimeError (shape mismatch), 2-D indices "
            "with flash-attn's `assert indices.ndim == 1`; the contract raises ValueError "
            "(TypeError for float indices) naming the argument."),
    KnownDivergence(
        "one_value_broadcast_to_all_indices", one_value_many_indices, kind="errors",
        upstream=RING_UPSTREAM,
        accepts=True, raises=IndexError,
        doc="one value with several indices (a count mismatch) is accepted: torch broadcasts "
            "the value in flash-attn's `output[indices] = values` and writes it at every index "
            "(IndexError when an index is out of range). The contract raises ValueError."),
    KnownDivergence(
        "negative_size_by_torch", negative_size, kind="errors", upstream=RING_UPSTREAM,
        raises=RuntimeError,
        doc="a negative batch or seqlen fails in torch.zeros or reshape with RuntimeError; the "
            "contract raises ValueError."),
    KnownDivergence(
        "indices_type_unchecked", indices_not_a_tensor, kind="errors", upstream=RING_UPSTREAM,
        raises=AttributeError,
        doc="indices that are not a tensor (a list) fail at flash-attn's `assert indices.ndim "
            "== 1` with AttributeError ('list' object has no attribute 'ndim'), whatever else "
            "the input has (batch = 0 included); the contract raises TypeError."),
    KnownDivergence(
        "values_not_a_tensor", values_not_a_tensor, kind="errors", upstream=RING_UPSTREAM,
        raises=AttributeError,
        doc="values that are not a tensor fail with AttributeError ('list' object has no "
            "attribute 'transpose'); the contract raises TypeError."),
)

REPAD = register_adapter(Adapter(
    name="openrlhf.gather_and_pad_tensor",
    framework="openrlhf",
    record="varlen.repad",
    target=f"{RING}:gather_and_pad_tensor",
    wrap=repad_adapter,
    distribution="openrlhf",
    versions="~=0.11.2",
    importing=cuda_extension_stand_in,
    doc="OpenRLHF's scatter of a packed row's per-token values back to (B, S) (no ring "
        "attention)",
    forms=None,
    known=REPAD_KNOWN,
))


# --------------------------------------------------------------------------- balance


def partitions_adapter(function: Callable[..., Any]) -> Callable[..., list[list[int]]]:
    def balanced_partitions(values, k, *, equal_size=False):
        return function(seqlen_list=values, k_partitions=k, equal_size=equal_size)

    return balanced_partitions


def _seqlens(call: Call) -> list | None:
    """values as a plain list: a list or tuple, or a 1-D tensor's `tolist()`; None otherwise."""
    values = call.arg("values")
    if isinstance(values, torch.Tensor) and values.dim() != 1:
        return None
    return Call.values(values)


def k_out_of_range(call: Call) -> bool:
    """An int k (not a bool) outside [1, n]."""
    k, values = call.arg("k"), _seqlens(call)
    return values is not None and _int(k) and not 1 <= k <= len(values)


def float_k_over_n(call: Call) -> bool:
    """A float k greater than n: the `n >= k` assert fires before anything reads k as an int."""
    k, values = call.arg("k"), _seqlens(call)
    return (values is not None and isinstance(k, float) and math.isfinite(k)
            and k > len(values))


def k_is_bool(call: Call) -> bool:
    return isinstance(call.arg("k"), bool)


def equal_size_not_divisible(call: Call) -> bool:
    k, values = call.arg("k"), _seqlens(call)
    return (bool(call.arg("equal_size")) and values is not None and _int(k)
            and 1 <= k <= len(values) and len(values) % k != 0)


def bad_seqlen(call: Call) -> bool:
    """A negative, non-finite or bool value."""
    return any(isinstance(v, bool) or (isinstance(v, (int, float)) and not (
        math.isfinite(v) and v >= 0)) for v in _seqlens(call) or [])


def values_tensor_not_real_1d(call: Call) -> bool:
    """A values tensor with rows that is not 1-D (2-D or more), or 1-D and complex."""
    values = _tensor(call.arg("values"))
    return (values is not None and values.dim() >= 1 and values.shape[0] > 0
            and (values.dim() >= 2 or values.is_complex()))


BALANCED_KNOWN = (
    KnownDivergence(
        "k_checked_by_assert", k_out_of_range, kind="errors", upstream=SEQLEN_UPSTREAM,
        raises=(AssertionError, IndexError),
        doc="k > n fails `assert len(seqlen_list) >= k_partitions` (AssertionError, gone under "
            "`python -O`); k < 1 passes it and fails inside karmarkar_karp with IndexError "
            "(`self.sets[0]` of an empty list of sets). The contract raises ValueError."),
    KnownDivergence(
        "float_k_over_n_by_assert", float_k_over_n, kind="errors", upstream=SEQLEN_UPSTREAM,
        raises=AssertionError,
        doc="a float k greater than n fails the `n >= k` assert (AssertionError) before any "
            "type check; the contract raises TypeError naming k. (A float k <= n raises "
            "TypeError in range(): the contract's type.)"),
    KnownDivergence(
        "bool_k_accepted", k_is_bool, kind="errors", upstream=SEQLEN_UPSTREAM,
        accepts=True,
        doc="k=True is used as k=1; the contract raises TypeError for a bool k."),
    KnownDivergence(
        "equal_size_checked_by_assert", equal_size_not_divisible, kind="errors",
        upstream=SEQLEN_UPSTREAM,
        raises=AssertionError,
        doc="equal_size with n % k != 0 raises AssertionError (gone under `python -O`), not "
            "ValueError."),
    KnownDivergence(
        "values_unchecked", bad_seqlen, kind="errors", upstream=SEQLEN_UPSTREAM,
        accepts=True,
        doc="negative, NaN/inf and bool lengths are accepted, in a list or a 1-D tensor (with "
            "negatives or NaN the state order is not total); the contract raises ValueError "
            "(TypeError for a bool)."),
    KnownDivergence(
        "values_tensor_unchecked", values_tensor_not_real_1d, kind="errors",
        upstream=SEQLEN_UPSTREAM,
        accepts=True, raises=RuntimeError,
        doc="a values tensor's rank and dtype are not checked (karmarkar_karp iterates it and "
            "compares its elements as tensors): a 2-D tensor of one column and a complex "
            "tensor of one value are accepted; more columns fail with RuntimeError ('Boolean "
            "value of Tensor with more than one value is ambiguous'), more complex values with "
            "NotImplementedError (a RuntimeError). The contract raises ValueError (not 1-D) or "
            "TypeError (complex)."),
)

BALANCED_PARTITIONS = register_adapter(Adapter(
    name="openrlhf.balanced_partitions",
    framework="openrlhf",
    record="balance.balanced_partitions",
    target=f"{SEQLEN}:get_seqlen_balanced_partitions",
    wrap=partitions_adapter,
    distribution="openrlhf",
    versions="~=0.11.2",
    doc="karmarkar_karp with sorted, non-empty partitions (OpenRLHF's copy of verl's, used by "
        "the replay buffer's dynamic batching)",
    forms=("lists", "tensor"),
    known=BALANCED_KNOWN,
))
