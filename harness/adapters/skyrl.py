"""SkyRL adapters (PyPI distribution `skyrl`: 0.3.0 and 0.4.0; see docs/frameworks.md).

`convert_prompts_responses_to_batch_tensors` builds SkyRL's unified left-padded batch (its PR
#1285) — the contract of `rl_batch.build_rl_batch` with `layout="left"`. Its signature changed in
0.4.0 (PR #1808, the vectorized NumPy collation), so there is one adapter per version, picked by
the installed version (`Adapter.versions`):

    0.3.0 (`skyrl.rl_batch`):      (tokenizer, prompts, responses, rewards, loss_masks,
                                    logprobs=None, rollout_expert_indices=None, max_seq_len=None)
                                   -> 7 values
    0.4.0 (`skyrl.rl_batch_0_4`):  (pad_token_id, prompts, responses, rewards, loss_masks,
                                    logprobs=None, rollout_expert_indices=None,
                                    rollout_sample_support=None, max_seq_len=None) -> 8 values

    contract                          SkyRL
    pad_token_id=                     tokenizer.pad_token_id (0.3.0: a stand-in object carries
                                      it); pad_token_id (0.4.0)
    rewards=None                      rewards is required: zeros are passed, the output dropped
    loss_masks=None                   loss_masks is required: ones are passed (the contract default)
    input_ids, attention_mask         sequences, attention_mask
    response_mask, loss_mask          action_mask (0.4.0: response_mask), loss_masks
    rewards, rollout_logprobs         rewards, logprobs
    position_ids                      not produced (SkyRL derives them inside the model wrapper)
    -                                 0.4.0 also returns two `PackedTensor`s (rollout expert
                                      indices, rollout sample support): None here, not compared

Both wrappers call SkyRL by keyword, so that a wrapper given the other version's function fails
on its signature at once (`unexpected keyword argument`), which `batchproof check` reports as one
misfit for the adapter instead of a divergence per check.

skyrl 0.4.0 declares Python >= 3.12. On Python 3.11 its import chain (`skyrl.backends` ->
`skyrl.tinker.types`) builds a pydantic model over a `typing.TypedDict`, which pydantic refuses
before 3.12 (`PydanticUserError: Please use typing_extensions.TypedDict`). The adapters therefore
import SkyRL inside `typed_dict_for_pydantic()`: on Python < 3.12 `typing.TypedDict` is
`typing_extensions.TypedDict` while the import runs and is restored afterwards.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import torch
from hypothesis import strategies as st
from tensordict import TensorDict

from batchproof.adapters import (
    Adapter,
    Call,
    KnownDivergence,
    register_adapter,
    without_replay,
)
from batchproof.ops.rl_batch import bad_rl_batch_cases, rl_batch_cases
from batchproof.reference._checks import check_pad_token_id
from batchproof.registry import BadCase, Case

PER_TOKEN = ("rewards", "loss_masks", "logprobs")
# contract outputs SkyRL does not return: position_ids (its model wrapper derives them), and
# the layout and pad_token_id, which are the caller's own arguments (an adapter that copied
# them into the output would compare them with themselves: docs/frameworks.md, "Liveness")
NOT_PRODUCED = ("position_ids", "layout", "pad_token_id")
PREPROCESS = "skyrl.train.dataset.preprocess"


# --------------------------------------------------------------------------- importing SkyRL


@contextmanager
def typed_dict_for_pydantic() -> Iterator[None]:
    """While it is open, on Python < 3.12, `typing.TypedDict` is `typing_extensions.TypedDict`
    (restored on exit): skyrl 0.4.0 declares Python >= 3.12, and on 3.11 its import chain builds
    a pydantic model over a `typing.TypedDict` (`skyrl/tinker/types.py`), which pydantic refuses
    before 3.12. Modules imported meanwhile keep the TypedDict they were given; nothing else is
    changed. On Python >= 3.12 it does nothing."""
    if sys.version_info >= (3, 12):
        yield
        return
    import typing

    try:
        import typing_extensions
    except ImportError:  # then the import fails as it would without the patch
        yield
        return
    saved = typing.TypedDict
    typing.TypedDict = typing_extensions.TypedDict
    try:
        yield
    finally:
        typing.TypedDict = saved


def import_preprocess() -> Any:
    """`skyrl.train.dataset.preprocess`, imported under `typed_dict_for_pydantic()`."""
    import importlib

    with typed_dict_for_pydantic():
        return importlib.import_module(PREPROCESS)


# --------------------------------------------------------------------------- the wrappers


def _length(value: Any) -> int | None:
    """`len(value)`, or None when it has none (an int, a 0-d tensor)."""
    try:
        return len(value)
    except TypeError:
        return None


def _default_rows(responses: Any, fill: float) -> list[list[float]]:
    """`[fill] * len(response)` for each response: the value SkyRL's required rewards /
    loss_masks take when the contract's argument is None. Never raises: a response without a
    length gets an empty row, and responses that are not rows give no rows (SkyRL then fails on
    the responses themselves, as it would given the caller's own rows)."""
    try:
        rows = list(responses)
    except TypeError:  # an int, a 0-d tensor
        return []
    return [[fill] * (_length(row) or 0) for row in rows]


def rl_batch_adapter(convert: Callable[..., Any]) -> Callable[..., TensorDict]:
    """SkyRL 0.3.0's function behind the `build_rl_batch` signature (left layout only)."""

    def build_rl_batch(prompts, responses, *, pad_token_id, rewards=None, loss_masks=None,
                       logprobs=None, layout="left", max_seq_len=None, device=None) -> TensorDict:
        if layout != "left":
            raise NotImplementedError("SkyRL builds the left layout only")
        tokenizer = SimpleNamespace(pad_token_id=pad_token_id)
        # by keyword: 0.4.0's function (pad_token_id first) fails here on its signature
        sequences, attention, action, out_rewards, out_loss, out_logprobs, _ = convert(
            tokenizer=tokenizer, prompts=prompts, responses=responses,
            rewards=rewards if rewards is not None else _default_rows(responses, 0.0),
            loss_masks=loss_masks if loss_masks is not None else _default_rows(responses, 1),
            logprobs=logprobs, max_seq_len=max_seq_len)
        td = TensorDict({"input_ids": sequences, "attention_mask": attention,
                         "response_mask": action, "loss_mask": out_loss},
                        batch_size=[sequences.shape[0]])
        if rewards is not None:
            td["rewards"] = out_rewards
        if logprobs is not None:
            td["rollout_logprobs"] = out_logprobs
        td.set_non_tensor("max_response_length", action.shape[1])
        return td  # layout and pad_token_id are the caller's: not produced (NOT_PRODUCED)

    return build_rl_batch


# --------------------------------------------------------------------------- input conditions
#
# Every predicate is asked about valid and invalid inputs alike (`batchproof.adapters.Call`): an
# argument may be an int, None, a str or a tensor where rows are expected, so each reads the
# arguments through helpers that never raise.


def _rows(value: Any) -> list | None:
    return list(value) if isinstance(value, (list, tuple)) else None


def _lengths(call: Call, name: str) -> list[int | None]:
    """`len()` of each row of a list/tuple argument (None for a row without one); [] when the
    argument is not a list or tuple."""
    return [_length(row) for row in _rows(call.arg(name)) or []]


def _response_lengths(call: Call) -> list[int | None]:
    return _lengths(call, "responses")


def _is_scalar(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.dim() == 0
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_per_token(value: Any) -> bool:
    """A 1-D row: a 1-D tensor, or a list of entries that are not rows themselves (numbers,
    bools, and the non-numbers the value predicates look at: None, str, bytes)."""
    if isinstance(value, torch.Tensor):
        return value.dim() == 1
    return isinstance(value, (list, tuple)) and all(
        _is_scalar(v) or v is None or isinstance(v, (bool, str, bytes)) for v in value)


def has_scalar_reward(call: Call) -> bool:
    rows = _rows(call.arg("rewards"))
    return rows is not None and any(_is_scalar(v) for v in rows)


def has_scalar_mask_or_logprob_row(call: Call) -> bool:
    """A loss_masks or logprobs row that is one number (a non-bool int or float, or a 0-d
    tensor): SkyRL takes `len()` of every such row (TypeError); the contract allows a scalar
    per sample for rewards only and raises ValueError. (A bool row is a TypeError on both
    sides.)"""
    return any(_is_scalar(row) for name in ("loss_masks", "logprobs")
               for row in _rows(call.arg(name)) or [])


def has_length_mismatch(call: Call) -> bool:
    """A per-token row whose length is not its response's length."""
    r_lens = _response_lengths(call)
    for name in PER_TOKEN:
        for value, n in zip(_rows(call.arg(name)) or [], r_lens):
            if n is not None and _is_per_token(value) and len(value) != n:
                return True
    return False


def has_multi_dim_row(call: Call) -> bool:
    """A per-token row that is a nested list or a tensor with more than one dimension. (A str
    row, or a list holding a tensor, is neither: torch raises the contract's type there.)"""
    for name in PER_TOKEN:
        for value in _rows(call.arg(name)) or []:
            if isinstance(value, torch.Tensor) and value.dim() >= 2:
                return True
            if isinstance(value, (list, tuple)) and any(isinstance(v, (list, tuple))
                                                        for v in value):
                return True
    return False


def has_count_mismatch(call: Call) -> bool:
    """An empty batch, or prompts/responses/rewards/loss_masks counts that differ, where SkyRL's
    `_verify_inputs` can count them (an argument without a length fails its `len()` with
    TypeError first, the contract's type)."""
    batch, responses = _length(call.arg("prompts")), _length(call.arg("responses"))
    if batch is None or responses is None:
        return False
    counts = [responses] + [len(rows) for name in ("rewards", "loss_masks")
                            if (rows := _rows(call.arg(name))) is not None]
    return batch == 0 or any(c != batch for c in counts)


def has_logprobs_count_mismatch(call: Call) -> bool:
    rows, batch = _rows(call.arg("logprobs")), _length(call.arg("prompts"))
    return rows is not None and batch is not None and len(rows) != batch


def all_rows_empty(call: Call) -> bool:
    """Every prompt and every response is empty (the batch has width 0)."""
    lengths = _lengths(call, "prompts") + _response_lengths(call)
    return bool(lengths) and all(n == 0 for n in lengths)


def has_non_int_pad(call: Call) -> bool:
    """A pad_token_id the contract rejects (`reference._checks.check_pad_token_id`)."""
    try:
        check_pad_token_id(call.arg("pad_token_id"))
    except (TypeError, ValueError):
        return True
    return False


def has_unchecked_pad(call: Call) -> bool:
    """0.3.0: a pad_token_id the contract rejects where SkyRL does not raise the contract's
    exception type. SkyRL writes the pad into its left-padded token lists and calls
    `torch.tensor(sequences)`; the predicate replays that: where no row needs padding the pad is
    never written and any value passes, a float or bool is written (accepted), and where torch
    raises, its type decides (None: TypeError, an int beyond int64: ValueError, both the
    contract's types; a str: another). Only for prompts and responses given as lists of lists
    (other rows fail on their own first)."""
    try:
        check_pad_token_id(call.arg("pad_token_id"))
    except (TypeError, ValueError) as err:
        expected = type(err)
    else:
        return False
    prompts, responses = _rows(call.arg("prompts")), _rows(call.arg("responses"))
    if (prompts is None or responses is None
            or not all(isinstance(row, list) for row in prompts + responses)):
        return False
    pad = call.arg("pad_token_id")
    width = max((len(p) + len(r) for p, r in zip(prompts, responses)), default=0)
    try:
        torch.tensor([[pad] * (width - len(p) - len(r)) + p + r
                      for p, r in zip(prompts, responses)])
    except Exception as err:  # noqa: BLE001 - torch's type decides
        return not isinstance(err, expected)
    return True


def has_non_int_token(call: Call) -> bool:
    """A token id that is not an int (a float, a str, None) in a prompt or response list, where
    SkyRL's `torch.tensor(sequences)` does not raise the contract's TypeError: it accepts a float
    and raises RuntimeError for None, ValueError for a str it meets first; a str after a number
    is torch's TypeError (so the predicate replays SkyRL's left-padded rows through torch)."""
    prompts, responses = _rows(call.arg("prompts")), _rows(call.arg("responses"))
    if prompts is None or responses is None:
        return False  # `len()` of the argument or list + str fails first (TypeError)
    rows = prompts + responses
    if not any(isinstance(row, list) and any(not isinstance(v, int) for v in row)
               for row in rows):
        return False
    pairs = [(p, r) for p, r in zip(prompts, responses)
             if isinstance(p, list) and isinstance(r, list)]
    width = max((len(p) + len(r) for p, r in pairs), default=0)
    pad = call.arg("pad_token_id", 0)
    try:
        torch.tensor([[pad] * (width - len(p) - len(r)) + p + r for p, r in pairs])
    except TypeError:
        return False
    except Exception:  # noqa: BLE001 - any other type is the divergence
        return True
    return True


def has_unchecked_value(call: Call) -> bool:
    """A per-token entry that is not a number (None, str, bytes) where SkyRL's row conversions
    do not raise the contract's TypeError. Replays them in SkyRL's order (loss_masks, rewards,
    logprobs; `torch.tensor(row, dtype=torch.float)`, rewards without a dtype): the first row
    that raises decides, and a row taken without an error (bytes as its code points under
    dtype=float) is the divergence unless a later row raises TypeError."""
    accepted = False
    for name, dtype in (("loss_masks", torch.float), ("rewards", None), ("logprobs", torch.float)):
        for row in _rows(call.arg(name)) or []:
            if not isinstance(row, (list, tuple)) or not _is_per_token(row):
                continue
            odd = any(v is None or isinstance(v, (str, bytes)) for v in row)
            try:
                torch.tensor(row, dtype=dtype)
            except TypeError:
                return False
            except Exception:  # noqa: BLE001 - another type than the contract's
                return odd
            accepted = accepted or odd
    return accepted


def left_layout(call: Call) -> bool:
    """The domain of both adapters: the left layout (SkyRL builds no other), no device (SkyRL
    returns CPU tensors and takes no device argument)."""
    return call.arg("layout", "left") == "left" and call.arg("device") is None


def _token_tensors(call: Call) -> bool:
    """prompts or responses given as a tensor, or holding a tensor row."""
    for name in ("prompts", "responses"):
        value = call.arg(name)
        if isinstance(value, torch.Tensor) or any(
                isinstance(row, torch.Tensor) for row in _rows(value) or []):
            return True
    return False


def left_layout_token_lists(call: Call) -> bool:
    """0.3.0's domain: `left_layout`, and prompts and responses as lists of token lists, never
    tensors. 0.3.0 builds each row as `[pad] * k + prompts[i] + responses[i]`, list
    concatenation: a tensor row (or a tensor of rows) raises TypeError ('can only concatenate
    list (not "Tensor") to list') whatever it holds, valid ids included, so the function cannot
    be given one (its signature: `List[List[int]]`; the adapter's forms are lists only). The
    record's bad inputs and pins that hold tensor rows (`tensor_row_2d`, `jagged_3d_prompts`,
    `tensor_row_float`, `jagged_float_prompts`) are outside it; 0.4.0 takes tensor rows and is
    checked on them."""
    return left_layout(call) and not _token_tensors(call)


def as_left_layout(bad: BadCase) -> BadCase:
    """The same defect in the left layout (validation does not depend on a valid layout)."""
    if bad.case.kwargs.get("layout") != "two_segment":
        return bad
    kwargs = {k: v for k, v in bad.case.kwargs.items() if k != "layout"}
    return BadCase(Case(bad.case.args, kwargs, bad.case.label), bad.raises, bad.why)


UPSTREAM = "skyrl/train/dataset/preprocess.py (skyrl 0.3.0)"

RL_BATCH_KNOWN = (
    KnownDivergence(
        "scalar_reward_rejected", has_scalar_reward, kind="valid", upstream=UPSTREAM,
        raises=TypeError,
        doc="a scalar reward per sample (Python number or 0-d tensor) raises TypeError "
            "(`len()` of a float); SkyRL expects one per-token list per sample. The contract puts "
            "a scalar on the row's last response token."),
    KnownDivergence(
        "float_ids_when_all_rows_empty", all_rows_empty, kind="valid", upstream=UPSTREAM,
        fields=("input_ids", "attention_mask"),
        doc="when every prompt and response is empty, `torch.tensor(sequences)` of empty lists "
            "gives float32 sequences of shape (B, 0) instead of int64 (found by batchproof check)."),
    KnownDivergence(
        "per_token_length_unchecked", has_length_mismatch, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=RuntimeError,
        doc="a rewards/loss_masks/logprobs row whose length differs from its response is "
            "right-aligned by its own length (silently wrong columns when shorter, or longer but "
            "<= max response length), or fails with a RuntimeError from the slice assignment; "
            "the contract raises ValueError naming the argument and row."),
    KnownDivergence(
        "counts_checked_by_assert", has_count_mismatch, kind="errors", upstream=UPSTREAM,
        raises=AssertionError,
        doc="count mismatches and the empty batch raise AssertionError from `assert` (gone "
            "under `python -O`), not ValueError."),
    KnownDivergence(
        "logprobs_count_unchecked", has_logprobs_count_mismatch, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=IndexError,
        doc="`logprobs` with more rows than samples raises IndexError; with fewer rows the "
            "missing rows are silently left at 0.0. The contract raises ValueError."),
    KnownDivergence(
        "pad_token_id_unchecked", has_unchecked_pad, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=(RuntimeError, OverflowError, ValueError),
        doc="pad_token_id comes from the tokenizer and is not validated: a float or bool is "
            "written into the sequences (a float pad even turns them into float32), a str makes "
            "torch.tensor raise ValueError, and where no row needs padding any value passes "
            "(None, a str, an int beyond int64), instead of the contract's TypeError / "
            "ValueError naming pad_token_id. (Written into a row, None raises torch's TypeError "
            "and an int beyond int64 torch's ValueError: the contract's types, so the predicate "
            "replays `torch.tensor` and leaves those inputs out.)"),
    KnownDivergence(
        "token_ids_unchecked", has_non_int_token, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=(ValueError, RuntimeError),
        doc="token ids are not type-checked: a float id is accepted and turns the sequences "
            "into float32 (`[[1.5]]` gives tensor([[1.5, 2.0]])), a str id fails in torch.tensor "
            "with ValueError ('too many dimensions'), None with RuntimeError ('Could not infer "
            "dtype'); the contract raises TypeError naming the argument and row. Found by the "
            "contract's token-id bad inputs (2026-11-24)."),
    KnownDivergence(
        "per_token_value_types_unchecked", has_unchecked_value, kind="errors",
        upstream=UPSTREAM, accepts=True, raises=(RuntimeError, ValueError),
        doc="rewards/loss_masks/logprobs entries are not type-checked; each row goes through "
            "`torch.tensor`: None in a reward row raises RuntimeError ('Could not infer dtype'), "
            "a str first in a row ValueError ('too many dimensions'), and bytes first in a "
            "loss-mask or logprob row are read as a sequence of code points: the row `[b'1']` "
            "is **taken as 49.0** (`torch.tensor([b'1'], dtype=torch.float)` is `[[49.]]`, "
            "broadcast into the row), longer ones fail the assignment. The contract raises "
            "TypeError naming the argument and row (as torch does for the other cases). Found "
            "with the contract's per-token value bad inputs (2026-11-24)."),
    KnownDivergence(
        "multi_dim_row_unchecked", has_multi_dim_row, kind="errors", upstream=UPSTREAM,
        accepts=True, raises=RuntimeError,
        doc="a per-token row given as a nested list or 2-D tensor is broadcast into the row or "
            "fails with RuntimeError; the contract raises ValueError."),

    KnownDivergence(
        "scalar_row_type_error", has_scalar_mask_or_logprob_row, kind="errors",
        upstream=UPSTREAM, raises=TypeError,
        doc="a loss_masks or logprobs row given as one number (`loss_masks=[1.0]`, or a 0-d "
            "tensor) fails `len(row)` with TypeError ('object of type 'float' has no len()'); "
            "the contract allows a scalar per sample for rewards only and raises ValueError "
            "naming the row. Found by the pin scalar_loss_mask (2026-11-26)."),
)

RL_BATCH = register_adapter(Adapter(
    name="skyrl.rl_batch",
    framework="skyrl",
    record="rl_batch.build_rl_batch",
    target="skyrl.train.dataset.preprocess:convert_prompts_responses_to_batch_tensors",
    wrap=rl_batch_adapter,
    distribution="skyrl",
    versions="~=0.3.0",  # 0.4.0 changed the signature (pad_token_id first, 8 outputs)
    importing=typed_dict_for_pydantic,
    doc="SkyRL 0.3.0's unified left-pad batch builder against build_rl_batch(layout='left')",
    devices=("cpu",),
    dtypes=(torch.int64, torch.float32),
    forms=("lists",),  # `prompts[i] + responses[i]` concatenates lists; tensors would add
    supports=without_replay(left_layout_token_lists),  # the function takes no routes
    valid=rl_batch_cases(layouts=("left",)),
    # bad inputs start from valid ones SkyRL takes: a scalar reward would fail first (TypeError,
    # `scalar_reward_rejected`) and hide the defect under test
    invalid=bad_rl_batch_cases(valid=rl_batch_cases(
        layouts=("left",), rewards=("none", "per_token"))).map(as_left_layout),
    known=RL_BATCH_KNOWN,
    not_provided=NOT_PRODUCED,
    skip={
        "property:positions": "SkyRL's function returns no position_ids",
        "property:shapes_and_dtypes": "expects position_ids among the keys; equivalence checks "
                                      "every other shape and dtype",
        "property:layouts_agree": "SkyRL has no two_segment layout",
    },
))


# =========================================================================== skyrl 0.4.0
#
# PR #1808 rewrote the collation with NumPy buffers filled by slice assignment
# (`buffer[i, R - len(row):] = row`): sequences are always int64 now (the all-empty batch is
# fixed), but what `np.int64` / `np.float32` buffers take silently replaced what `torch.tensor`
# used to reject, and a scalar reward fails with ValueError instead of TypeError.


def rl_batch_adapter_0_4(convert: Callable[..., Any]) -> Callable[..., TensorDict]:
    """SkyRL 0.4.0's function behind the `build_rl_batch` signature (left layout only)."""

    def build_rl_batch(prompts, responses, *, pad_token_id, rewards=None, loss_masks=None,
                       logprobs=None, layout="left", max_seq_len=None, device=None) -> TensorDict:
        if layout != "left":
            raise NotImplementedError("SkyRL builds the left layout only")
        # by keyword: 0.3.0's function (tokenizer first) fails here on its signature
        (sequences, attention, response_mask, out_rewards, out_loss, out_logprobs,
         _expert_indices, _sample_support) = convert(
            pad_token_id=pad_token_id, prompts=prompts, responses=responses,
            rewards=rewards if rewards is not None else _default_rows(responses, 0.0),
            loss_masks=loss_masks if loss_masks is not None else _default_rows(responses, 1),
            logprobs=logprobs, max_seq_len=max_seq_len)
        td = TensorDict({"input_ids": sequences, "attention_mask": attention,
                         "response_mask": response_mask, "loss_mask": out_loss},
                        batch_size=[sequences.shape[0]])
        if rewards is not None:
            td["rewards"] = out_rewards
        if out_logprobs is not None:  # `if logprobs:` in SkyRL: an empty list gives None
            td["rollout_logprobs"] = out_logprobs
        td.set_non_tensor("max_response_length", response_mask.shape[1])
        return td  # layout and pad_token_id are the caller's: not produced (NOT_PRODUCED)

    return build_rl_batch


# --------------------------------------------------------------------------- input conditions


def _token_rows(value: Any) -> list | None:
    """The rows SkyRL 0.4.0 iterates in prompts or responses (`len(p) for p in prompts`, then
    `buffer[i, a:b] = prompts[i]`): a list's or tuple's items, a str's characters, a tensor's
    first-axis slices (a jagged tensor's rows); None for anything else (an int, None, bytes,
    whose rows have no `len()`: TypeError, the contract's type)."""
    if isinstance(value, (list, tuple, str)):
        return list(value)
    if isinstance(value, torch.Tensor) and (value.is_nested or value.dim() >= 1):
        return list(value.unbind(0))
    return None


def _width(call: Call) -> int | None:
    """T = max(p + r): the width of the sequences (0 when every row is empty); None when a row
    has no length (SkyRL's `len()` fails on it first)."""
    prompts = _token_rows(call.arg("prompts"))
    responses = _token_rows(call.arg("responses"))
    if prompts is None or responses is None:
        return None
    lengths = [(_length(p), _length(r)) for p, r in zip(prompts, responses)]
    if any(p is None or r is None for p, r in lengths):
        return None
    return max((p + r for p, r in lengths), default=0)


def _numpy_takes(shape: tuple[int, ...], width: int) -> bool:
    """Whether NumPy's `buffer[R - L:] = value` accepts a value of `shape` (L = shape[0]) in a
    row buffer of `width` R: the slice holds L entries when L <= R, else min(R, L - R); the
    value's leading 1-sized dimensions are dropped, and what is left must be one dimension of
    the slice's length or of length 1 (broadcast)."""
    length = shape[0]
    target = len(range(width)[width - length:])
    dims = list(shape)
    while len(dims) > 1 and dims[0] == 1:
        dims.pop(0)
    return len(dims) == 1 and dims[0] in (target, 1)


def _per_token_rows(call: Call):
    """(argument name, row, response length, R) for every row of every per-token argument;
    nothing when a response has no length (SkyRL fails on it before reaching these rows)."""
    r_lens = _response_lengths(call)
    if any(n is None for n in r_lens):
        return
    width = max(r_lens, default=0)
    for name in PER_TOKEN:
        for value, n in zip(_rows(call.arg(name)) or [], r_lens):
            yield name, value, n, width


def has_taken_length_mismatch(call: Call) -> bool:
    """A 1-D per-token row whose length L is not its response's and that NumPy's slice
    assignment takes anyway: L <= R (right-aligned by its own length onto other columns), or
    L == 1 when R == 0 (broadcast into an empty slice). Longer rows raise NumPy's ValueError,
    the contract's type."""
    return any(_is_per_token(value) and len(value) != n and _numpy_takes((len(value),), width)
               for _, value, n, width in _per_token_rows(call))


def _multi_dim_token_row_taken(row: Any) -> bool:
    """A prompt or response row given as a tensor of 2 or more dimensions that NumPy's
    `buffer[i, a:a + L] = row` (L = `len(row)`, its first dimension) takes: after its leading
    1-sized dimensions are dropped, one dimension of length L or 1 is left (a (1, 1) row)."""
    return (isinstance(row, torch.Tensor) and not row.is_nested and row.dim() >= 2
            and _numpy_takes(tuple(row.shape), row.shape[0]))


def has_taken_multi_dim_row(call: Call) -> bool:
    """A loss_masks/logprobs row given as a tensor of 2 or more dimensions that NumPy's slice
    assignment takes (its leading 1-sized dimensions dropped): a (1, 1) row, or a (1, 0) row when
    R == 0; or a prompt/response row that is such a tensor (a (1, 1) row, in a list or a 3-D
    jagged tensor). (`rewards` rows go through `_reward_to_numpy`, which rejects them with
    ValueError; nested lists and other 2-D rows make NumPy raise ValueError: both the contract's
    type.)"""
    if any(name != "rewards" and isinstance(value, torch.Tensor) and value.dim() >= 2
           and _numpy_takes(tuple(value.shape), width)
           for name, value, _, width in _per_token_rows(call)):
        return True
    return any(_multi_dim_token_row_taken(row) for name in ("prompts", "responses")
               for row in _token_rows(call.arg(name)) or [])


def has_unchecked_value_0_4(call: Call) -> bool:
    """A rewards/loss_masks/logprobs entry that is None, a str or bytes (the contract raises
    TypeError): NumPy's float32 buffers take None as NaN and parse a numeric str or bytes. (A
    bool is 0.0 / 1.0 in the contract too.)"""
    return any(isinstance(value, (list, tuple))
               and any(v is None or isinstance(v, (str, bytes)) for v in value)
               for _, value, _, _ in _per_token_rows(call))


def has_unchecked_row_type_0_4(call: Call) -> bool:
    """A per-token row that is a str or bytes (any of rewards, loss_masks, logprobs), or a
    rewards row that is None or a bool: a rewards row goes through `np.asarray(row,
    float32)` and `_reward_to_numpy` rejects the 0-d array with ValueError (or the str does not
    parse: ValueError); a loss_masks/logprobs str row is one value that NumPy's slice assignment
    parses and broadcasts (taken) or fails to parse (ValueError). The contract raises TypeError.
    (A None or bool loss_masks/logprobs row fails `len()` with TypeError, the contract's
    type.)"""
    return any(isinstance(value, (str, bytes))
               or (name == "rewards" and (value is None or isinstance(value, bool)))
               for name, value, _, _ in _per_token_rows(call))


def has_unchecked_pad_0_4(call: Call) -> bool:
    """A pad_token_id the contract rejects that `np.full(..., dtype=np.int64)` does not reject
    with the contract's TypeError: a float (truncated), a bool, a str (parsed, or ValueError), an
    int beyond int64 (OverflowError, whether or not a row needs padding). None raises TypeError
    (the contract's type) except on a batch of width 0, where np.full fills nothing."""
    if not has_non_int_pad(call):
        return False
    return call.arg("pad_token_id") is not None or _width(call) == 0


def _non_integer_tensor(row: Any) -> bool:
    return (isinstance(row, torch.Tensor) and not row.is_nested and row.dim() == 1
            and (row.is_floating_point() or row.is_complex() or row.dtype == torch.bool))


def has_unchecked_token(call: Call) -> bool:
    """A token the int64 buffer takes or rejects with another type than the contract's
    TypeError: in a list row, an id that is neither an int nor None (a float is truncated, a
    numeric str parsed; None raises TypeError in NumPy, the contract's type); a row that is a
    str or bytes (NumPy parses it as one id and broadcasts it: '12' fills the row with 12, 'x'
    raises ValueError), prompts or responses given as a str (its characters are the rows); a
    1-D tensor row of floats, bools or complex numbers (cast: 1.5 becomes 1), in a list or a
    jagged tensor."""
    for name in ("prompts", "responses"):
        for row in _token_rows(call.arg(name)) or []:
            if isinstance(row, (str, bytes)) or _non_integer_tensor(row):
                return True
            if isinstance(row, list) and any(not isinstance(v, int) and v is not None
                                             for v in row):
                return True
    return False


# --------------------------------------------------------------------------- extra bad inputs


@st.composite
def value_bad_cases(draw, *, valid: st.SearchStrategy[Case]) -> BadCase:
    """Bad inputs the record's strategy does not draw and NumPy's buffers treat differently from
    `torch.tensor`: a per-token entry that is None or a str (TypeError), and a
    loss_masks/logprobs row given as a 2-D tensor (ValueError)."""
    good = draw(valid)
    prompts, responses = good.args
    r_lens = [len(r) for r in responses]
    kwargs = dict(good.kwargs)
    filled = [i for i, n in enumerate(r_lens) if n]
    if filled and draw(st.booleans()):
        name = draw(st.sampled_from(PER_TOKEN))
        row = draw(st.sampled_from(filled))
        rows = [[1.0] * n for n in r_lens]
        bad = draw(st.sampled_from([None, "0.5", "x"]))  # a bool is 0.0 / 1.0 (docs/rl_batch.md)
        rows[row][draw(st.integers(0, r_lens[row] - 1))] = bad
        kwargs[name] = rows
        return BadCase(Case((prompts, responses), kwargs), TypeError,
                       f"{name}[{row}] holds a {type(bad).__name__}")
    name = draw(st.sampled_from(["loss_masks", "logprobs"]))
    row = draw(st.integers(0, len(r_lens) - 1))
    rows: list[Any] = [[1.0] * n for n in r_lens]
    n = r_lens[row]
    rows[row] = torch.ones(draw(st.sampled_from([(1, n), (n, 1), (1, 1)])))
    kwargs[name] = rows
    return BadCase(Case((prompts, responses), kwargs), ValueError,
                   f"{name}[{row}] is a 2-D tensor")


UPSTREAM_0_4 = "skyrl/train/dataset/preprocess.py (skyrl 0.4.0; NovaSky-AI/SkyRL#1808)"

RL_BATCH_0_4_KNOWN = (
    KnownDivergence(
        "scalar_reward_rejected", has_scalar_reward, kind="valid", upstream=UPSTREAM_0_4,
        raises=ValueError,
        doc="a scalar reward per sample (Python number or 0-d tensor) raises ValueError "
            "(`_reward_to_numpy`: 'Expected a 1D per-token reward sequence, got shape ()'); "
            "0.3.0 raised TypeError. The contract puts a scalar on the row's last response "
            "token."),
    KnownDivergence(
        "per_token_length_unchecked", has_taken_length_mismatch, kind="errors",
        upstream=UPSTREAM_0_4, accepts=True,
        doc="a rewards/loss_masks/logprobs row of length L != r_i is written by "
            "`buffer[i, R - L:] = row`: accepted when L <= R (right-aligned by its own length, "
            "so values land on other columns) and when L == 1 with R == 0 (NumPy broadcasts "
            "the value into the empty slice); the contract raises ValueError naming the "
            "argument and row. (A longer row raises NumPy's ValueError: the contract's type.)"),
    KnownDivergence(
        "counts_checked_by_assert", has_count_mismatch, kind="errors", upstream=UPSTREAM_0_4,
        raises=AssertionError,
        doc="count mismatches of prompts/responses/rewards/loss_masks and the empty batch raise "
            "AssertionError from `_verify_inputs`' `assert`s (gone under `python -O`), not "
            "ValueError."),
    KnownDivergence(
        "logprobs_count_unchecked", has_logprobs_count_mismatch, kind="errors",
        upstream=UPSTREAM_0_4, accepts=True, raises=IndexError,
        doc="`logprobs` is not counted: more rows than samples raise IndexError from the "
            "buffer; fewer rows leave the missing rows at 0.0 (an empty list is taken as no "
            "logprobs: `if logprobs:`). The contract raises ValueError."),
    KnownDivergence(
        "pad_token_id_unchecked", has_unchecked_pad_0_4, kind="errors", upstream=UPSTREAM_0_4,
        accepts=True, raises=(OverflowError, ValueError),
        doc="pad_token_id is not validated; `np.full(..., pad_token_id, dtype=np.int64)` "
            "truncates a float (1.5 pads with 1), takes a bool, parses a numeric str ('0') and "
            "raises ValueError for another str, and raises OverflowError for an int beyond "
            "int64 (even when no row needs padding); None raises TypeError (the contract's "
            "type) except on a batch of width 0. The contract raises TypeError / ValueError "
            "naming pad_token_id."),
    KnownDivergence(
        "token_ids_unchecked", has_unchecked_token, kind="errors", upstream=UPSTREAM_0_4,
        accepts=True, raises=(ValueError, OverflowError),
        doc="token ids are not type-checked, and the int64 buffer hides it: a float id is "
            "truncated (`[[1.5]]` becomes token 1; 0.3.0 at least turned the sequences into "
            "float32), a numeric str is parsed ('3' becomes token 3), another str or NaN raises "
            "ValueError, inf OverflowError; None raises TypeError, the contract's type. Tensor "
            "rows too: a float, bool or complex row tensor is cast (`[tensor([1.5])]` becomes "
            "token 1, in a list or a jagged tensor: pins tensor_row_float, "
            "jagged_float_prompts), and a str row is one id broadcast over the row ('12' for "
            "a two-token prompt gives [12, 12]). The contract raises TypeError naming the "
            "argument and row."),
    KnownDivergence(
        "per_token_value_types_unchecked", has_unchecked_value_0_4, kind="errors",
        upstream=UPSTREAM_0_4, accepts=True, raises=ValueError,
        doc="rewards/loss_masks/logprobs entries are not type-checked: the float32 buffers "
            "take None as **NaN**, parse a numeric str or bytes ('0.5', b'1') (0.3.0's "
            "torch.tensor raised on None and str); a non-numeric one raises ValueError. The "
            "contract raises TypeError naming the argument and row. Found with the adapter's "
            "extra bad inputs (the record's strategy draws no such entry)."),
    KnownDivergence(
        "multi_dim_row_unchecked", has_taken_multi_dim_row, kind="errors",
        upstream=UPSTREAM_0_4, accepts=True,
        doc="a loss_masks/logprobs row given as a (1, 1) tensor (or (1, 0) when R == 0) is "
            "taken: NumPy drops its leading dimension; so is a prompt or response row given as "
            "a (1, 1) tensor (in a list, or a 3-D jagged tensor). The contract raises ValueError "
            "(other 2-D rows and nested lists raise NumPy's ValueError, the contract's type; 2-D "
            "rewards rows are rejected by `_reward_to_numpy`)."),
    KnownDivergence(
        "scalar_row_type_error", has_scalar_mask_or_logprob_row, kind="errors",
        upstream=UPSTREAM_0_4, raises=TypeError,
        doc="a loss_masks or logprobs row given as one number (`loss_masks=[1.0]`, or a 0-d "
            "tensor) fails `len(row)` with TypeError, as in 0.3.0; the contract allows a scalar "
            "per sample for rewards only and raises ValueError naming the row. Found by the pin "
            "scalar_loss_mask (2026-11-26)."),
    KnownDivergence(
        "row_types_unchecked", has_unchecked_row_type_0_4, kind="errors",
        upstream=UPSTREAM_0_4, accepts=True, raises=ValueError,
        doc="a per-token row that is not a list is not type-checked: a rewards row that is a "
            "str, bytes, None or a bool becomes a 0-d NumPy array that `_reward_to_numpy` "
            "rejects with ValueError ('Expected a 1D per-token reward sequence, got shape ()'; "
            "a non-numeric str: 'could not convert string to float'), and a loss_masks/logprobs "
            "row that is a str is parsed as one value and broadcast (`loss_masks=['12']` for a "
            "two-token response gives [12.0, 12.0]) or fails to parse (ValueError). The "
            "contract raises TypeError naming the row. Found by the pin string_reward_row "
            "(2026-11-26)."),
)

_INVALID_BASE_0_4 = rl_batch_cases(layouts=("left",), rewards=("none", "per_token"))

RL_BATCH_0_4 = register_adapter(Adapter(
    name="skyrl.rl_batch_0_4",
    framework="skyrl",
    record="rl_batch.build_rl_batch",
    target="skyrl.train.dataset.preprocess:convert_prompts_responses_to_batch_tensors",
    wrap=rl_batch_adapter_0_4,
    distribution="skyrl",
    versions="~=0.4.0",  # pad_token_id first, 8 outputs (PR #1808)
    importing=typed_dict_for_pydantic,
    doc="SkyRL 0.4.0's vectorized left-pad batch builder against build_rl_batch(layout='left')",
    devices=("cpu",),
    dtypes=(torch.int64, torch.float32),
    # the NumPy buffers take lists and 1-D tensors alike; jagged tensors fail on `if logprobs:`
    # (docs/frameworks.md), so that form is not given
    forms=("lists", "tensors"),
    supports=without_replay(left_layout),  # the function takes no routes
    valid=rl_batch_cases(layouts=("left",)),
    # bad inputs start from valid ones without scalar rewards (a scalar reward fails first and
    # would hide the defect under test), plus the entries and rows NumPy treats differently
    invalid=st.one_of(bad_rl_batch_cases(valid=_INVALID_BASE_0_4).map(as_left_layout),
                      value_bad_cases(valid=_INVALID_BASE_0_4)),
    known=RL_BATCH_0_4_KNOWN,
    not_provided=NOT_PRODUCED,
    skip={"property:layouts_agree": "SkyRL has no two_segment layout"},
))
