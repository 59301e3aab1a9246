"""Optimized `varlen`: packed variable-length rows, and logprobs from them (spec: varlen.md).

Same public functions and results as `reference.varlen`, vectorized and device-generic: token ids
are flattened once, moved to the target device once, and every index is computed there. One packed
row (three samples, the middle one empty, `pad_to_multiple=4`):

    sample        0 0 0 0 0 | 2 2 2 | .         p prompt, r response, . tail pad
    tokens        p p p r r | p r r | .
    position_ids  0 1 2 3 4 | 0 1 2 | 0         restart at 0 per sample; the pad is its own segment
    cu_seqlens    0         5       8   9       empty samples add no boundary
    target_index        3 4     6 7             the response tokens
    predict_index     2 3     5 6               the logits that score them (one to the left)

`response_logprobs` packs the samples that have a response into one long row, cuts it into
token-budget micro-batches at sample boundaries (each a contiguous slice, padded to
`pad_to_multiple` with its own segment), forwards each with restarting `position_ids`,
`attention_mask=None` and `use_cache=False`, and gathers float32 logprobs at `predict_index`.
"""

from __future__ import annotations

import bisect
import itertools
import numbers
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from batchproof.impl import _pages as pages
from batchproof.impl import kernels
from batchproof.impl._cpu import byte_view, fast_paths, plain_rows, small_int_rows
from batchproof.impl._jagged import rows_of, without_holes
from batchproof.impl._paths import took
from batchproof.impl._sync import callers_code, documented, host_put, host_read
from batchproof.impl.kernels import varlen as varlen_kernel
from batchproof.reference._checks import check_pad_token_id
from batchproof.reference._routes import (
    check_route_values,
    check_router_padding_mask,
    check_routes,
    check_sample_support,
    check_support_values,
    check_token_route_values,
    check_token_routes,
)
from batchproof.reference.varlen import (  # the contract's argument checks, shared with the oracle
    _check_int,
    _check_logprob_options,
    _check_model,
    _check_positive_int,
    _check_start,
    _output_device,
)

PACKING_MODES = ("auto", "position_ids", "mask", "rows")


# --------------------------------------------------------------------------------------------
# validated, flattened input
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Samples:
    """B samples as flat token tensors on the work device, plus their lengths (host and device)."""

    prompt_tokens: torch.Tensor
    response_tokens: torch.Tensor
    prompt_lengths: torch.Tensor
    response_lengths: torch.Tensor
    host_prompt_lengths: torch.Tensor  # CPU copies: shapes and validation need them on the host
    host_response_lengths: torch.Tensor

    @property
    def size(self) -> int:
        return self.host_prompt_lengths.shape[0]


def _samples(prompts, responses, device: torch.device) -> _Samples:
    """Validate like the reference (same order, same exception types) and flatten onto `device`."""
    p_tokens, p_lengths, p_host = _flatten(prompts, "prompts", device)
    r_tokens, r_lengths, r_host = _flatten(responses, "responses", device)
    if p_lengths.shape[0] != r_lengths.shape[0]:
        raise ValueError(f"prompts and responses must have the same length, got "
                         f"{p_lengths.shape[0]} prompts and {r_lengths.shape[0]} responses")
    if p_lengths.shape[0] == 0:
        raise ValueError("prompts is empty: a batch needs at least one sample")
    p_host, r_host = _host_lengths(p_lengths, p_host, r_lengths, r_host)
    unscorable = ((p_host == 0) & (r_host > 0)).nonzero()
    if unscorable.numel():
        k = int(unscorable[0])
        raise ValueError(
            f"sample {k} has an empty prompt and a response of {int(r_host[k])} tokens: its "
            "first response token has no logit in its own segment (packed, it would read "
            "the previous sample's last logit)")
    return _Samples(p_tokens, r_tokens, p_lengths, r_lengths, p_host, r_host)


def _host_lengths(p_lengths, p_host, r_lengths, r_host) -> tuple[torch.Tensor, torch.Tensor]:
    """The host's copies of the lengths (shapes and validation need them): the ones not known
    already (a jagged input's) in one documented read."""
    unknown = [device for device, host in ((p_lengths, p_host), (r_lengths, r_host))
               if host is None]
    if unknown:
        read = iter(torch.tensor(host_read(torch.stack(unknown))).reshape(len(unknown), -1))
        p_host = next(read) if p_host is None else p_host
        r_host = next(read) if r_host is None else r_host
    return p_host, r_host


def _flatten(rows, name: str, device: torch.device):
    """(flat int64 tokens, int64 lengths) on `device`, and the lengths on the host where they
    are known without reading the device (None for a jagged tensor's), of one list of rows."""
    if without_holes(rows):
        if rows.size(0) > 0:
            _check_token_dtype(rows.dtype, f"{name}[0]")  # the reference checks row by row
        values = rows.values().to(device=device, dtype=torch.int64)
        return values, rows.offsets().diff().to(device=device, dtype=torch.int64), None
    rows = _rows(rows, name)
    if all(isinstance(row, (list, tuple)) for row in rows):
        flat = _flatten_lists(rows, device)
        if flat is not None:
            return flat
    # tensor rows, or lists the C conversion declined: row by row, as the reference (which
    # raises its error, naming the row, for a value that is not an int within int64)
    parts = [_row_tensor(row, name, k) for k, row in enumerate(rows)]
    lengths = torch.tensor([part.shape[0] for part in parts], dtype=torch.int64)
    # (never no rows here: an empty list is a list of lists, converted above)
    flat = torch.cat([host_put(part, device=device) for part in parts])
    return flat, host_put(lengths, device=device), lengths


def _flatten_lists(rows, device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Lists of ints in one C conversion; None for a value that is not an int (a bool, a float)
    or an id beyond int64."""
    flat = list(itertools.chain.from_iterable(rows))
    if any(k is bool or not issubclass(k, numbers.Integral) for k in set(map(type, flat)) - {int}):
        return None
    try:
        values = np.array(flat, dtype=np.int64)
    except OverflowError:
        return None
    lengths = torch.tensor(list(map(len, rows)), dtype=torch.int64)
    return host_put(values, device=device), host_put(lengths, device=device), lengths


def _rows(rows, name: str) -> list:
    if isinstance(rows, torch.Tensor) and rows.is_nested:
        return rows_of(rows)
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__"):
        raise TypeError(f"{name} must be a sequence of token sequences, got {type(rows).__name__}")
    return list(rows)


def _row_tensor(row, name: str, index: int) -> torch.Tensor:
    """One row as a 1-D int64 tensor (kept on its device), validated like the reference."""
    if isinstance(row, torch.Tensor):
        if row.dim() != 1:
            raise ValueError(f"{name}[{index}] must be 1-D, got shape {tuple(row.shape)}")
        _check_token_dtype(row.dtype, f"{name}[{index}]")
        return row.to(torch.int64)
    if isinstance(row, (str, bytes)) or not hasattr(row, "__iter__"):
        raise TypeError(f"{name}[{index}] must be a sequence of ints, got {type(row).__name__}")
    row = list(row)
    for value in row:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name}[{index}] must hold ints, got {type(value).__name__}")
    return torch.tensor(row, dtype=torch.int64)


def _check_token_dtype(dtype: torch.dtype, name: str) -> None:
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got {dtype}")


# --------------------------------------------------------------------------------------------
# pack_varlen
# --------------------------------------------------------------------------------------------


def pack_varlen(
    prompts, responses, *, pad_to_multiple=1, pad_token_id=0, position_ids_start=0, device=None,
    routed_experts=None, sample_support=None,
) -> TensorDict:
    """Concatenate every sample's prompt + response into one row (see the module docstring);
    positions count from `position_ids_start` in every sample and in the tail pad. With
    `routed_experts` / `sample_support` (router replay): the packed routes, the router padding
    mask and the support rows too (reference.varlen.pack_varlen)."""
    check_pad_token_id(pad_token_id)
    _check_positive_int(pad_to_multiple, "pad_to_multiple")
    _check_start(position_ids_start)
    device = _output_device(device, prompts, responses)
    written = _write_lists(prompts, responses, pad_to_multiple, pad_token_id, device)
    if written is not None:  # CPU fast path: the tokens are already in place
        took("cpu:varlen._write_lists")
        samples, input_ids = written
    else:
        samples, input_ids = _samples(prompts, responses, device), None
    replay = _Replay.of(routed_experts, sample_support, samples, device)
    out = _pack(samples, pad_to_multiple, pad_token_id, input_ids, position_ids_start)
    if replay is not None:
        replay.write(out, samples)
    return out


def _pack(samples: _Samples, pad_to_multiple: int, pad_token_id: int,
          input_ids: torch.Tensor | None = None, position_ids_start: int = 0) -> TensorDict:
    device = samples.prompt_lengths.device
    host_lengths = samples.host_prompt_lengths + samples.host_response_lengths
    real = int(host_lengths.sum())
    total = _padded_size(real, pad_to_multiple)
    pad = total - real
    p_len, r_len = samples.prompt_lengths, samples.response_lengths
    lengths = p_len + r_len
    n_responses = int(samples.host_response_lengths.sum())
    if fast_paths(device) and kernels.available():
        input_ids, positions, target_index, predict_index, sample_index = \
            varlen_kernel.write_samples(samples.prompt_tokens, p_len, samples.response_tokens,
                                        r_len, total, pad_token_id, input_ids)
    elif kernels.triton_applies(device):  # CUDA: one pass, on the device
        from batchproof.impl.kernels import triton_varlen

        input_ids, positions, target_index, predict_index, sample_index = \
            triton_varlen.write_samples(samples.prompt_tokens, p_len, samples.response_tokens,
                                        r_len, total, pad_token_id, int(host_lengths.max()),
                                        n_responses, real)
    else:
        offsets = _exclusive_cumsum(lengths)
        # response token k of sample i sits at offsets_i + p_i + (k - its flat start)
        target_index = _ramps(r_len, offsets + p_len - _exclusive_cumsum(r_len), n_responses)
        if input_ids is None:
            input_ids = _place_tokens(samples, offsets, target_index, real, total, pad_token_id)
        with_tail = torch.cat([lengths, lengths.new_full((1,), pad)])  # the pad: own segment
        positions = _ramps(with_tail, -_exclusive_cumsum(with_tail), total)
        predict_index, sample_index = target_index - 1, _owners(r_len, n_responses)
    if position_ids_start:  # every segment (the tail pad's too) counts from it
        positions = positions + position_ids_start
    out = TensorDict(
        {
            "input_ids": input_ids.reshape(1, total),
            "position_ids": positions.reshape(1, total),
            "cu_seqlens": _cu_seqlens(lengths, int((host_lengths > 0).sum()), total, pad),
            "prompt_lengths": p_len.clone(),
            "response_lengths": r_len.clone(),
            "predict_index": predict_index,
            "target_index": target_index,
            "sample_index": sample_index,
        },
        batch_size=[],
        device=device,
    )
    out.set_non_tensor("max_seqlen", max(int(host_lengths.max()), pad))
    return out


@dataclass(frozen=True)
class _Replay:
    """The router-replay inputs of `pack_varlen`, validated like the reference and flattened
    onto the work device: every captured route back to back (and how many per sample), every
    support row back to back."""

    routes: torch.Tensor | None  # (sum c, layers, topk) in the routes' dtype
    captured: torch.Tensor | None  # (B,) int64: c_k
    support: torch.Tensor | None  # (sum r, top_k) in the support's dtype

    @classmethod
    def of(cls, routed_experts, sample_support, samples: _Samples, device) -> _Replay | None:
        """None without either input; the reference's checks in its order (structures first,
        then the values, read together in one documented transfer)."""
        if routed_experts is None and sample_support is None:
            return None
        routed_experts = _entries(routed_experts)
        sample_support = _entries(sample_support)
        tokens = (samples.host_prompt_lengths + samples.host_response_lengths).tolist()
        route_spec = check_routes(routed_experts, tokens)
        support_spec = check_sample_support(sample_support,
                                            samples.host_response_lengths.tolist())
        routes = captured = support = None
        verdicts = []
        if route_spec is not None:
            routes = _stacked(routed_experts, (route_spec.layers, route_spec.topk),
                              route_spec.dtype, device)
            captured = torch.tensor([entry.shape[0] for entry in routed_experts],
                                    dtype=torch.int64)
            verdicts.append((routes < 0).any())
        if support_spec is not None:
            support = _stacked(sample_support, (support_spec.top_k,), support_spec.dtype, device)
            verdicts.append(_bad_support(support))
        bad = host_read(torch.stack(verdicts))  # the validation verdicts: one read
        with documented():  # the error path: the reference's checks name the sample
            if route_spec is not None and bad[0]:
                check_route_values(routed_experts)
            if support_spec is not None and bad[-1]:
                check_support_values(sample_support)
        return cls(routes, None if captured is None else host_put(captured, device=device),
                   support)

    def write(self, out: TensorDict, samples: _Samples) -> None:
        """The packed routes and router padding mask (captured route j of sample k at the
        slot of its token j, the dummy route elsewhere) and the support rows, into `out`."""
        if self.routes is not None:
            total = out["input_ids"].shape[1]
            lengths = samples.prompt_lengths + samples.response_lengths
            slots = _route_slots(self.captured, _exclusive_cumsum(lengths), self.routes.shape[0])
            routes = _dummy_routes(total, self.routes)
            routes.index_copy_(0, slots, self.routes)
            mask = torch.ones(total, dtype=torch.bool, device=routes.device)
            mask.index_fill_(0, slots, False)
            out["routed_experts"] = routes.unsqueeze(0)
            out["router_padding_mask"] = mask.unsqueeze(0)
        if self.support is not None:
            out["sample_support"] = self.support


def _route_slots(captured: torch.Tensor, offsets: torch.Tensor, count: int) -> torch.Tensor:
    """The packed slot of each of the `count` captured routes, sample after sample: route j of
    sample k at offsets[k] + j (one pass per output, the size known on the host: no read)."""
    device = captured.device
    owner = torch.repeat_interleave(torch.arange(captured.shape[0], device=device), captured,
                                    output_size=count)
    within = torch.arange(count, device=device) - _exclusive_cumsum(captured)[owner]
    return offsets[owner] + within


def _entries(values):
    """A jagged tensor's rows (a documented read of its offsets), anything else as given (the
    reference's checks say what is wrong with it)."""
    if isinstance(values, torch.Tensor) and values.is_nested:
        return rows_of(values)
    return values


def _stacked(entries, trailing: tuple, dtype: torch.dtype, device) -> torch.Tensor:
    """Per-sample arrays (tensors or NumPy arrays, validated) back to back on `device`."""
    parts = [host_put(np.require(entry, requirements=["C", "W"]) if isinstance(entry, np.ndarray)
                      else entry, device=device) for entry in entries]
    if not parts:
        return torch.empty((0, *trailing), dtype=dtype, device=device)
    return torch.cat(parts)


def _bad_support(support: torch.Tensor) -> torch.Tensor:
    """Whether a support row holds an id below -1 or an id after its -1 padding."""
    after_padding = (support[:, :-1] == -1) & (support[:, 1:] != -1)
    return (support < -1).any() | after_padding.any()


def _dummy_routes(tokens: int, like: torch.Tensor) -> torch.Tensor:
    """(tokens, layers, topk) holding the dummy route 0..topk-1 on every layer, in `like`'s
    dtype and device."""
    layers, topk = like.shape[1:]
    ramp = torch.arange(topk, dtype=like.dtype, device=like.device)
    return ramp.expand(tokens, layers, topk).clone()


def _padded_size(real: int, pad_to_multiple: int) -> int:
    """The packed row's length: `real` tokens rounded up to a multiple of `pad_to_multiple`."""
    return -(-real // pad_to_multiple) * pad_to_multiple


def _exclusive_cumsum(lengths: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(lengths, 0) - lengths


def _ramps(lengths: torch.Tensor, shift: torch.Tensor, count: int) -> torch.Tensor:
    """k + shift[run of k] for the `count` items k grouped in runs of `lengths`: a cumsum of ones
    with a jump where each run starts (two passes, no per-item index tensor).

        lengths 2 0 3, shift 0 4 4  ->  0 1 6 7 8

    Runs that start at the same item (empty runs) add their jumps there, which telescope.
    """
    steps = torch.ones(count + 1, dtype=torch.int64, device=lengths.device)
    jumps = torch.diff(shift, prepend=shift.new_ones(1))  # run 0: from -1 + 1 to shift_0
    steps.index_add_(0, _exclusive_cumsum(lengths), jumps)
    return steps[:count].cumsum_(0)


def _owners(lengths: torch.Tensor, count: int) -> torch.Tensor:
    """The run of each of `count` items grouped in runs of `lengths` (lengths 2 0 3 -> 0 0 2 2 2)."""
    marks = torch.zeros(count + 1, dtype=torch.int64, device=lengths.device)
    marks.index_add_(0, torch.cumsum(lengths, 0)[:-1], torch.ones_like(lengths[:-1]))
    return marks[:count].cumsum_(0)


def _place_tokens(samples: _Samples, offsets: torch.Tensor, target_index: torch.Tensor,
                  real: int, total: int, pad_token_id: int) -> torch.Tensor:
    """The packed row (`real` tokens, then the pad up to `total`): each sample's prompt then
    response from offsets_i on."""
    device = samples.prompt_tokens.device
    input_ids = torch.empty(total, dtype=torch.int64, device=device)
    input_ids[real:] = pad_token_id
    if fast_paths(device):  # one memcpy per prompt and per response
        took("cpu:varlen._copy_rows")
        _copy_rows(input_ids, samples)
        return input_ids
    p_len = samples.prompt_lengths
    prompt_slots = _ramps(p_len, offsets - _exclusive_cumsum(p_len), samples.prompt_tokens.shape[0])
    input_ids.scatter_(0, prompt_slots, samples.prompt_tokens)
    input_ids.scatter_(0, target_index, samples.response_tokens)
    return input_ids


def _copy_rows(input_ids: torch.Tensor, samples: _Samples) -> None:
    """CPU: byte-level memoryview slice assignments, prompt_0 response_0 prompt_1 ..."""
    out = byte_view(input_ids)
    sources = byte_view(samples.prompt_tokens), byte_view(samples.response_tokens)
    lengths = [(samples.host_prompt_lengths * 8).tolist(),
               (samples.host_response_lengths * 8).tolist()]
    at, read = 0, [0, 0]
    for pair in zip(*lengths):
        for part, size in enumerate(pair):
            out[at:at + size] = sources[part][read[part]:read[part] + size]
            at, read[part] = at + size, read[part] + size


def _write_lists(prompts, responses, pad_to_multiple: int, pad_token_id: int, device):
    """CPU fast path for lists of int lists: the rows in packed order (prompt_0 response_0
    prompt_1 ...) are read and type-checked in C by `small_int_rows` (ids within int32), else
    packed row by row with `struct.pack_into` after a type check; returns None (the general
    path then validates and raises the reference's errors) unless every row is a list of plain
    ints and every sample is scorable."""
    if not fast_paths(device) or not (plain_rows(prompts) and plain_rows(responses)):
        return None
    if not prompts or len(prompts) != len(responses):
        return None
    p_len = np.fromiter(map(len, prompts), dtype=np.int64, count=len(prompts))
    r_len = np.fromiter(map(len, responses), dtype=np.int64, count=len(responses))
    if ((p_len == 0) & (r_len > 0)).any():
        return None
    real = int(p_len.sum() + r_len.sum())
    total = _padded_size(real, pad_to_multiple)
    small = small_int_rows([row for pair in zip(prompts, responses) for row in pair])
    if small is None:  # ids beyond int32, or values that are not plain ints
        kinds = set(map(type, itertools.chain.from_iterable(prompts)))
        kinds |= set(map(type, itertools.chain.from_iterable(responses)))
        if not kinds <= {int}:
            return None
    input_ids = pages.take((total,), torch.int64)
    input_ids[real:] = pad_token_id
    if small is not None:  # the packed order: prompt_0 response_0 prompt_1 ...
        input_ids[:real] = torch.from_numpy(small)
    else:  # (real > 0: small_int_rows declined a value)
        buffer, at = byte_view(input_ids), 0
        try:
            for prompt, response in zip(prompts, responses):
                struct.pack_into(f"{len(prompt)}q{len(response)}q", buffer, at, *prompt, *response)
                at += 8 * (len(prompt) + len(response))
        except (struct.error, OverflowError):  # an id beyond int64: the general path names it
            return None
    host = torch.from_numpy(p_len), torch.from_numpy(r_len)
    empty = torch.zeros(0, dtype=torch.int64)
    return _Samples(empty, empty, *host, *host), input_ids


def _cu_seqlens(lengths: torch.Tensor, nonempty: int, total: int, pad: int) -> torch.Tensor:
    """[0, ends of the non-empty samples..., total if there is a tail pad] as int32."""
    device = lengths.device
    ends = torch.cumsum(lengths, 0)[torch.nonzero_static(lengths > 0, size=nonempty).flatten()]
    tail = torch.full((1 if pad > 0 else 0,), total, dtype=ends.dtype, device=device)
    zero = torch.zeros(1, dtype=ends.dtype, device=device)
    return torch.cat([zero, ends, tail]).to(torch.int32)


# --------------------------------------------------------------------------------------------
# packed_segments
# --------------------------------------------------------------------------------------------


def packed_segments(position_ids, *, position_ids_start=0) -> TensorDict:
    """The segments of every row of `position_ids` (B, L), or of the text axis (the first plane)
    of (3, B, L) / (4, B, L) mRoPE positions: a segment starts at each row's first column and
    wherever the text position equals `position_ids_start`. `cu_seqlens` (int32, over the
    flattened rows), `seq_idx` (int32 (B, L), counted from 0 per row), `max_seqlen` (int).

        text  0 1 2 0 0 1      starts  1 0 0 1 1 0      seq_idx  0 0 0 1 2 2
              0 1 0 1 2 3              1 0 1 0 0 0               0 0 1 1 1 1
        flat starts 0 3 4 6 8 -> cu_seqlens 0 3 4 6 8 12; each token's place in its segment
        (index - the last start before it) + 1, at most 4 -> max_seqlen 4
    """
    text, name, mrope = _text_axis(position_ids, position_ids_start)
    batch, width = text.shape
    device = text.device
    starts = text == position_ids_start
    # the contract's verdict: column 0 at the start; after it, a restart or the rule of the axis
    bad = ~starts.clone()
    if width > 1:
        previous, current = text[:, :-1], text[:, 1:]
        steps = current >= previous if mrope else current == previous + 1
        bad[:, 1:] = ~(starts[:, 1:] | steps)
    flat_starts = starts.reshape(-1)
    # a token's place in its segment: its index minus the index of the last start at or before it
    index = torch.arange(flat_starts.shape[0], device=device)
    last_start = torch.cummax(torch.where(flat_starts, index, 0), 0).values
    longest = (index - last_start + 1).max() if index.numel() else index.new_zeros(())
    failed, count, max_seqlen = host_read(torch.stack(
        [bad.any().long(), flat_starts.sum(), longest.long()]))
    if failed:
        with documented():  # the error path: the first bad row and column, as the reference
            b, j = (int(i) for i in bad.nonzero()[0])
            value = int(text[b, j])
            if j == 0:
                raise ValueError(f"{name}[{b}] starts at {value}, not at "
                                 f"position_ids_start={position_ids_start}: a row begins a "
                                 "segment")
            rule = "never decreases within a segment" if mrope else "counts up by 1 within a segment"
            raise ValueError(f"{name}[{b}] holds {value} after {int(text[b, j - 1])} at column "
                             f"{j}: a packed row restarts at position_ids_start="
                             f"{position_ids_start} or {rule}")
    # the starts (0 first: every row starts a segment), then B * L; [0] when there is no token
    boundaries = torch.nonzero_static(flat_starts, size=count).flatten().to(torch.int32)
    end = torch.full((1,), batch * width if count else 0, dtype=torch.int32, device=device)
    seq_idx = torch.cumsum(starts, 1, dtype=torch.int32) - 1  # per row, from 0
    out = TensorDict({"cu_seqlens": torch.cat([boundaries, end]), "seq_idx": seq_idx},
                     batch_size=[], device=device)
    out.set_non_tensor("max_seqlen", max_seqlen)
    return out


def _text_axis(position_ids, start) -> tuple[torch.Tensor, str, bool]:
    """(the (B, L) text positions, their name in messages, whether they are mRoPE's), after the
    reference's argument checks in its order."""
    if not isinstance(position_ids, torch.Tensor):
        raise TypeError(f"position_ids must be a tensor, got {type(position_ids).__name__}")
    dtype = position_ids.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise TypeError(f"position_ids must hold integers, got {dtype}")
    _check_start(start)
    shape = tuple(position_ids.shape)
    if len(shape) == 2:
        return position_ids, "position_ids", False
    if len(shape) == 3 and shape[0] in (3, 4):
        return position_ids[0], "position_ids[0]", True
    raise ValueError(f"position_ids must be (B, L), or (3, B, L) / (4, B, L) mRoPE positions, "
                     f"got shape {shape}")


# --------------------------------------------------------------------------------------------
# unpack_response_logprobs
# --------------------------------------------------------------------------------------------


def unpack_response_logprobs(flat_logprobs, packed, *, width=None) -> torch.Tensor:
    """Per-sample response logprobs, right-aligned in a (B, width) float32 tensor, zeros elsewhere.

    `flat_logprobs` holds one value per `predict_index` entry, or one per packed position ((N,) or
    (1, N)), in which case the values at `predict_index` are taken.
    """
    predict_index, response_lengths, total = _packed_fields(packed)
    values = _flat_values(flat_logprobs, predict_index, total)
    width = _width(width, response_lengths)
    return _right_aligned(values.float(), response_lengths.to(values.device), width)


def _packed_fields(packed) -> tuple[torch.Tensor, torch.Tensor, int]:
    if not isinstance(packed, TensorDictBase):
        raise TypeError(f"packed must be the TensorDict returned by pack_varlen, "
                        f"got {type(packed).__name__}")
    for key in ("input_ids", "predict_index", "response_lengths"):
        if key not in packed.keys():
            raise ValueError(f"packed has no {key!r} entry: pass the output of pack_varlen")
    predict_index, response_lengths = packed["predict_index"], packed["response_lengths"]
    if predict_index.shape[0] != int(response_lengths.sum()):
        raise ValueError(f"packed is inconsistent: {predict_index.shape[0]} predict_index "
                         f"entries for {int(response_lengths.sum())} response tokens")
    return predict_index, response_lengths, packed["input_ids"].shape[-1]


def _flat_values(flat_logprobs, predict_index: torch.Tensor, total: int) -> torch.Tensor:
    if not isinstance(flat_logprobs, torch.Tensor):
        raise TypeError(f"flat_logprobs must be a tensor, got {type(flat_logprobs).__name__}")
    if not flat_logprobs.is_floating_point():
        raise TypeError(f"flat_logprobs must hold floats, got {flat_logprobs.dtype}")
    shape, count = tuple(flat_logprobs.shape), predict_index.shape[0]
    values = flat_logprobs.detach()
    if shape == (count,):
        return values
    if shape in ((total,), (1, total)):
        return torch.gather(values.reshape(-1), 0, predict_index.to(values.device))
    raise ValueError(f"flat_logprobs must have shape ({count},) (one value per response token) "
                     f"or ({total},) / (1, {total}) (one per packed position), got {shape}")


def _width(width, response_lengths: torch.Tensor) -> int:
    longest = int(response_lengths.max()) if response_lengths.numel() else 0
    if width is None:
        return longest
    _check_int(width, "width")
    if width < longest:
        raise ValueError(f"width {width} is narrower than the longest response ({longest})")
    return width


def _right_aligned(values: torch.Tensor, lengths: torch.Tensor, width: int) -> torch.Tensor:
    """Row k holds its `lengths[k]` values in its last columns (values grouped by row, in order):

    values a b c d e, lengths 2 0 3, width 4  ->  . . a b / . . . . / . c d e
    """
    batch = lengths.shape[0]
    row_ends = torch.arange(1, batch + 1, device=lengths.device) * width
    # value i of row k lands at flat (k + 1) * width - lengths[k] + (i - start_k)
    slots = _ramps(lengths, row_ends - lengths - _exclusive_cumsum(lengths), values.shape[0])
    out = torch.zeros(batch * width, dtype=values.dtype, device=values.device)
    return out.scatter(0, slots, values).reshape(batch, width)


# --------------------------------------------------------------------------------------------
# unpad / repad (flash-attn bert_padding semantics)
# --------------------------------------------------------------------------------------------


def unpad(x, attention_mask):
    """(values, indices, cu_seqlens, max_seqlen) of the positions where `attention_mask` is 1.

    indices are row-major flat positions (int64); cu_seqlens is int32 `[0, cumsum(row sums)]`;
    values = `x.reshape(B*S, ...)[indices]`. Masks need not be contiguous.
    """
    _check_unpad_args(x, attention_mask)
    flat_mask = attention_mask.reshape(-1)
    row_sums = attention_mask.sum(dim=-1, dtype=torch.int32)
    # one read: the mask's verdict (values other than 0 and 1), the output's size, max_seqlen
    outside = (attention_mask != 0) & (attention_mask != 1)
    longest = row_sums.amax() if row_sums.numel() else row_sums.new_zeros(())
    bad, real, max_seqlen = host_read(torch.stack(
        [outside.any().long(), (flat_mask != 0).sum(), longest.long()]))
    if bad:
        with documented():  # the error path: which row
            b, s = (int(i) for i in outside.nonzero()[0])
            raise ValueError(f"attention_mask[{b}] holds {int(attention_mask[b, s])}: a mask "
                             "holds only 0 and 1")
    indices = torch.nonzero_static(flat_mask, size=real).flatten()
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(row_sums, 0, dtype=torch.int32), (1, 0))
    values = x.reshape(-1, *x.shape[2:])[indices]
    return values, indices, cu_seqlens, max_seqlen


def _check_unpad_args(x, attention_mask) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a tensor, got {type(attention_mask).__name__}")
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise TypeError(f"attention_mask must be bool or integer, got {attention_mask.dtype}")
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be 2-D (batch, seqlen), got shape "
                         f"{tuple(attention_mask.shape)}")
    if x.dim() < 2 or tuple(x.shape[:2]) != tuple(attention_mask.shape):
        raise ValueError(f"x must have shape (batch, seqlen, ...) = "
                         f"{tuple(attention_mask.shape)} + (...), got {tuple(x.shape)}")
    if x.device != attention_mask.device:
        raise ValueError(f"x is on {x.device} but attention_mask is on {attention_mask.device}")


def repad(values, indices, batch, seqlen) -> torch.Tensor:
    """Scatter `values` (nnz, ...) to the flat `indices` of a zero (batch, seqlen, ...) tensor."""
    _check_repad_args(values, indices, batch, seqlen)
    out = values.new_zeros((batch * seqlen, *values.shape[1:]))
    out[indices.to(device=values.device, dtype=torch.int64)] = values
    return out.reshape(batch, seqlen, *values.shape[1:])


def _check_repad_args(values, indices, batch, seqlen, name="values") -> None:
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(values).__name__}")
    if not isinstance(indices, torch.Tensor):
        raise TypeError(f"indices must be a tensor, got {type(indices).__name__}")
    if indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool:
        raise TypeError(f"indices must hold integers, got {indices.dtype}")
    _check_int(batch, "batch")
    _check_int(seqlen, "seqlen")
    if batch < 0 or seqlen < 0:
        raise ValueError(f"batch and seqlen must be >= 0, got {batch} and {seqlen}")
    if values.dim() < 1:
        raise ValueError(f"{name} must have a first (token) dimension, got a 0-d tensor")
    if indices.dim() != 1 or indices.shape[0] != values.shape[0]:
        raise ValueError(f"indices must be 1-D with one entry per row of {name} "
                         f"({values.shape[0]}), got shape {tuple(indices.shape)}")
    if indices.numel() == 0:
        return
    size = batch * seqlen
    outside = (indices < 0) | (indices >= size)
    # a repeat: an entry after its value's first occurrence. A stable sort keeps equal values
    # in their order, so every entry of a run of equal values but the first is a repeat
    ordered, where = torch.sort(indices, stable=True)
    repeat = torch.zeros_like(outside)
    repeat[where[1:]] = ordered[1:] == ordered[:-1]
    bad = outside | repeat
    if host_read(bad.any()):  # a validation verdict
        with documented():  # the first bad entry, named as the reference (which reads in order)
            i = int(bad.nonzero()[0])
            value = int(indices[i])
            if 0 <= value < size:
                raise ValueError(f"indices[{i}] = {value} repeats an earlier index")
            raise ValueError(f"indices[{i}] = {value} is outside [0, {size}) "
                             f"(batch {batch} x seqlen {seqlen})")


def repad_routes(routed_experts, indices, batch, seqlen, *, router_padding_mask=None
                 ) -> TensorDict:
    """`repad` for routes: the dummy route (never zeros) and a True router padding mask at every
    slot no route lands in, and at every token the given `router_padding_mask` marks
    (reference.varlen.repad_routes)."""
    _check_repad_args(routed_experts, indices, batch, seqlen, "routed_experts")
    check_token_routes(routed_experts, routed_experts.shape[0])
    if host_read((routed_experts < 0).any()):  # a validation verdict
        with documented():  # the error path: the reference's check names the token
            check_token_route_values(routed_experts)
    if router_padding_mask is not None:
        check_router_padding_mask(router_padding_mask, routed_experts.shape[0])
    device = routed_experts.device
    slots = indices.to(device=device, dtype=torch.int64)
    routes = _dummy_routes(batch * seqlen, routed_experts)
    mask = torch.ones(batch * seqlen, dtype=torch.bool, device=device)
    if router_padding_mask is None:
        routes[slots] = routed_experts
        mask[slots] = False
    else:
        given = router_padding_mask.to(device)
        dummy = _dummy_routes(given.shape[0], routed_experts)
        routes[slots] = torch.where(given[:, None, None], dummy, routed_experts)
        mask[slots] = given
    out = TensorDict({"routed_experts": routes.reshape(batch, seqlen, *routes.shape[1:]),
                      "router_padding_mask": mask.reshape(batch, seqlen)},
                     batch_size=[batch, seqlen], device=device)
    return out


# --------------------------------------------------------------------------------------------
# response_logprobs: packed, token-budget micro-batches
# --------------------------------------------------------------------------------------------

Forward = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def response_logprobs(
    model,
    prompts,
    responses,
    *,
    max_tokens_per_batch=None,
    pad_to_multiple=1,
    packing="auto",
    chunk_size=1024,
    with_grad=False,
) -> torch.Tensor:
    """Per-token response logprobs, (B, max r) float32, right-aligned, zeros elsewhere.

    max_tokens_per_batch: token budget of one packed forward (a sample longer than it is a
        ValueError). None: twice the longest sample — eager and sdpa attend over the whole row
        under an N x N mask, so a row's attention cost per token grows with N; 2x the longest
        sample keeps it within 2x the dense batch's (flash-attn varlen users may raise it).
    pad_to_multiple: each packed row is padded to a multiple of it (the pad is its own segment).
    packing: "position_ids" relies on transformers' packed-sequence detection, checked first
        (RuntimeError if the installed transformers or the model's attention implementation
        cannot isolate the samples); "mask" passes an explicit block-diagonal additive 4-D mask
        (eager and sdpa only; N^2 memory per row). Both refuse (RuntimeError) a model with
        layers that carry state along the row outside attention — recurrent mixers (Mamba,
        gated delta nets) or short convolutions: transformers' PyTorch path runs them over the
        whole packed row, so each sample would start from the previous one's state. "rows"
        puts one sample per row (right-padded dense micro-batches, no mask): exact for every
        causal model, those included. "auto" (the default): "rows" for a model with such
        layers, else "position_ids".
    chunk_size: rows of float32 log-softmax computed at once.
    with_grad: keep the autograd graph (default: computed under torch.no_grad()).
    """
    vocab = _check_model(model)
    _check_logprob_options(max_tokens_per_batch, pad_to_multiple, packing, chunk_size, with_grad)
    device = next(model.parameters()).device
    samples = _samples(prompts, responses, device)
    _check_vocab(samples.prompt_tokens, samples.prompt_lengths, "prompts", vocab)
    _check_vocab(samples.response_tokens, samples.response_lengths, "responses", vocab)
    _check_budget(samples, max_tokens_per_batch)
    if packing == "auto":
        packing = "rows" if _state_carrying_layers(model) else "position_ids"
    _check_packed_attention(model, packing)
    with torch.set_grad_enabled(with_grad):
        if packing == "rows":
            return _row_logprobs(model, samples, max_tokens_per_batch, pad_to_multiple,
                                 chunk_size)
        forward = _forward_with_mask if packing == "mask" else _forward_position_ids
        return _packed_logprobs(model, samples, forward, max_tokens_per_batch, pad_to_multiple,
                                chunk_size)


def _packed_logprobs(model, samples: _Samples, forward: Forward, max_tokens_per_batch,
                     pad_to_multiple: int, chunk_size: int) -> torch.Tensor:
    """Score every response token with packed forwards; place them right-aligned."""
    scored = _with_responses(samples)
    width = int(samples.host_response_lengths.max())
    device = samples.prompt_tokens.device
    if scored.size == 0:
        return torch.zeros((samples.size, width), dtype=torch.float32, device=device)
    row = _pack(scored, 1, 0)
    lengths = (scored.host_prompt_lengths + scored.host_response_lengths).tolist()
    if max_tokens_per_batch is None:
        max_tokens_per_batch = 2 * max(lengths)
    token_ends = list(itertools.accumulate(lengths))
    response_ends = list(itertools.accumulate(scored.host_response_lengths.tolist()))
    pieces = []
    for first, last in _micro_batches(token_ends, max_tokens_per_batch):
        start = token_ends[first - 1] if first else 0
        lo, hi = (response_ends[first - 1] if first else 0), response_ends[last - 1]
        ids, positions = _row_slice(row, start, token_ends[last - 1], pad_to_multiple)
        logits = forward(model, ids, positions, row["predict_index"][lo:hi] - start)
        targets = torch.gather(row["input_ids"][0], 0, row["target_index"][lo:hi])
        pieces.append(_token_logprobs(logits, targets, chunk_size))
    return _right_aligned(torch.cat(pieces), samples.response_lengths, width)


def _with_responses(samples: _Samples) -> _Samples:
    """Only the samples with r > 0 (the others need no forward); their tokens, still flat."""
    keep = samples.host_response_lengths > 0
    if bool(keep.all()):
        return samples
    kept = torch.nonzero(keep).flatten()
    device = samples.prompt_tokens.device
    p_keep = torch.repeat_interleave(keep, samples.host_prompt_lengths).nonzero().flatten()
    r_keep = torch.repeat_interleave(keep, samples.host_response_lengths).nonzero().flatten()
    p_index, r_index, kept_index = (host_put(index, device=device)
                                    for index in (p_keep, r_keep, kept))
    return _Samples(
        samples.prompt_tokens[p_index], samples.response_tokens[r_index],
        samples.prompt_lengths[kept_index], samples.response_lengths[kept_index],
        samples.host_prompt_lengths[kept], samples.host_response_lengths[kept],
    )


def _row_logprobs(model, samples: _Samples, max_tokens_per_batch, pad_to_multiple: int,
                  chunk_size: int) -> torch.Tensor:
    """`packing="rows"`: one sample per row, right-padded with token 0 to the longest sample of
    its micro-batch (rounded up to `pad_to_multiple`), no attention mask and default positions.
    A causal model's logits at a real token never read the padding after it, so every row is
    its sample's own forward, whatever mixes the tokens (attention, convolutions, recurrences).

        samples of 5, 3, 4 tokens, budget 15     micro-batch 1   s s s s s      2 rows x 5
        (rows x longest <= budget)                               s s s . .
                                                 micro-batch 2   s s s s        1 row x 4
    """
    scored = _with_responses(samples)
    width = int(samples.host_response_lengths.max())
    device = samples.prompt_tokens.device
    if scored.size == 0:
        return torch.zeros((samples.size, width), dtype=torch.float32, device=device)
    row = _pack(scored, 1, 0)
    lengths = (scored.host_prompt_lengths + scored.host_response_lengths).tolist()
    budget = 2 * max(lengths) if max_tokens_per_batch is None else max_tokens_per_batch
    token_ends = list(itertools.accumulate(lengths))
    response_ends = list(itertools.accumulate(scored.host_response_lengths.tolist()))
    pieces = []
    for first, last in _row_batches(lengths, budget):
        start = token_ends[first - 1] if first else 0
        lo, hi = (response_ends[first - 1] if first else 0), response_ends[last - 1]
        columns = _padded_size(max(lengths[first:last]), pad_to_multiple)
        group = torch.tensor(lengths[first:last], dtype=torch.int64)
        # token t of the group's k-th sample (packed at start_k + o) goes to k * columns + o
        starts = _exclusive_cumsum(group)
        shift = host_put(torch.arange(last - first) * columns - starts, device=device)
        slots = _ramps(host_put(group, device=device), shift, token_ends[last - 1] - start)
        ids = torch.zeros((last - first) * columns, dtype=torch.int64, device=device)
        ids.scatter_(0, slots, row["input_ids"][0, start:token_ends[last - 1]])
        # the logit that scores each response token: its predict_index, moved the same way
        predict = slots[row["predict_index"][lo:hi] - start]
        targets = torch.gather(row["input_ids"][0], 0, row["target_index"][lo:hi])
        p_host = scored.host_prompt_lengths[first:last].tolist()
        r_host = scored.host_response_lengths[first:last].tolist()
        read = (min(p - 1 for p in p_host), max(p + r - 2 for p, r in zip(p_host, r_host)))
        logits = _forward_rows(model, ids.reshape(last - first, columns), predict, read)
        pieces.append(_token_logprobs(logits, targets, chunk_size))
    return _right_aligned(torch.cat(pieces), samples.response_lengths, width)


def _row_batches(lengths: list[int], budget: int) -> list[tuple[int, int]]:
    """Consecutive sample ranges [first, last) whose rows x longest sample stays within `budget`
    (greedy; a sample alone always fits: none is longer than the budget)."""
    ranges, first = [], 0
    while first < len(lengths):
        last, longest = first + 1, lengths[first]
        while last < len(lengths) and (last + 1 - first) * max(longest, lengths[last]) <= budget:
            longest = max(longest, lengths[last])
            last += 1
        ranges.append((first, last))
        first = last
    return ranges


def _forward_rows(model, input_ids, flat_positions, read: tuple[int, int]) -> torch.Tensor:
    """Logits (len(flat_positions), V) of a right-padded dense batch at the flat positions
    `row * columns + column`; only the columns `read` = (first, last) that hold them are
    projected to the vocabulary."""
    columns = input_ids.shape[1]
    keep = torch.arange(read[0], read[1] + 1, device=input_ids.device)
    with callers_code():
        out = model(input_ids=input_ids, attention_mask=None, use_cache=False,
                    logits_to_keep=keep)
    return out.logits[flat_positions // columns, flat_positions % columns - read[0]]


def _micro_batches(token_ends: list[int], budget: int) -> list[tuple[int, int]]:
    """Consecutive sample ranges [first, last) of at most `budget` tokens each (greedy)."""
    ranges, first = [], 0
    while first < len(token_ends):
        used = token_ends[first - 1] if first else 0
        last = bisect.bisect_right(token_ends, used + budget)
        ranges.append((first, last))
        first = last
    return ranges


def _row_slice(row: TensorDict, start: int, end: int, pad_to_multiple: int):
    """input_ids and position_ids (1, n) of row[start:end], plus a tail pad segment 0..pad-1."""
    pad = -(end - start) % pad_to_multiple
    ids, positions = row["input_ids"][:, start:end], row["position_ids"][:, start:end]
    if pad:
        device = ids.device
        ids = torch.cat([ids, torch.zeros((1, pad), dtype=ids.dtype, device=device)], 1)
        positions = torch.cat([positions, torch.arange(pad, device=device)[None]], 1)
    return ids, positions


def _forward_position_ids(model, input_ids, position_ids, keep) -> torch.Tensor:
    """Logits (len(keep), V) of one packed row: transformers isolates the samples itself."""
    with callers_code():
        out = model(input_ids=input_ids, position_ids=position_ids, attention_mask=None,
                    use_cache=False, logits_to_keep=keep)
    return out.logits[0]


def _forward_with_mask(model, input_ids, position_ids, keep) -> torch.Tensor:
    """Logits (len(keep), V) of one packed row under an explicit block-diagonal causal mask."""
    dtype = next(model.parameters()).dtype
    mask = _block_causal_mask(position_ids[0], dtype)
    with callers_code():
        out = model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask,
                    use_cache=False, logits_to_keep=keep)
    return out.logits[0]


def _block_causal_mask(position_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive (1, 1, N, N) mask: 0 where query i may attend key j (same segment, j <= i), else
    the dtype's minimum. A segment starts wherever the position restarts at 0.

        positions 0 1 2 0 1   ->   0 - - - -
                                   0 0 - - -
                                   0 0 0 - -
                                   - - - 0 -
                                   - - - 0 0
    """
    segment = torch.cumsum(position_ids == 0, 0)
    n = position_ids.shape[0]
    causal = torch.ones((n, n), dtype=torch.bool, device=position_ids.device).tril()
    allowed = causal & (segment[:, None] == segment[None, :])
    blocked = torch.finfo(dtype).min
    zero = torch.zeros((), dtype=dtype, device=position_ids.device)
    return torch.where(allowed, zero, blocked)[None, None]


def _token_logprobs(logits: torch.Tensor, targets: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """log_softmax(logits[i])[targets[i]] in float32, `chunk_size` rows at a time."""
    parts = []
    for start in range(0, logits.shape[0], chunk_size):
        chunk = torch.log_softmax(logits[start:start + chunk_size].float(), dim=-1)
        parts.append(chunk.gather(-1, targets[start:start + chunk_size, None]).squeeze(-1))
    return torch.cat(parts)


def _check_packed_attention(model, packing: str) -> None:
    """RuntimeError unless this transformers and this model keep packed samples apart.

    "position_ids" needs `transformers.masking_utils.find_packed_sequence_indices` (transformers
    >= 4.53.1) to split a row at restarting positions, and an attention implementation whose
    mask transformers builds (eager, sdpa, flex, flash); anything else silently attends across
    samples. "mask" needs eager or sdpa (the kernels that take a 4-D additive mask).
    """
    if packing == "rows":  # one sample per row: nothing to isolate
        return
    carrying = _state_carrying_layers(model)
    if carrying:
        shown = ", ".join(carrying[:3]) + (", ..." if len(carrying) > 3 else "")
        raise RuntimeError(
            f"{type(model).__name__} has layers that carry state along the sequence outside "
            f"attention ({shown}): transformers' PyTorch path runs them over the whole packed "
            f"row, so each sample would start from the previous sample's state. Pass "
            f"packing='rows' (one sample per row, right-padded)")
    try:
        from transformers import masking_utils
    except ImportError as err:  # transformers < 4.53
        raise RuntimeError(_UPGRADE.format(what="has no transformers.masking_utils")) from err
    attn = getattr(model.config, "_attn_implementation", None)
    if packing == "mask":
        if attn not in ("eager", "sdpa"):
            raise RuntimeError(f"packing='mask' needs attn_implementation 'eager' or 'sdpa'; the "
                               f"model uses {attn!r} (use packing='position_ids')")
        return
    finder = getattr(masking_utils, "find_packed_sequence_indices", None)
    if finder is None:
        raise RuntimeError(_UPGRADE.format(what="lacks find_packed_sequence_indices"))
    probe = finder(torch.tensor([[0, 1, 0, 1, 2]]))
    if probe is None or not (probe[0, 0] == probe[0, 1] != probe[0, 2] == probe[0, 4]):
        raise RuntimeError(_UPGRADE.format(what="does not split a packed row at restarting "
                                                "position_ids"))
    mask_functions = getattr(masking_utils, "ALL_MASK_ATTENTION_FUNCTIONS", {})
    if attn not in mask_functions:
        raise RuntimeError(f"transformers builds no packed-sequence mask for attn_implementation "
                           f"{attn!r}: the samples of a packed row would attend to each other "
                           f"(supported: {sorted(mask_functions)})")


# class names (lower case) of sequence mixers with a recurrent state: a name that ends in "mixer"
# (the Mamba / Mamba2 mixers of Mamba, Mamba2, Bamba, Nemotron-H, Falcon-H1, Jamba, Zamba), or that
# holds one of these fragments: gated delta nets (Qwen3-Next, Qwen3.5), RecurrentGemma's RG-LRU,
# RWKV's time mixing, lightning / linear attention
_RECURRENT = ("deltanet", "rglru", "rwkvselfattention", "lightningattention", "linearattention")


def _recurrent_layers(model) -> list[str]:
    """Names of the submodules whose class is a recurrent sequence mixer (see `_RECURRENT`)."""
    return [name for name, module in model.named_modules()
            if (kind := type(module).__name__.lower()).endswith("mixer")
            or any(part in kind for part in _RECURRENT)]


def _state_carrying_layers(model) -> list[str]:
    """Names of the layers that carry state from one token to the next outside attention:
    transformers' PyTorch path runs them over a packed row as one sequence."""
    return _recurrent_layers(model) + _convolution_layers(model)


def _convolution_layers(model) -> list[str]:
    """Names of the `nn.Conv1d` submodules: short causal convolutions along the sequence (LFM2's
    ShortConv; the convolution inside every Mamba and gated delta net mixer), which read the
    last tokens before each position — across a packed boundary, the previous sample's."""
    return [name for name, module in model.named_modules()
            if isinstance(module, torch.nn.Conv1d)]


_UPGRADE = ("the installed transformers {what}: a packed forward would let samples attend to "
            "each other. Install transformers >= 4.53.1, or pass packing='mask' to build the "
            "block-diagonal mask explicitly.")


def _check_vocab(tokens: torch.Tensor, lengths: torch.Tensor, name: str, vocab: int) -> None:
    outside = (tokens < 0) | (tokens >= vocab)
    if host_read(outside.any()):  # a validation verdict
        with documented():  # the error path: which row
            first = int(outside.nonzero()[0])
            row = int(torch.searchsorted(torch.cumsum(lengths, 0), first, right=True))
            raise ValueError(f"{name}[{row}] holds token id {int(tokens[first])}, outside the "
                             f"model's vocabulary [0, {vocab})")


def _check_budget(samples: _Samples, max_tokens_per_batch) -> None:
    if max_tokens_per_batch is None:
        return
    lengths = samples.host_prompt_lengths + samples.host_response_lengths
    over = (lengths > max_tokens_per_batch).nonzero()
    if over.numel():
        k = int(over[0])
        raise ValueError(f"sample {k} has {int(lengths[k])} tokens, more than "
                         f"max_tokens_per_batch={max_tokens_per_batch}")
