"""Optimized `rl_batch` (spec: rl_batch.md): vectorized torch, device-generic.

Inputs in any of three forms give identical outputs:
    lists        [[5, 6], [7]]                        flattened once with numpy.fromiter
    tensors      [tensor([5, 6]), tensor([7])]        concatenated with torch.cat
    jagged       NJT(values=[5, 6, 7], offsets=[0, 2, 3])   used as is, on its device

Every output is computed on the target device from per-row lengths: masks and positions are
broadcast comparisons against per-row starts, and the flat tokens / values are written with one
`masked_scatter_` each (a boolean mask visits positions in row-major order, which is exactly the
order of the flattened inputs) — no per-token Python loop, no host round trip besides reading the
widths that give the output shapes.
"""

from __future__ import annotations

import array
import itertools
import logging
import struct

import numpy as np
import torch
from tensordict import TensorDict

from batchproof.impl import _pages as pages
from batchproof.impl import kernels
from batchproof.impl._cpu import byte_view, fast_paths, plain_rows
from batchproof.impl._jagged import rows_of, without_holes
from batchproof.impl._paths import took
from batchproof.impl._sync import Verdicts, documented, host_put, host_read
from batchproof.impl.kernels import rl_batch as rl_batch_kernel
from batchproof.reference import rl_batch as _spec
from batchproof.reference._checks import check_pad_token_id
from batchproof.reference._routes import check_routes, check_sample_support

logger = logging.getLogger(__name__)

LAYOUTS = ("left", "two_segment")


def build_rl_batch(
    prompts,
    responses,
    *,
    pad_token_id,
    rewards=None,
    loss_masks=None,
    logprobs=None,
    layout="left",
    max_seq_len=None,
    device=None,
    routed_experts=None,
    sample_support=None,
) -> TensorDict:
    """Lay out B samples as one RL batch (pictures in `reference.rl_batch`). With
    `routed_experts` / `sample_support` (router replay): the laid-out routes, the router padding
    mask and the support rows too, placed by `_replay_outputs` after every other output."""
    check_pad_token_id(pad_token_id)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    device = _output_device(device, prompts, responses)
    per_token_args = {"rewards": rewards, "loss_mask": loss_masks, "rollout_logprobs": logprobs}
    written = _write_lists(prompts, responses, per_token_args, pad_token_id, layout, device)
    if written is not None:  # CPU fast path: tokens and values already in place
        took("cpu:rl_batch._write_lists")
        p_len, r_len = written.pop("p_len"), written.pop("r_len")
        per_token = {key: None for key in per_token_args}
    else:
        p_len, p_flat = _flatten_tokens(prompts, "prompts", device)
        r_len, r_flat = _flatten_tokens(responses, "responses", device)
        if p_len.numel() != r_len.numel():
            raise ValueError(
                f"prompts and responses must have the same length, got {p_len.numel()} prompts "
                f"and {r_len.numel()} responses")
        if p_len.numel() == 0:
            raise ValueError("prompts is empty: a batch needs at least one sample")
    verdicts = Verdicts()  # the per-token fields' length checks, read with the widths
    with verdicts:
        if written is None:
            per_token = {
                "rewards": _flatten_values(rewards, "rewards", r_len, device, verdicts,
                                           allow_scalar=True),
                "loss_mask": _flatten_values(loss_masks, "loss_masks", r_len, device, verdicts),
                "rollout_logprobs": _flatten_values(logprobs, "logprobs", r_len, device,
                                                    verdicts),
            }
            written = {}
        n_len = p_len + r_len
        widths = verdicts.settle(also=torch.stack([n_len.max(), p_len.max(), r_len.max()]))

    batch = p_len.numel()
    max_total, max_prompt, max_response = widths
    width = max_total if layout == "left" else max_prompt + max_response
    if max_seq_len is not None and width > max_seq_len:
        logger.warning("batch sequence width %d exceeds max_seq_len %d (not truncated)",
                       width, max_seq_len)

    # row i holds prompt_i then response_i from sequence column start_i on; response values
    # start at response column r_start_i (right-aligned in "left", left-aligned in "two_segment")
    start = (width - n_len) if layout == "left" else (max_prompt - p_len)
    r_start = (max_response - r_len) if layout == "left" else torch.zeros_like(r_len)
    kernel = None if written else _one_pass_kernel(device, per_token)
    if kernel is not None:  # every output in one pass (CPU: Numba; CUDA: Triton)
        out = kernel.write_rows(
            p_flat, p_len, r_flat, r_len, start, r_start, width, max_response, pad_token_id,
            {key: None if per_token[key] is None else per_token[key].flat
             for key in _VALUE_KEYS}, ones="loss_mask")
        if routed_experts is not None or sample_support is not None:
            out |= _replay_outputs(routed_experts, sample_support, n_len, r_len, start, r_start,
                                   width, max_response, device)
        return _batch(out, batch, max_response, layout, pad_token_id)
    input_ids = written.get("input_ids")
    if input_ids is None:
        input_ids = _place_tokens(p_flat, r_flat, p_len, r_len, start, width, pad_token_id)
    if layout == "left":
        out = _left_masks(n_len, r_len, width, max_response)
    else:
        out = _two_segment_masks(p_len, r_len, n_len, start, width, max_response)
    out = {"input_ids": input_ids} | out
    right_aligned = layout == "left"  # the response tensors of the left layout
    keep = _response_rows(r_len, max_response, right_aligned, _pair(0, -1, torch.int32, device))
    for key in _VALUE_KEYS:
        values = per_token[key]
        if key in written:
            out[key] = written[key]
        elif values is not None:
            out[key] = _place_values(values, r_len, r_start, keep)
        elif key == "loss_mask":
            out[key] = _response_rows(r_len, max_response, right_aligned,
                                      _pair(0.0, 1.0, torch.float32, device))
    if routed_experts is not None or sample_support is not None:
        out |= _replay_outputs(routed_experts, sample_support, n_len, r_len, start, r_start,
                               width, max_response, device)

    return _batch(out, batch, max_response, layout, pad_token_id)


def _batch(out: dict, batch: int, max_response: int, layout: str, pad_token_id: int):
    td = TensorDict(out, batch_size=[batch], device=None)
    td.set_non_tensor("max_response_length", max_response)
    td.set_non_tensor("layout", layout)
    td.set_non_tensor("pad_token_id", pad_token_id)
    return td


_VALUE_KEYS = ("loss_mask", "rewards", "rollout_logprobs")  # the order of the outputs


def _one_pass_kernel(device, per_token: dict):
    """The module whose `write_rows` writes every output in one pass here — the compiled CPU
    kernel on the CPU, the Triton kernels on CUDA — or None (the torch composition). Both take
    flat values only: scalar rewards go the torch way."""
    if any(v is not None and v.scalars is not None for v in per_token.values()):
        return None
    if fast_paths(device) and kernels.available():
        return rl_batch_kernel
    if kernels.triton_applies(device):
        from batchproof.impl.kernels import triton_rl_batch

        return triton_rl_batch
    return None


def response_values(values, response_mask) -> list[torch.Tensor]:
    """Row i: the last `n_i = response_mask[i].sum()` entries of `values[i]` (left layout).

    `n_i == 0` gives an empty tensor (a plain `values[i][-n_i:]` would return the whole row).
    """
    if values.dim() != 2 or response_mask.dim() != 2:
        raise ValueError("values and response_mask must be 2-D (B, R) tensors")
    if values.shape != response_mask.shape:
        raise ValueError(
            f"values {tuple(values.shape)} and response_mask {tuple(response_mask.shape)} "
            "must have the same shape")
    counts = response_mask.sum(dim=1).tolist()
    width = values.shape[1]
    return [row[width - n:] for row, n in zip(values.unbind(0), counts)]


def _write_lists(prompts, responses, per_token_args, pad_token_id, layout, device):
    """CPU fast path for Python lists: pack each row with `struct.pack_into` straight into its
    place in the output tensors — one C loop per row that also validates every value (a float
    token id is a `struct.error`, never truncated) — instead of flattening and scattering.

        input_ids row i:  [pad ... pad | prompt_i | response_i]   packed at i*T + start_i

    A per-token argument may also be a list of 1-D real CPU tensors (a float16 loss mask beside
    list tokens): each row is converted as the reference reads it (`.float()`, signaling NaNs
    made quiet) and copied into its place.

    Returns None (the general path then raises the reference's error, in the reference's order)
    unless every argument is a list of lists (or tensor rows) with the right counts and lengths.
    """
    if not fast_paths(device) or not (plain_rows(prompts) and plain_rows(responses)):
        return None
    batch = len(prompts)
    if batch == 0 or len(responses) != batch:
        return None
    p_len = np.fromiter(map(len, prompts), dtype=np.int64, count=batch)
    r_len = np.fromiter(map(len, responses), dtype=np.int64, count=batch)
    given = {key: rows for key, rows in per_token_args.items() if rows is not None}
    tensor_rows = set()
    for key, rows in given.items():
        if not isinstance(rows, (list, tuple)) or len(rows) != batch:
            return None
        if _cpu_value_rows(rows):
            tensor_rows.add(key)
        elif not plain_rows(rows):
            return None
        if not np.array_equal(np.fromiter(map(len, rows), dtype=np.int64, count=batch), r_len):
            return None
    n_len = p_len + r_len
    max_prompt, max_response = int(p_len.max()), int(r_len.max())
    width = int(n_len.max()) if layout == "left" else max_prompt + max_response
    start = (width - n_len) if layout == "left" else (max_prompt - p_len)
    r_start = (max_response - r_len) if layout == "left" else np.zeros_like(r_len)
    input_ids = _filled((batch, width), torch.int64, pad_token_id)
    written = {"input_ids": input_ids, "p_len": torch.from_numpy(p_len),
               "r_len": torch.from_numpy(r_len)}
    try:
        _pack_rows(input_ids, "q", prompts, np.arange(batch) * width + start)
        _pack_rows(input_ids, "q", responses, np.arange(batch) * width + start + p_len)
        for key, rows in given.items():
            written[key] = _filled((batch, max_response), torch.float32, 0)
            firsts = np.arange(batch) * max_response + r_start
            if key in tensor_rows:
                _copy_value_rows(written[key], rows, firsts)
            else:
                _pack_rows(written[key], "f", rows, firsts)
    except (struct.error, TypeError, OverflowError):
        return None
    return written


def _cpu_value_rows(rows) -> bool:
    """Rows that are all 1-D real, strided CPU tensors (what `_copy_value_rows` copies)."""
    return all(isinstance(row, torch.Tensor) and row.dim() == 1 and not row.is_complex()
               and row.layout == torch.strided and row.device.type == "cpu" for row in rows)


def _copy_value_rows(out: torch.Tensor, rows, first_elements: np.ndarray) -> None:
    """Row k's values, as float32, at element first_elements[k] of `out` (then every signaling
    NaN made quiet, as the reference's Python floats make it)."""
    flat = out.view(-1).numpy()
    for row, first in zip(rows, first_elements.tolist()):
        flat[first:first + row.shape[0]] = row.detach().resolve_neg().to(torch.float32).numpy()
    quiet = quieted(out)
    if quiet is not out:
        out.copy_(quiet)


def _filled(shape: tuple[int, int], dtype: torch.dtype, value) -> torch.Tensor:
    """A new CPU tensor holding `value`, filled by NumPy on this thread. The CPU fast paths
    write their outputs on one thread: torch's intra-op threads gain a few percent there and
    lose a quarter beside a busy neighbour (docs/performance.md, "Per core and on a busy
    host")."""
    out = pages.take(shape, dtype)
    out.numpy().fill(value)
    return out


def _pack_rows(out: torch.Tensor, code: str, rows, first_elements: np.ndarray) -> None:
    """Pack row k's values (struct format `code`) at element first_elements[k] of `out`."""
    buffer, size = byte_view(out), out.element_size()
    for row, first in zip(rows, first_elements.tolist()):
        struct.pack_into(f"{len(row)}{code}", buffer, size * first, *row)


# --------------------------------------------------------------------------- output placement
# Rows that differ only by where a step happens are windows of one short base vector: with
#     base = [a a a a | b b b b]            (2W entries)
#     base.unfold(0, W, 1)[c] = [a]*(W-c) + [b]*c
# so one `index_select` of those overlapping windows (a view) writes a whole (B, W) mask, each
# output byte once, from a base that stays in cache.


def _pair(low, high, dtype: torch.dtype, device) -> torch.Tensor:
    """[low, high] made on the device (`torch.tensor([low, high], device=...)` is a copy from
    the host, which waits for the device on CUDA)."""
    return torch.arange(2, dtype=dtype, device=device).mul_(high - low).add_(low)


def _step_rows(counts, width, base_pair: torch.Tensor) -> torch.Tensor:
    """(B, width): row i is [low]*(width - counts[i]) + [high]*counts[i], base_pair = [low, high]."""
    return _window_rows(base_pair.repeat_interleave(width), width, counts)


def _window_rows(base: torch.Tensor, width: int, counts: torch.Tensor) -> torch.Tensor:
    """(B, width): row i is `base[counts[i] : counts[i] + width]`. On the CPU fast paths NumPy
    copies the windows on this thread, row by row (`_filled` says why one thread; torch's
    `index_select` of overlapping windows is a strided gather, 11 ms for 1024 rows of 2500
    where the row copies take 1.8, one thread each); elsewhere `index_select` does."""
    if fast_paths(base.device):  # a row copy each: ~7x faster than index_select on a window
        took("cpu:rl_batch._window_rows")
        out = pages.take((counts.numel(), width), base.dtype)
        windows = np.lib.stride_tricks.sliding_window_view(base.numpy(), width)
        rows = out.numpy()
        for row, count in enumerate(counts.tolist()):
            rows[row] = windows[count]
        return out
    return base.unfold(0, width, 1).index_select(0, counts)


def _response_rows(r_len, width, right_aligned: bool, base_pair) -> torch.Tensor:
    """(B, R) response-aligned rows: `high` on row i's r_i response columns, `low` elsewhere.

        right_aligned (left layout):         [low ... low | high * r_i]
        left-aligned (two_segment layout):   [high * r_i | low ... low]
    """
    if right_aligned:
        return _step_rows(r_len, width, base_pair)
    return _step_rows(width - r_len, width, base_pair.flip(0))


def _left_masks(n_len, r_len, width, max_response) -> dict[str, torch.Tensor]:
    """attention_mask, position_ids and response_mask of the left layout: step rows."""
    int64 = {"dtype": torch.int64, "device": n_len.device}
    positions = torch.cat([torch.zeros(width, **int64), torch.arange(width, **int64)])
    return {
        "attention_mask": _step_rows(n_len, width, _pair(0, 1, torch.int64, n_len.device)),
        "position_ids": _window_rows(positions, width, n_len),
        "response_mask": _step_rows(r_len, max_response, _pair(0, 1, torch.int64, n_len.device)),
    }


def _two_segment_masks(p_len, r_len, n_len, start, width, max_response):
    """The two_segment masks: real tokens in [start_i, start_i + n_i), then right padding whose
    positions repeat the row's last real position."""
    columns = torch.arange(width, device=p_len.device)
    real = (columns >= start[:, None]) & (columns < (start + n_len)[:, None])
    position_ids = (columns - start[:, None]).clamp_(min=0)
    position_ids = torch.minimum(position_ids, (n_len - 1).clamp(min=0)[:, None])
    one = _pair(0, 1, torch.int64, p_len.device)
    return {
        "attention_mask": real.to(torch.int64),
        "position_ids": position_ids,
        "response_mask": _response_rows(r_len, max_response, False, one),
    }


def _place_tokens(p_flat, r_flat, p_len, r_len, start, width, pad_token_id) -> torch.Tensor:
    """input_ids (B, T): [pad]*start_i + prompt_i + response_i + [pad]* (the rest of the row)."""
    batch, device = p_len.numel(), p_flat.device
    input_ids = torch.full((batch, width), pad_token_id, dtype=torch.int64, device=device)
    if fast_paths(device):
        took("cpu:rl_batch._copy_rows_cpu")
        _copy_rows_cpu(input_ids, p_flat, r_flat, p_len, r_len, start)
    else:
        _place_tokens_generic(input_ids, p_flat, r_flat, p_len, r_len, start)
    return input_ids


def _place_tokens_generic(input_ids, p_flat, r_flat, p_len, r_len, start) -> None:
    """Device-generic: a boolean mask visits positions in row-major order, the order of the flat
    tokens."""
    columns = torch.arange(input_ids.shape[1], device=input_ids.device)
    prompt_end = (start + p_len)[:, None]
    input_ids.masked_scatter_((columns >= start[:, None]) & (columns < prompt_end), p_flat)
    input_ids.masked_scatter_((columns >= prompt_end) & (columns < prompt_end + r_len[:, None]),
                              r_flat)


def _copy_rows_cpu(input_ids, p_flat, r_flat, p_len, r_len, start) -> None:
    """CPU: one memcpy (a byte-level memoryview slice assignment) per prompt and per response,
    straight into its place:

        input_ids row i:   [pad ... pad | prompt_i | response_i]   from element i*T + start_i
    """
    ids, prompts, responses = map(byte_view, (input_ids, p_flat, r_flat))
    size, width = input_ids.element_size(), input_ids.shape[1]
    first = (start + torch.arange(p_len.numel()) * width) * size
    rows = zip(first.tolist(), (p_len * size).tolist(), (torch.cumsum(p_len, 0) * size).tolist(),
               (r_len * size).tolist(), (torch.cumsum(r_len, 0) * size).tolist())
    for first, n_p, p_stop, n_r, r_stop in rows:
        ids[first:first + n_p] = prompts[p_stop - n_p:p_stop]
        ids[first + n_p:first + n_p + n_r] = responses[r_stop - n_r:r_stop]


def _place_values(values: _Values, r_len, r_start, keep) -> torch.Tensor:
    """(B, R) float32: row i's r_i values at response columns [r_start_i, r_start_i + r_i), 0.0
    elsewhere.

    Without scalar rows, row i is a window of the flat values (padded with R zeros on both
    sides) that starts r_start_i entries before the row's first value; the neighbours' values the
    window also covers are cleared by AND-ing the bits with `keep` (-1 on the row's columns, 0
    elsewhere): exact for every float, NaN and -0.0 included.
    """
    if keep.shape[1] == 0:
        return torch.zeros(keep.shape, dtype=torch.float32, device=keep.device)
    if values.scalars is not None:
        return _place_values_with_scalars(values, r_len, r_start, keep)
    flat, width = values.flat, keep.shape[1]
    padding = flat.new_zeros(width)
    first = torch.cumsum(r_len, 0) - r_len - r_start + width  # index in the padded flat values
    rows = torch.cat([padding, flat, padding]).unfold(0, width, 1).index_select(0, first)
    return rows.view(torch.int32).bitwise_and_(keep).view(torch.float32)


def _place_values_with_scalars(values: _Values, r_len, r_start, keep) -> torch.Tensor:
    """Rows given as a scalar hold no per-token values: scatter the others, then the scalars."""
    dense = torch.zeros(keep.shape, dtype=torch.float32, device=keep.device)
    dense.masked_scatter_(keep.bool() & values.row_mask.bool()[:, None], values.flat)
    _place_scalar_rewards(dense, values.scalars, r_len, r_start)
    return dense

class _Values:
    """Flattened per-token values of one argument: the flat float32 tensor, which rows it covers,
    and the per-row scalars (scalar rewards)."""

    def __init__(self, flat, row_mask=None, scalars=None):
        self.flat, self.row_mask, self.scalars = flat, row_mask, scalars


def _place_scalar_rewards(dense, scalars, r_len, r_start):
    """A scalar reward sits on the row's last response token; nothing when r_i == 0."""
    is_scalar, value = scalars  # (dense has R > 0 columns: _place_values returns R == 0 early)
    rows = torch.arange(dense.shape[0], device=dense.device)
    last = (r_start + r_len - 1).clamp(min=0)  # no host sync: every row writes, most unchanged
    dense[rows, last] = torch.where(is_scalar & (r_len > 0), value, dense[rows, last])


def _flatten_tokens(rows, name, device):
    """(lengths int64 (B,), flat int64 tokens) on `device` from lists, tensors or an NJT."""
    if isinstance(rows, torch.Tensor) and rows.is_nested:
        if without_holes(rows) and not (rows.is_floating_point() or rows.dtype == torch.bool):
            offsets = rows.offsets().to(device)
            return torch.diff(offsets), rows.values().to(device=device, dtype=torch.int64)
        # values() holds holes, or rows the reference rejects (not 1-D, not integer): read its
        # rows, as the reference does (its error names the row)
        rows = rows_of(rows)
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__"):
        raise TypeError(f"{name} must be a sequence of token sequences, got {type(rows).__name__}")
    kinds = set(map(type, rows))
    if kinds and all(issubclass(k, torch.Tensor) for k in kinds):
        for i, row in enumerate(rows):
            if row.dim() != 1:
                raise ValueError(f"{name}[{i}] must be 1-D, got shape {tuple(row.shape)}")
            if row.is_floating_point() or row.dtype == torch.bool:
                raise TypeError(f"{name}[{i}] must hold integer token ids, got {row.dtype}")
        lengths = host_put([row.numel() for row in rows], dtype=torch.int64, device=device)
        flat = torch.cat([row.to(device=device, dtype=torch.int64) for row in rows])
        return lengths, flat
    if kinds and not any(issubclass(k, torch.Tensor) for k in kinds):
        try:
            lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
            # array('q') converts with __index__: a float token id is a TypeError, never
            # truncated (numpy.fromiter would truncate 2.5 to 2 silently)
            flat = np.frombuffer(array.array("q", itertools.chain.from_iterable(rows)),
                                 dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            pass  # fall through to the row-by-row conversion, which names the row
        else:
            return host_put(lengths, device=device), host_put(flat, device=device)
    with documented():  # mixed rows (tensors among lists): read row by row, as the reference
        converted = [_spec._token_list(row, name, i) for i, row in enumerate(rows)]
    lengths = [len(r) for r in converted]
    flat = list(itertools.chain.from_iterable(converted))
    return (host_put(lengths, dtype=torch.int64, device=device),
            host_put(flat, dtype=torch.int64, device=device))


def _flatten_values(values, name, r_len, device, verdicts: Verdicts, allow_scalar=False):
    """Per-token float32 values of `name` (one entry per sample, each of r_i values)."""
    if values is None:
        return None
    if isinstance(values, torch.Tensor) and values.is_nested:
        if without_holes(values):
            lengths = torch.diff(values.offsets()).to(device)
            _check_count(lengths.numel(), r_len.numel(), name)
            _check_lengths(lengths, r_len, name, verdicts)
            return _Values(quieted(values.values().detach().to(device=device,
                                                               dtype=torch.float32)))
        values = rows_of(values)  # values() holds holes: read its rows, as the reference
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a list with one entry per sample, "
                        f"got {type(values).__name__}")
    _check_count(len(values), r_len.numel(), name)
    kinds = set(map(type, values))
    if (kinds and all(issubclass(k, (list, tuple)) for k in kinds)
            and set(map(type, itertools.chain.from_iterable(values))) <= _PLAIN_NUMBERS):
        # numpy.fromiter would take None as NaN and "0.5" as 0.5: only plain Python numbers
        # take this path (the rows path raises the reference's errors for the others)
        try:
            lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
            flat = np.fromiter(itertools.chain.from_iterable(values), dtype=np.float32,
                               count=int(lengths.sum()))
        except (TypeError, ValueError, OverflowError):
            pass  # the row-by-row path below raises the reference's error for the bad row
        else:
            _check_lengths(host_put(lengths, device=device), r_len, name, verdicts)
            return _Values(host_put(flat, device=device))
    if kinds and all(issubclass(k, torch.Tensor) for k in kinds):
        flat = _tensor_rows_flat(values, device)
        if flat is not None:
            lengths = host_put([row.shape[0] for row in values], dtype=torch.int64,
                               device=device)
            _check_lengths(lengths, r_len, name, verdicts)
            return _Values(flat)
    return _flatten_mixed(values, name, r_len, device, allow_scalar)


def _tensor_rows_flat(rows, device) -> torch.Tensor | None:
    """1-D real tensor rows as one flat float32 tensor on `device` (each row converted as the
    reference reads it, `.float()`), or None for anything else — a scalar row, another rank, a
    complex or jagged row — which the row-by-row path reads and rejects as the reference does."""
    for row in rows:
        if row.dim() != 1 or row.is_complex() or row.layout != torch.strided:
            return None
    if not rows:
        return None
    return quieted(torch.cat([row.detach().to(device=device, dtype=torch.float32)
                              for row in rows]))


_QUIET_BIT = 1 << 22  # of a float32 NaN: set in a quiet NaN, clear in a signaling one


def quieted(flat: torch.Tensor) -> torch.Tensor:
    """Float32 values as the reference reads them: each through a Python float, which turns a
    signaling NaN into the quiet NaN of the same payload (its quiet bit set) and keeps every
    other value, bit for bit. `flat` itself where it holds no NaN (on the CPU fast paths,
    looked for in one read-only pass); elsewhere a new tensor (the device-generic code CUDA
    runs: always, so that nothing is read back)."""
    if fast_paths(flat.device) and not bool(flat.isnan().any()):
        return flat
    bits = flat.view(torch.int32)
    return torch.where(flat.isnan(), bits | _QUIET_BIT, bits).view(torch.float32)


_PLAIN_NUMBERS = {float, int, bool}  # bool: 0.0 / 1.0, as the reference reads it


def _flatten_mixed(values, name, r_len, device, allow_scalar):
    """Row-by-row path: tensors, scalars, or anything the fast path could not convert. Rows
    given as tensors are read to the host here (a documented read: per-token values on the
    device stay there as a jagged tensor)."""
    with documented():
        rows = _spec._per_token_values(values, name, r_len.tolist(), allow_scalar)
    is_scalar = [isinstance(row, float) for row in rows]
    lists = [row for row in rows if not isinstance(row, float)]
    flat = host_put(list(itertools.chain.from_iterable(lists)), dtype=torch.float32,
                    device=device)
    row_mask = host_put([not s for s in is_scalar], dtype=torch.int64, device=device)
    scalars = None
    if any(is_scalar):
        scalars = (host_put(is_scalar, dtype=torch.bool, device=device),
                   host_put([row if s else 0.0 for row, s in zip(rows, is_scalar)],
                            dtype=torch.float32, device=device))
    return _Values(flat, row_mask, scalars)


def _check_count(count, batch, name):
    if count != batch:
        raise ValueError(f"{name} must have one entry per sample: got {count} entries "
                         f"for {batch} samples")


def _check_lengths(lengths, r_len, name, verdicts: Verdicts):
    bad = lengths != r_len

    def error() -> ValueError:
        i = int(bad.nonzero()[0])
        return ValueError(f"{name}[{i}] has {int(lengths[i])} entries, but response {i} has "
                          f"{int(r_len[i])} tokens")
    verdicts.add(bad.any(), error)


# --------------------------------------------------------------------------- router replay
# One torch pass per output beside the kernels (which write the token outputs only), on the
# output device: every captured route copied to its token's slot with one `index_copy_` into a
# tensor of dummy routes; every support row to its response column into a tensor of -1 rows.
#
#     row i, route j  ->  slot i*T + start_i + j        (start_i: the column of the row's token 0)
#     row i, support k ->  row  i*R + r_start_i + k     (r_start_i: its first response column)


def _replay_outputs(routed_experts, sample_support, n_len, r_len, start, r_start, width: int,
                    max_response: int, device) -> dict[str, torch.Tensor]:
    """`routed_experts` (B, T, layers, topk), `router_padding_mask` (B, T) and `sample_support`
    (B, R, top_k) of the given router-replay inputs (reference.rl_batch.build_rl_batch).

    Validated as the reference validates them, in its order: the structures on the host (each
    sample's own count of routes / support rows standing in for its lengths, which are on the
    device), then the counts against the lengths and the values, as verdicts read together in
    one documented transfer. On any failure the reference's checks run on the host lengths (a
    documented read, the error path) and raise its error."""
    routes_in, support_in = _replay_entries(routed_experts), _replay_entries(sample_support)
    batch = n_len.numel()
    try:
        route_spec = check_routes(routes_in, _own_counts(routes_in, batch))
        support_spec = check_sample_support(support_in, _own_counts(support_in, batch))
    except (TypeError, ValueError) as err:
        _raise_the_references_error(routes_in, support_in, n_len, r_len, err)
        raise
    verdicts, out = [], {}
    if route_spec is not None:
        routes = _stacked(routes_in, (route_spec.layers, route_spec.topk), route_spec.dtype,
                          device)
        captured = host_put([int(entry.shape[0]) for entry in routes_in], dtype=torch.int64,
                            device=device)
        verdicts += [(captured > n_len).any(), (routes < 0).any()]
    if support_spec is not None:
        support = _stacked(support_in, (support_spec.top_k,), support_spec.dtype, device)
        rows = host_put([int(entry.shape[0]) for entry in support_in], dtype=torch.int64,
                        device=device)
        after_padding = (support[:, :-1] == -1) & (support[:, 1:] != -1)
        verdicts += [(rows != r_len).any(), (support < -1).any() | after_padding.any()]
    if any(host_read(torch.stack(verdicts))):  # the validation verdicts: one read
        _raise_the_references_error(routes_in, support_in, n_len, r_len, None)
    if route_spec is not None:
        slots = _replay_slots(captured, start, width, routes.shape[0])
        placed = torch.arange(route_spec.topk, dtype=route_spec.dtype, device=device)
        placed = placed.expand(batch * width, route_spec.layers, route_spec.topk).clone()
        placed.index_copy_(0, slots, routes)
        mask = torch.ones(batch * width, dtype=torch.bool, device=device)
        mask.index_fill_(0, slots, False)
        out["routed_experts"] = placed.reshape(batch, width, route_spec.layers, route_spec.topk)
        out["router_padding_mask"] = mask.reshape(batch, width)
    if support_spec is not None:
        placed = torch.full((batch * max_response, support_spec.top_k), -1,
                            dtype=support_spec.dtype, device=device)
        placed.index_copy_(0, _replay_slots(rows, r_start, max_response, support.shape[0]),
                           support)
        out["sample_support"] = placed.reshape(batch, max_response, support_spec.top_k)
    return out


def _replay_slots(counts: torch.Tensor, first: torch.Tensor, width: int,
                  total: int) -> torch.Tensor:
    """The flat slot of each of `total` items given `counts[i]` per row, back to back: item j
    of row i at `i * width + first[i] + j` (the size known on the host: no read)."""
    device = counts.device
    owner = torch.repeat_interleave(torch.arange(counts.numel(), device=device), counts,
                                    output_size=total)
    within = torch.arange(total, device=device) - (torch.cumsum(counts, 0) - counts)[owner]
    return owner * width + first.to(device)[owner] + within


def _replay_entries(values):
    """A jagged tensor's rows (a documented read of its offsets), anything else as given (the
    reference's checks say what is wrong with it)."""
    if isinstance(values, torch.Tensor) and values.is_nested:
        return rows_of(values)
    return values


def _own_counts(entries, batch: int) -> list[int]:
    """Each sample's own first dimension (0 where it has none): the lengths the structural
    checks are given on the host, so that only the counts against the real lengths are left
    to the device's verdicts (a wrong entry count fails before any of them is read)."""
    if not isinstance(entries, (list, tuple)):
        return [0] * batch
    shapes = [getattr(entry, "shape", ()) for entry in entries[:batch]]
    return [int(shape[0]) if len(shape) else 0 for shape in shapes] + [0] * (batch - len(shapes))


def _stacked(entries, trailing: tuple, dtype: torch.dtype, device) -> torch.Tensor:
    """Per-sample arrays (tensors or NumPy arrays, validated) back to back on `device` (a
    read-only NumPy array is copied: torch would share, and warn about, its memory)."""
    parts = [host_put(np.require(entry, requirements=["C", "W"]) if isinstance(entry, np.ndarray)
                      else entry, device=device) for entry in entries]
    if not parts:
        return torch.empty((0, *trailing), dtype=dtype, device=device)
    return torch.cat(parts)


def _raise_the_references_error(routes_in, support_in, n_len, r_len, found) -> None:
    """The error path: the reference's checks on the host lengths (a documented read) raise
    its first error; `found` (the host checks' error) if they do not."""
    with documented():
        _spec._check_replay(routes_in, support_in, n_len.tolist(), r_len.tolist())
    if found is not None:
        raise found
    raise AssertionError("a router-replay verdict failed where the reference's checks pass")


def _output_device(device, prompts, responses):
    if device is not None:
        return torch.device(device)
    for rows in (prompts, responses):
        if isinstance(rows, torch.Tensor):
            return rows.device
        if isinstance(rows, (list, tuple)) and rows and isinstance(rows[0], torch.Tensor):
            return rows[0].device
    return torch.device("cpu")
