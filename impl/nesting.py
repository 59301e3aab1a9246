"""Optimized `nesting` (spec: nesting.md): vectorized torch, device-generic.

The contract (rules table, `PAD_TOKEN_ID`, `DenseFieldError`, `PayloadReport`) and the argument
checks / plan (`plan_nesting`, metadata only) come from `reference.nesting`; everything per token
happens here on the batch's device:

    one scan of each mask      padded = [0 | mask | 0];  changes = padded[:, 1:] != padded[:, :-1]
                               (rows, cols) of the changes pair up as (start, end) of each run
    derived masks              attention runs clipped at P: no second scan of attention_mask
    token indices              rows/cols of every real position, from the runs (repeat_interleave)
    nest                       values = field[rows, cols]          reads only the real elements
    unnest                     dense = full(pad); dense[rows, cols] = values

Host reads (`impl._sync`, docs/performance.md "Host reads"): the number of runs and of real
tokens of each mask (output sizes) with its 0/1 verdict, in one read per mask; a derived mask's
kept runs; an encoding's bounds and verdicts; a jagged field's bounds with its row-length
verdict.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from functools import cached_property

import torch
from tensordict import TensorDict

from batchproof.impl import kernels
from batchproof.impl._cpu import fast_paths
from batchproof.impl._paths import took
from batchproof.impl._sync import Verdicts, documented, host_read
from batchproof.reference import nesting as _spec
from batchproof.reference.nesting import (  # noqa: F401 - the shared contract, re-exported
    ATTENTION_MASK,
    DEFAULT_RULES,
    DERIVED_MASKS,
    PAD_TOKEN_ID,
    PROMPT_MASK,
    RESPONSE_ATTENTION_MASK,
    STASH,
    DenseFieldError,
    PayloadReport,
    rle_keys,
)

# --------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class _Runs:
    """The runs of ones of a (B, W) mask: row, start column and length of each, row-major."""

    batch: int
    width: int
    rows: torch.Tensor  # (n_runs,) int64
    starts: torch.Tensor  # (n_runs,) int64
    lengths: torch.Tensor  # (n_runs,) int64
    total: int  # ones in the mask (read with the runs' count: the jagged values' size)

    @property
    def device(self) -> torch.device:
        return self.starts.device

    def run_offsets(self) -> torch.Tensor:
        """(B+1,) int64: runs of row i are runs[offsets[i]:offsets[i+1]]."""
        counts = torch.zeros(self.batch, dtype=torch.int64, device=self.device)
        return _exclusive_cumsum(counts.index_add_(0, self.rows, torch.ones_like(self.rows)))

    def row_totals(self) -> torch.Tensor:
        """(B,) int64: ones per row."""
        return self._totals(self.lengths)

    def _totals(self, lengths: torch.Tensor) -> torch.Tensor:
        totals = torch.zeros(self.batch, dtype=torch.int64, device=self.device)
        return totals.index_add_(0, self.rows, lengths)

    @cached_property
    def tokens(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows, cols) of every one, row-major: the positions a jagged row holds; computed on
        first use (the Triton copy of a CUDA field needs only the runs).

        Token k of run q sits at column starts[q] + (k - first[q]), first[q] = tokens before q.
        """
        total = self.total
        first = torch.cumsum(self.lengths, 0) - self.lengths
        cols = torch.repeat_interleave(self.starts - first, self.lengths, output_size=total)
        cols += torch.arange(total, device=self.device)
        rows = torch.repeat_interleave(self.rows, self.lengths, output_size=total)
        return rows, cols

    @cached_property
    def flat(self) -> torch.Tensor:
        """(nnz,) int64: the index of every one in the mask viewed as (B * W,)."""
        rows, cols = self.tokens
        return rows * self.width + cols

    def split_lengths(self, at: int, left: bool) -> torch.Tensor:
        """Each run's length within mask[:, :at] (left) or mask[:, at:] (right), 0 outside."""
        ends = self.starts + self.lengths
        if left:
            return (torch.clamp(ends, max=at) - self.starts).clamp_(min=0)
        return (ends - torch.clamp(self.starts, min=at)).clamp_(min=0)

    def split_totals(self, at: int, left: bool) -> torch.Tensor:
        """`split(at, left).row_totals()`, without the split's read."""
        return self._totals(self.split_lengths(at, left))

    def split(self, at: int, left: bool) -> _Runs:
        """The runs of mask[:, :at] (left) or of mask[:, at:] (right), from these runs (one
        read: how many runs, and ones, that side keeps)."""
        lengths = self.split_lengths(at, left)
        keep = lengths > 0
        count, total = host_read(torch.stack([keep.sum(), lengths.sum()]))
        kept = torch.nonzero_static(keep, size=count).flatten()
        starts = self.starts[kept] if left else torch.clamp(self.starts[kept], min=at) - at
        return _Runs(self.batch, at if left else self.width - at, self.rows[kept], starts,
                     lengths[kept], total)


def _exclusive_cumsum(counts: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(counts.numel() + 1, dtype=torch.int64, device=counts.device)
    torch.cumsum(counts, 0, out=out[1:])
    return out


def _runs_of(mask: torch.Tensor, name: str, *, name_value: bool = True) -> _Runs:
    """Validate a dense 0/1 mask and find its runs with one scan; one read: the verdict, the
    number of run boundaries and of ones."""
    batch, width = mask.shape
    padded = torch.zeros(batch, width + 2, dtype=torch.bool, device=mask.device)
    padded[:, 1:-1] = mask != 0
    changes = padded[:, 1:] != padded[:, :-1]
    if fast_paths(mask.device):  # the CPU: a read costs nothing there, two more passes do
        took("cpu:nesting._runs_of")
        if _not_binary(mask):
            _check_binary(mask, name, name_value=name_value)
        rows, starts, lengths = _paired(*changes.nonzero(as_tuple=True))
        return _Runs(batch, width, rows, starts, lengths, int(lengths.sum()))
    bad, boundaries, total = host_read(torch.stack(
        [_not_binary(mask), changes.sum(), padded.sum()]))
    if bad:
        with documented():  # the error path: which row, which value
            _check_binary(mask, name, name_value=name_value)
    rows, starts, lengths = _paired(*torch.nonzero_static(changes, size=boundaries).unbind(1))
    return _Runs(batch, width, rows, starts, lengths, total)


def _paired(rows: torch.Tensor, cols: torch.Tensor):
    """(rows, starts, lengths) of the runs from the row-major changes of a padded mask: they
    pair up as (start, end) of each run."""
    starts, ends = cols[0::2].contiguous(), cols[1::2]  # own storage: it is stored as is
    return rows[0::2], starts, ends - starts


def _not_binary(mask: torch.Tensor) -> torch.Tensor:
    """(0-dim int64 on the device) 1 if an entry is neither 0 nor 1."""
    if mask.dtype == torch.bool or mask.numel() == 0:
        return torch.zeros((), dtype=torch.int64, device=mask.device)
    if mask.is_floating_point() or mask.is_complex():
        return ((mask != 0) & (mask != 1)).any().long()
    low, high = torch.aminmax(mask)
    return ((low < 0) | (high > 1)).long()


def _check_binary(mask: torch.Tensor, name: str, *, name_value: bool) -> None:
    """Every entry 0 or 1; the error names the first bad row (and its first bad value, as
    nest_by_mask's reference does; extract_response's reference names only the row). Called
    when `_not_binary` found an entry (so never for a bool or an empty mask)."""
    bad = (mask != 0) & (mask != 1)
    if bool(bad.any()):
        row = int(bad.any(1).nonzero()[0, 0])
        if not name_value:
            raise ValueError(f"mask {name!r} row {row} is not 0/1")
        value = mask[row][bad[row]][0].item()
        raise ValueError(f"mask {name!r} row {row} holds {value!r}: masks must be 0/1")


def _runs_from_encoding(td, name: str, width: int) -> _Runs:
    """The runs stored as `{name}_offsets` / `{name}_lengths` (validated)."""
    starts_key, lengths_key = rle_keys(name)
    starts_njt, lengths_njt = _jagged(td, starts_key), _jagged(td, lengths_key)
    batch = td.batch_size[0]  # (a TensorDict holds only fields of `batch` rows: no row check)
    offsets = starts_njt.offsets()
    counts = torch.diff(offsets)  # runs per row (the offsets themselves may start past 0)
    differ = counts != torch.diff(lengths_njt.offsets())
    # one read: the verdict and both encodings' bounds
    read = host_read(torch.cat([differ.any().reshape(1).long(), _bounds(starts_njt),
                                _bounds(lengths_njt)]))
    if read[0]:
        with documented():  # the error path: which row
            raise ValueError(f"{starts_key!r} and {lengths_key!r} differ in row "
                             f"{int(differ.nonzero()[0, 0])}")
    starts, lengths = starts_njt.values()[read[1]:read[2]], lengths_njt.values()[read[3]:read[4]]
    rows = torch.repeat_interleave(torch.arange(batch, device=offsets.device), counts,
                                   output_size=starts.numel())
    ends = starts + lengths
    bad = (starts < 0) | (lengths < 1) | (ends > width)
    if starts.numel() > 1:
        same_row = rows[1:] == rows[:-1]
        bad[1:] |= same_row & (starts[1:] < ends[:-1])
    broken, total = host_read(torch.stack([bad.any().long(), lengths.sum()]))  # one read
    if broken:
        with documented():  # the error path: which row
            row = int(rows[bad.nonzero()[0, 0]])
            raise ValueError(f"{name!r} row {row}: runs overlap or fall outside width {width}")
    return _Runs(batch, width, rows, starts, lengths, total)


def _bounds(njt: torch.Tensor) -> torch.Tensor:
    """(2,) int64 on the device: where a contiguous jagged tensor's rows begin and end in its
    `values()` (offsets[0], offsets[-1]: it may view a larger buffer, its offsets starting
    past 0)."""
    return njt.offsets()[[0, -1]].long()


def _jagged(td, key: str) -> torch.Tensor:
    value = td.get(key) if key in td.keys() else None
    if not _spec._is_jagged(value):
        raise ValueError(f"the nested batch's {key!r} must be a contiguous jagged tensor")
    return value


# --------------------------------------------------------------------------- nest_by_mask


def nest_by_mask(td, *, pad_token_id=None, rules=None, strict=False, ignore_dense=()):
    """Each ruled field as a jagged tensor of its real positions, each mask as its runs
    (layout pictures in `reference.nesting`)."""
    plan = _spec.plan_nesting(td, pad_token_id=pad_token_id, rules=rules, strict=strict,
                              ignore_dense=ignore_dense)
    runs = {name: _runs_of(td.get(name), name)
            for name, info in plan.masks.items() if not info.derived}
    for name, info in plan.masks.items():
        if info.derived:
            runs[name] = runs[ATTENTION_MASK].split(plan.prompt_width, name == PROMPT_MASK)
    token_offsets = {name: _exclusive_cumsum(runs[name].row_totals()) for name in runs}

    out = TensorDict({}, batch_size=td.batch_size, device=td.device)
    for key in td.keys():
        if key in plan.fields:
            rule = plan.fields[key]
            values = _gather(td.get(key), rule, runs[rule.mask])
            out.set(key, torch.nested.nested_tensor_from_jagged(
                values, offsets=token_offsets[rule.mask]))
        elif key in plan.masks:
            _set_runs(out, key, runs[key])
        else:
            out.set(key, td.get(key))
    for name, info in plan.masks.items():
        if info.derived:
            _set_runs(out, name, runs[name])
    if "max_prompt_length" in plan.added:
        out.set_non_tensor("max_prompt_length", plan.prompt_width)
    if "max_response_length" in plan.added:
        out.set_non_tensor("max_response_length", plan.response_width)
    out.set_non_tensor(STASH, plan.stash())
    _spec.check_coverage(out, plan, strict)
    return out


def _gather(value: torch.Tensor, rule, runs: _Runs) -> torch.Tensor:
    """The real elements (nnz, *trailing) of a field, reading nothing else."""
    if rule.permute is not None:
        return value.permute(*rule.permute)[runs.tokens]
    batch, width, *trailing = value.shape
    if value.is_contiguous() and kernels.triton_applies(value.device):  # CUDA: the runs' copy
        out = value.new_empty((runs.total, *trailing))
        _copy_runs(value, out, runs, math.prod(trailing), to_dense=False)
        return out
    if value.is_contiguous():
        rows = value.view(batch * width, math.prod(trailing)).index_select(0, runs.flat)
        return rows.view(runs.total, *trailing)
    return value[runs.tokens]


def _copy_runs(dense: torch.Tensor, values: torch.Tensor, runs: _Runs, inner: int, *,
               to_dense: bool) -> None:
    """Between a contiguous (B, W, *trailing) field and its contiguous (nnz, *trailing) jagged
    values, run by run (impl/kernels/triton_nesting.py), in the direction asked."""
    from batchproof.impl.kernels import triton_nesting

    dense_starts = (runs.rows * runs.width + runs.starts) * inner
    jagged_starts = (torch.cumsum(runs.lengths, 0) - runs.lengths) * inner
    sizes = runs.lengths * inner
    longest = runs.width * inner  # a bound on every run (the grid's width; no read)
    if to_dense:
        triton_nesting.copy_runs(dense, values, dense_starts, jagged_starts, sizes, longest)
    else:
        triton_nesting.copy_runs(values, dense, jagged_starts, dense_starts, sizes, longest)


def _set_runs(out, mask: str, runs: _Runs) -> None:
    offsets = runs.run_offsets()
    starts_key, lengths_key = rle_keys(mask)
    out.set(starts_key, torch.nested.nested_tensor_from_jagged(runs.starts, offsets=offsets))
    out.set(lengths_key, torch.nested.nested_tensor_from_jagged(runs.lengths, offsets=offsets))


# --------------------------------------------------------------------------- unnest_by_mask


def unnest_by_mask(td):
    """Exact inverse of `nest_by_mask` on a nested batch or any contiguous chunk of it."""
    stash = _spec.stash_of(td)
    runs = {name: _runs_from_encoding(td, name, info["width"])
            for name, info in stash["masks"].items()}
    dropped = set(stash["added"]) | {STASH} | {k for m in stash["masks"] for k in rle_keys(m)}
    out = TensorDict({}, batch_size=td.batch_size, device=td.device)
    for key in stash["order"]:
        if key in stash["fields"]:
            if key in td.keys():  # a field removed after nesting stays removed
                out.set(key, _unnest_field(td, key, stash["fields"][key], runs))
        elif key in stash["masks"]:
            info = stash["masks"][key]
            mask = torch.zeros(td.batch_size[0], info["width"], dtype=info["dtype"],
                               device=runs[key].device)
            mask.view(-1).index_fill_(0, runs[key].flat, 1)
            out.set(key, mask)
        elif key in td.keys():
            out.set(key, td.get(key))
    for key in td.keys():
        if key not in out.keys() and key not in dropped and key not in stash["fields"]:
            out.set(key, td.get(key))
    return out


def _unnest_field(td, key: str, rule: dict, runs) -> torch.Tensor:
    value = _jagged_field(td, key)
    mask_runs = runs[rule["mask"]]
    values = _checked_values(value, mask_runs, key, rule["mask"])
    trailing = tuple(value.shape[2:])
    dense = torch.full((mask_runs.batch, mask_runs.width, *trailing), rule["pad"],
                       dtype=value.dtype, device=value.device)
    inner = math.prod(trailing)
    if kernels.triton_applies(value.device):  # CUDA: the runs' copy
        _copy_runs(dense, values.contiguous(), mask_runs, inner, to_dense=True)
    else:
        dense.view(mask_runs.batch * mask_runs.width, inner).index_copy_(
            0, mask_runs.flat, values.reshape(mask_runs.total, inner))
    if rule["permute"] is not None:
        dense = dense.permute(*rule["permute"]).contiguous()
    return dense


def _jagged_field(td, key: str) -> torch.Tensor:
    value = td.get(key)
    if not _spec._is_jagged(value):
        raise ValueError(f"field {key!r} of the nested batch is not a jagged tensor")
    return value


def _checked_values(value: torch.Tensor, runs: _Runs, key: str,
                    mask: str | None = None) -> torch.Tensor:
    """The values of the jagged field's rows, each row checked to hold as many values as its
    mask has ones (the reference's message: the first row that does not, naming the mask when
    given); one read: the verdict and the rows' bounds in `values()`."""
    lengths = torch.diff(value.offsets())
    expected = runs.row_totals()
    # (both have the batch's rows: a TensorDict holds no entry of another batch size)
    differ = (lengths != expected).any()
    bad, first, last = host_read(torch.cat([differ.reshape(1).long(), _bounds(value)]))
    if bad:
        with documented():  # the error path: which row
            _row_length_error(lengths, expected, key, mask)
    return value.values()[first:last]


def _row_length_error(lengths, expected, key: str, mask: str | None) -> None:
    """The reference's error for the first row whose length differs (both have the batch's
    rows, and one differs: `_checked_values` found it)."""
    row = int((lengths != expected).nonzero()[0, 0])
    its_mask = f"its mask {mask!r}" if mask is not None else "its mask"
    raise ValueError(f"field {key!r} row {row} holds {int(lengths[row])} values, {its_mask} has "
                     f"{int(expected[row])} ones")


# --------------------------------------------------------------------------- chunk_nested


def chunk_nested(td, n):
    """`n` contiguous row slices as `torch.chunk` makes them (see `reference.nesting`)."""
    _spec._check_batch(td, "td")
    if not _spec._is_int(n):
        raise TypeError(f"n must be an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    batch = td.batch_size[0]
    if batch == 0:
        return [td[0:0] for _ in range(n)]
    size = -(-batch // n)
    with documented():  # slicing a jagged field reads its offsets (torch's nested tensors)
        return [td[start:min(start + size, batch)] for start in range(0, batch, size)]


# --------------------------------------------------------------------------- extract_response


def extract_response(td, output):
    """Column j of row i = the output at row i's real token p_i - 1 + j (the logit predicting
    response token j); zeros beyond r_i. Dense and nested batches give identical results."""
    prompt_width, response_width, attention = _attention_runs(td)
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"output must be a tensor, got {type(output).__name__}")
    if output.is_nested and output.layout != torch.jagged:
        raise TypeError("output must be a jagged (torch.jagged) nested tensor or a flat tensor")
    prompt = attention.split_totals(prompt_width, left=True)
    response = attention.split_totals(prompt_width, left=False)
    with Verdicts() as verdicts:  # the output's and the rows' verdicts: one read
        values, row_starts = _output_values(output, (prompt + response).to(output.device),
                                            verdicts)
        prompt, response = prompt.to(output.device), response.to(output.device)
        too_long = response > response_width
        orphan = (prompt == 0) & (response > 0)
        verdicts.add((too_long | orphan).any(), lambda: _row_error(
            too_long, orphan, response, response_width))
    batch = attention.batch
    columns = torch.arange(response_width, device=output.device)
    real = columns < response[:, None]
    trailing = values.shape[1:]
    if values.shape[0] == 0:
        return values.new_zeros((batch, response_width, *trailing))
    # every column reads some row of values (its index wrapped into range), the real ones are
    # kept: no boolean mask, whose size is the data's
    source = ((row_starts + prompt - 1)[:, None] + columns) % values.shape[0]
    keep = real.reshape(*real.shape, *(1,) * len(trailing))
    return torch.where(keep, values[source], values.new_zeros(()))


def _row_error(too_long, orphan, response, response_width) -> ValueError:
    """The first bad row, checked as the reference does."""
    row = int((too_long | orphan).nonzero()[0, 0])
    if bool(too_long[row]):
        return ValueError(f"row {row} has {int(response[row])} response tokens, more than "
                          f"R = {response_width} (no silent truncation)")
    return ValueError(f"row {row} has an empty prompt and {int(response[row])} response "
                      "tokens: no logit predicts its first response token")


def _attention_runs(td) -> tuple[int, int, _Runs]:
    _spec._check_batch(td, "td")
    if STASH in td.keys():
        stash = _spec.stash_of(td)
        prompt_width, response_width = stash["max_prompt_length"], stash["max_response_length"]
        if ATTENTION_MASK not in stash["masks"]:
            raise ValueError(f"the nested batch has no {ATTENTION_MASK!r} encoding")
        runs = _runs_from_encoding(td, ATTENTION_MASK, stash["masks"][ATTENTION_MASK]["width"])
    else:
        tensors = _spec._tensor_keys(td)
        if ATTENTION_MASK not in tensors:
            raise ValueError(f"td has no {ATTENTION_MASK!r}")
        prompt_width, response_width = _spec.batch_widths(td, tensors)
        runs = _runs_of(td.get(ATTENTION_MASK), ATTENTION_MASK, name_value=False)
    if response_width is None or prompt_width is None:
        raise ValueError("R is unknown: td has no responses, response_mask or non-tensor "
                         "max_response_length")
    return prompt_width, response_width, runs


def _output_values(output: torch.Tensor, totals: torch.Tensor, verdicts: Verdicts):
    """(flat values (nnz, *), start of each row in them), checked against the row lengths (the
    checks that need the device's data queued in `verdicts`)."""
    batch = totals.numel()
    if output.is_nested:
        if output.dim() < 2 or output._ragged_idx != 1:
            raise ValueError("output must be ragged on dim 1")
        if output.shape[0] != batch:
            raise ValueError(f"output must have {batch} rows ragged on dim 1, got "
                             f"{output.shape[0]} rows")
        offsets = output.offsets()
        lengths = torch.diff(offsets) if output.lengths() is None else output.lengths()
        differ = lengths != totals

        def error() -> ValueError:
            row = int(differ.nonzero()[0, 0])
            return ValueError(f"output row {row} has {int(lengths[row])} tokens, the batch row "
                              f"has {int(totals[row])} real tokens")
        verdicts.add(differ.any(), error)
        return output.values(), offsets[:-1]

    def flat_error() -> ValueError:
        return ValueError(f"a flat output must have shape (nnz, ...) with nnz = "
                          f"{int(totals.sum())} real tokens, got {tuple(output.shape)}")
    if output.dim() < 1:
        raise flat_error()
    verdicts.add(totals.sum() != output.shape[0], flat_error)
    return output, _exclusive_cumsum(totals)[:-1]


# --------------------------------------------------------------------------- pad_to_response_width


def pad_to_response_width(td, *fields):
    """Dense `(B, R, *trailing)` response-axis fields: values at their original columns, zeros
    elsewhere, exactly R wide whatever chunk of rows `td` is."""
    stash = _spec.stash_of(td)
    for name in fields:
        if not isinstance(name, str):
            raise TypeError(f"field names must be str, got {name!r}")
    response_width = stash["max_response_length"]
    if response_width is None:
        raise ValueError("the nested batch has no max_response_length")
    out = TensorDict({}, batch_size=td.batch_size, device=td.device)
    for name in fields:
        rule = stash["fields"].get(name)
        if rule is None or name not in td.keys():
            raise ValueError(f"{name!r} is not a nested field of td")
        if rule["mask"] not in (RESPONSE_ATTENTION_MASK, "response_mask"):
            raise ValueError(f"{name!r} is nested by {rule['mask']!r}, not by the response "
                             "attention: it is not a response-axis field")
        runs = _runs_from_encoding(td, rule["mask"], stash["masks"][rule["mask"]]["width"])
        value = _jagged_field(td, name)
        values = _checked_values(value, runs, name)
        rows, cols = runs.tokens
        beyond = cols >= response_width
        if host_read(beyond.any()):  # a verdict
            with documented():  # the error path: which row
                first = int(beyond.nonzero()[0, 0])
                raise ValueError(f"field {name!r} row {int(rows[first])} has a real token at "
                                 f"column {int(cols[first])}, beyond R = {response_width}")
        dense = torch.zeros((runs.batch, response_width, *value.shape[2:]), dtype=value.dtype,
                            device=value.device)
        dense[rows, cols] = values
        out.set(name, dense)
    return out


# --------------------------------------------------------------------------- payload_report


def payload_report(dense_td, nested_td) -> PayloadReport:
    """Dense, nested and ceiling bytes, their ratios and the `torch.save` sizes (definitions in
    `reference.nesting.payload_report`)."""
    _spec._check_batch(dense_td, "dense_td")
    stash = _spec.stash_of(nested_td, "nested_td")
    dense_bytes, nested_bytes = _held_bytes(dense_td), _held_bytes(nested_td)
    ceiling_bytes = _ceiling(dense_td, stash)
    ratio = _spec._ratio
    return PayloadReport(
        dense_bytes=dense_bytes,
        nested_bytes=nested_bytes,
        ceiling_bytes=ceiling_bytes,
        compression=ratio(dense_bytes, nested_bytes),
        ceiling=ratio(dense_bytes, ceiling_bytes),
        efficiency=ratio(ceiling_bytes, nested_bytes),
        wire_bytes_dense=_saved_bytes(dense_td),
        wire_bytes_nested=_saved_bytes(nested_td),
    )


def _held_bytes(td) -> int:
    storages = {}
    for key in td.keys():
        if td.is_non_tensor(key):
            continue
        value = td.get(key)
        parts = (value.values(), value.offsets(), value.lengths()) if value.is_nested else (value,)
        for part in parts:
            if part is not None:
                storage = part.untyped_storage()
                storages[(part.device, storage.data_ptr())] = storage.nbytes()
    return sum(storages.values())


def _ceiling(td, stash: dict) -> int:
    rules = {name: rule[0] for name, rule in DEFAULT_RULES.items()}
    rules.update({name: rule["mask"] for name, rule in stash["fields"].items()})
    masks = set(stash["masks"]) | set(rules.values())
    total = 0
    for key in _spec._tensor_keys(td):
        if key in masks:
            continue
        value = td.get(key)
        mask = _spec._ceiling_mask(td, rules.get(key), stash["max_prompt_length"])
        if (mask is None or value.dim() < 2 or mask.numel() == 0
                or value.numel() % mask.numel() != 0):
            total += value.numel() * value.element_size()
        else:
            per_position = value.numel() // mask.numel() * value.element_size()
            total += int(torch.count_nonzero(mask)) * per_position
    return total


def _saved_bytes(td) -> int:
    buffer = io.BytesIO()
    torch.save(td, buffer)
    return buffer.getbuffer().nbytes
