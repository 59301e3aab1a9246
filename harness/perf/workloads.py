"""Realistic benchmark workloads and their floors (shared by `batchproof bench` and `benchmarks/`).

Inputs are drawn with a seeded `numpy.random.Generator` (never torch's global RNG).

The floor of an op is the physical limit for its input form:
    lists   flatten every input list once (`numpy.fromiter` over `itertools.chain`) + write the
            output bytes once (allocate each output and fill it)
    jagged  write the output bytes once
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from tensordict import TensorDict

from batchproof import blocks as hs
from batchproof.registry import Case


@dataclass
class Workload:
    """One benchmark: named variants (callables taking no argument) plus the floors."""

    op: str
    name: str
    size: str
    variants: dict[str, Callable[[], object]]
    output_bytes: int
    tokens: int
    # compares the impl's output with the reference op's on the same inputs (raises an
    # AssertionError); the reference is slow: `bench --quick` runs it, at the quick size only
    check: Callable[[], None] | None = None
    # (record, the lists-form call of "impl (lists)"): what a framework peer is given
    # (`perf.peers`, `bench --per-core`)
    lists_call: tuple[str, Case] | None = None


def rl_batch_inputs(batch: int = 1024, seed: int = 0, prompt=(50, 500), response=(50, 2000),
                    vocab: int = 32000):
    """prompts, responses and per-token rewards / loss masks / logprobs as Python lists."""
    rng = np.random.default_rng(seed)
    p_lens = rng.integers(prompt[0], prompt[1] + 1, batch)
    r_lens = rng.integers(response[0], response[1] + 1, batch)
    prompts = [rng.integers(0, vocab, n).tolist() for n in p_lens]
    responses = [rng.integers(0, vocab, n).tolist() for n in r_lens]
    rewards = [rng.standard_normal(n).astype(np.float32).tolist() for n in r_lens]
    loss_masks = [(rng.random(n) < 0.9).astype(np.float32).tolist() for n in r_lens]
    logprobs = [(-rng.random(n)).astype(np.float32).tolist() for n in r_lens]
    return prompts, responses, {"rewards": rewards, "loss_masks": loss_masks,
                                "logprobs": logprobs}


def flatten_floor(*lists_of_rows, dtypes) -> None:
    """The input half of the list floor: one `numpy.fromiter` pass over each list of rows."""
    for rows, dtype in zip(lists_of_rows, dtypes):
        np.fromiter(itertools.chain.from_iterable(rows), dtype=dtype)


def write_floor(shapes_and_dtypes, device="cpu") -> list[torch.Tensor]:
    """The output half of every floor: allocate and write each output tensor once.

    The outputs are kept alive together and returned, as an op's outputs are: freeing each one
    right after writing it would let the allocator hand the same warm pages to the next one, a
    speed no op that returns all its outputs can reach. On the CPU they are taken as the ops'
    CPU fast paths take theirs (`impl._pages`: the pages a freed output leaves are written again
    by the next call), so the floor is the write itself in every process, whatever the C
    library's allocator would have done.
    """
    if torch.device(device).type == "cpu":
        from batchproof.impl import _pages

        return [_pages.take(shape, dtype).fill_(1) for shape, dtype in shapes_and_dtypes]
    return [torch.empty(shape, dtype=dtype, device=device).fill_(1)
            for shape, dtype in shapes_and_dtypes]


def rl_batch_workload(batch: int = 1024, device: str = "cpu", seed: int = 0) -> Workload:
    from batchproof.impl import rl_batch as impl
    from batchproof.reference import rl_batch as reference

    prompts, responses, per_token = rl_batch_inputs(batch, seed)
    width = max(len(p) + len(r) for p, r in zip(prompts, responses))
    r_width = max(len(r) for r in responses)
    outputs = [((batch, width), torch.int64)] * 3 + [((batch, r_width), torch.int64)] + \
        [((batch, r_width), torch.float32)] * 3
    output_bytes = _bytes(outputs)
    jagged = {name: hs.jagged(rows, torch.float32, device) for name, rows in per_token.items()}
    j_prompts = hs.jagged(prompts, torch.int64, device)
    j_responses = hs.jagged(responses, torch.int64, device)

    def list_floor():
        flatten_floor(prompts, responses, *per_token.values(),
                      dtypes=[np.int64, np.int64, np.float32, np.float32, np.float32])
        return write_floor(outputs)

    # the record's other accepted input forms, beside the lists and the jagged tensors: rows as
    # 1-D tensors (int64 tokens, float32 values), and list rows with the per-token values as
    # tensors (a float16 loss mask, as a trainer keeps one)
    t_prompts = [torch.tensor(row, device=device) for row in prompts]
    t_responses = [torch.tensor(row, device=device) for row in responses]
    t_values = {name: [torch.tensor(row, dtype=torch.float32, device=device) for row in rows]
                for name, rows in per_token.items()}
    half_masks = {**per_token, "loss_masks": [torch.tensor(row, dtype=torch.float16)
                                              for row in per_token["loss_masks"]]}
    variants = {
        "reference": lambda: reference.build_rl_batch(prompts, responses, pad_token_id=0,
                                                      **per_token),
        "impl (lists)": lambda: impl.build_rl_batch(prompts, responses, pad_token_id=0,
                                                    **per_token),
        "floor (lists)": list_floor,
        "impl (jagged)": lambda: impl.build_rl_batch(j_prompts, j_responses, pad_token_id=0,
                                                     device=device, **jagged),
        "impl (tensors)": lambda: impl.build_rl_batch(t_prompts, t_responses, pad_token_id=0,
                                                      device=device, **t_values),
        "floor (output write)": lambda: write_floor(outputs, device),
    }
    if device == "cpu":  # lists with tensor values: the CPU's lists form, one argument aside
        variants["impl (lists, float16 loss masks)"] = lambda: impl.build_rl_batch(
            prompts, responses, pad_token_id=0, **half_masks)
    if device == "cpu":  # the strong baseline: NumPy per-row slice assignment
        from batchproof.perf.baselines import numpy_rows_rl_batch

        variants["numpy rows (lists)"] = lambda: numpy_rows_rl_batch(
            prompts, responses, pad_token_id=0, **per_token)
        variants["numpy rows (jagged)"] = lambda: numpy_rows_rl_batch(
            j_prompts, j_responses, pad_token_id=0, **jagged)
    tokens = sum(len(p) + len(r) for p, r in zip(prompts, responses))
    call = Case((prompts, responses), {"pad_token_id": 0, **per_token})
    return Workload("rl_batch", "build_rl_batch", f"B={batch}, {tokens / 1e6:.2f} M tokens",
                    variants, output_bytes, tokens,
                    lists_call=("rl_batch.build_rl_batch", call))


def torch_path(fn: Callable[[], object]) -> Callable[[], object]:
    """`fn` with impl/'s Triton kernels switched off: the device-generic torch composition."""
    from batchproof.impl import kernels

    def run():
        saved, kernels.TRITON = kernels.TRITON, False
        try:
            return fn()
        finally:
            kernels.TRITON = saved
    return run


def device_jagged(lengths: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """A jagged tensor of rows of `lengths` over `values` (both already on the device)."""
    offsets = torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)])
    return torch.nested.nested_tensor_from_jagged(values, offsets=offsets)


def device_rl_batch_inputs(batch: int, device: str, prompt_max: int, response_max: int,
                           seed: int = 0, vocab: int = 32000, longest_first: bool = False):
    """Jagged prompts, responses and per-token values made on the device (no Python lists):
    lengths uniform in [1, prompt_max] and [1, response_max]; `longest_first`: sample 0 has
    both maxima (the batch widths are then prompt_max + response_max and response_max)."""
    gen = torch.Generator().manual_seed(seed)
    p_len = torch.randint(1, prompt_max + 1, (batch,), generator=gen)
    r_len = torch.randint(1, response_max + 1, (batch,), generator=gen)
    if longest_first:
        p_len[0], r_len[0] = prompt_max, response_max
    p_len, r_len = p_len.to(device), r_len.to(device)
    n_p, n_r = int(p_len.sum()), int(r_len.sum())
    on = torch.Generator(device=device).manual_seed(seed)
    prompts = device_jagged(p_len, torch.randint(0, vocab, (n_p,), generator=on, device=device))
    responses = device_jagged(r_len, torch.randint(0, vocab, (n_r,), generator=on,
                                                   device=device))
    values = {name: device_jagged(r_len, torch.rand(n_r, generator=on, device=device))
              for name in ("rewards", "loss_masks", "logprobs")}
    return prompts, responses, values, p_len, r_len


def rl_batch_device_workload(batch: int = 8192, device: str = "cpu", seed: int = 0,
                             prompt_max: int = 2048, response_max: int = 14336,
                             longest_first: bool = False) -> Workload:
    """`build_rl_batch` from jagged device tensors at trainer scale (issue 19's H100 size:
    B = 8192, prompts up to 2048, responses up to 14336): the impl (Triton kernels on CUDA)
    and the output write floor. `longest_first`: widths of exactly 16384 and 14336, multiples
    of 16, which Triton specializes on: its row stores are then 16 bytes wide, 8 otherwise
    (PTX for sm_90 of the sequence kernel: `st.global.v2.b64` against `st.global.b64`)."""
    from batchproof.impl import rl_batch as impl

    prompts, responses, values, p_len, r_len = device_rl_batch_inputs(
        batch, device, prompt_max, response_max, seed, longest_first=longest_first)
    width, r_width = int((p_len + r_len).max()), int(r_len.max())
    outputs = [((batch, width), torch.int64)] * 3 + [((batch, r_width), torch.int64)] + \
        [((batch, r_width), torch.float32)] * 3
    output_bytes = _bytes(outputs)
    variants = {  # (on CUDA `bench` adds the torch path: the Triton kernels off)
        "impl (jagged)": lambda: impl.build_rl_batch(prompts, responses, pad_token_id=0,
                                                     **values),
        "floor (output write)": lambda: write_floor(outputs, device)}

    def check():
        from batchproof.reference import rl_batch as reference

        _check_against(reference.build_rl_batch(*_on_cpu(prompts, responses), pad_token_id=0,
                                                **dict(zip(values, _on_cpu(*values.values())))),
                       variants["impl (jagged)"](), "build_rl_batch")

    tokens = int((p_len + r_len).sum())
    return Workload("rl_batch", "build_rl_batch", f"B={batch}, {tokens / 1e6:.1f} M tokens "
                    f"(jagged, on {device})", variants, output_bytes, tokens, check)


def _on_cpu(*tensors):
    return [t.to("cpu") for t in tensors]


def _check_against(expected, actual, op: str) -> None:
    from batchproof.compare import assert_identical

    assert_identical(expected, actual, allow_device=True, compared=f"{op}: reference vs impl")


def pack_varlen_device_workload(batch: int = 8192, device: str = "cpu", seed: int = 0,
                                prompt_max: int = 2048, response_max: int = 14336) -> Workload:
    """`pack_varlen` from jagged device tensors at trainer scale (as rl_batch's)."""
    from batchproof.impl import varlen as impl

    prompts, responses, _, p_len, r_len = device_rl_batch_inputs(
        batch, device, prompt_max, response_max, seed)
    tokens, response_tokens = int((p_len + r_len).sum()), int(r_len.sum())
    padded = -(-tokens // 128) * 128
    outputs = [((1, padded), torch.int64)] * 2 + [((response_tokens,), torch.int64)] * 3 + \
        [((batch + 1 + (padded > tokens),), torch.int32)] + [((batch,), torch.int64)] * 2
    output_bytes = _bytes(outputs)
    variants = {  # (on CUDA `bench` adds the torch path: the Triton kernels off)
        "impl (jagged)": lambda: impl.pack_varlen(prompts, responses, pad_to_multiple=128),
        "floor (output write)": lambda: write_floor(outputs, device)}

    def check():
        from batchproof.reference import varlen as reference

        _check_against(reference.pack_varlen(*_on_cpu(prompts, responses), pad_to_multiple=128),
                       variants["impl (jagged)"](), "pack_varlen")

    return Workload("varlen", "pack_varlen", f"B={batch}, {tokens / 1e6:.1f} M tokens "
                    f"(jagged, on {device})", variants, output_bytes, tokens, check)


def device_verl_batch(batch: int, device: str, prompt_max: int, response_max: int,
                      seed: int = 0) -> tuple[TensorDict, int]:
    """(a padded verl-layout batch made on the device, its real tokens): `build_rl_batch`'s
    two_segment layout (prompts left-padded to P = max p, responses right-padded to R = max r)
    from `device_rl_batch_inputs`, plus verl's `prompts` / `responses` slices:

        (B, P + R)  input_ids, attention_mask, position_ids          int64
        (B, P)      prompts                                           int64
        (B, R)      responses, response_mask                          int64
        (B, R)      loss_mask, rewards, rollout_logprobs              float32

    Every field has a nesting rule (`nest_by_mask(strict=True)` leaves nothing dense). At
    B = 8192, P = 2048, R = 14336: 6.6 GB, about half of it padding (lengths uniform, not verl's
    8% fill)."""
    from batchproof.impl import rl_batch

    prompts, responses, values, p_len, r_len = device_rl_batch_inputs(
        batch, device, prompt_max, response_max, seed)
    td = rl_batch.build_rl_batch(prompts, responses, pad_token_id=0, layout="two_segment",
                                 rewards=values["rewards"], loss_masks=values["loss_masks"],
                                 logprobs=values["logprobs"])
    ids, width = td["input_ids"], td.get_non_tensor("max_response_length")
    td["prompts"] = ids[:, :ids.shape[1] - width].clone()
    td["responses"] = ids[:, ids.shape[1] - width:].clone()
    return td, int((p_len + r_len).sum())


def _tensor_bytes(tensors) -> tuple[list, int]:
    """(shape, dtype) of each distinct tensor (by storage: a jagged field's offsets are shared)
    and their bytes."""
    distinct = {(t.device, t.untyped_storage().data_ptr()): t for t in tensors}
    shapes = [(tuple(t.shape), t.dtype) for t in distinct.values()]
    return shapes, sum(t.numel() * t.element_size() for t in distinct.values())


def _parts(td: TensorDict) -> list[torch.Tensor]:
    """The tensors a TensorDict holds: each dense field, each jagged field's values and
    offsets."""
    out = []
    for key in td.keys():
        if td.is_non_tensor(key):
            continue
        value = td.get(key)
        out += [value.values(), value.offsets()] if value.is_nested else [value]
    return out


def nest_device_workload(batch: int = 8192, device: str = "cpu", seed: int = 0,
                         prompt_max: int = 2048, response_max: int = 14336) -> Workload:
    """`nest_by_mask` of a padded verl batch made on the device (`device_verl_batch`, the
    rl_batch device workload's lengths): the impl (Triton run copies on CUDA) and the write
    floor of its outputs (every jagged field's values, the token and run offsets, the masks' run
    starts and lengths)."""
    from batchproof.impl import nesting as impl

    dense, tokens = device_verl_batch(batch, device, prompt_max, response_max, seed)
    outputs, output_bytes = _tensor_bytes(_parts(impl.nest_by_mask(dense, pad_token_id=0,
                                                                   strict=True)))
    dense_bytes = _tensor_bytes(_parts(dense))[1]

    def check():
        from batchproof.reference import nesting as reference

        _check_against(reference.nest_by_mask(dense.to("cpu"), pad_token_id=0, strict=True),
                       impl.nest_by_mask(dense, pad_token_id=0, strict=True), "nest_by_mask")

    variants = {  # (on CUDA `bench` adds the torch path: the Triton kernels off)
        "impl (dense)": lambda: impl.nest_by_mask(dense, pad_token_id=0, strict=True),
        "floor (output write)": lambda: write_floor(outputs, device)}
    size = (f"B={batch}, P={prompt_max}, R={response_max}, {tokens / 1e6:.1f} M real tokens, "
            f"dense batch {dense_bytes / 1e9:.2f} GB (on {device})")
    return Workload("nesting", "nest_by_mask", size, variants, output_bytes, tokens, check)


def unnest_device_workload(batch: int = 8192, device: str = "cpu", seed: int = 0,
                           prompt_max: int = 2048, response_max: int = 14336) -> Workload:
    """`unnest_by_mask` of the nested form of `nest_device_workload`'s batch (made on the
    device): the impl (pad fill, then Triton run copies on CUDA) and the write floor of the
    dense batch it restores."""
    from batchproof.impl import nesting as impl

    dense, tokens = device_verl_batch(batch, device, prompt_max, response_max, seed)
    nested = impl.nest_by_mask(dense, pad_token_id=0, strict=True)
    outputs, output_bytes = _tensor_bytes(_parts(dense))
    nested_bytes = _tensor_bytes(_parts(nested))[1]
    del dense  # only the nested batch is kept

    def check():
        from batchproof.reference import nesting as reference

        _check_against(reference.unnest_by_mask(nested.to("cpu")), impl.unnest_by_mask(nested),
                       "unnest_by_mask")

    variants = {  # (on CUDA `bench` adds the torch path: the Triton kernels off)
        "impl (jagged)": lambda: impl.unnest_by_mask(nested),
        "floor (output write)": lambda: write_floor(outputs, device)}
    size = (f"B={batch}, P={prompt_max}, R={response_max}, {tokens / 1e6:.1f} M real tokens, "
            f"nested batch {nested_bytes / 1e9:.2f} GB (on {device})")
    return Workload("nesting", "unnest_by_mask", size, variants, output_bytes, tokens, check)


def pack_varlen_workload(batch: int = 1024, device: str = "cpu", seed: int = 0) -> Workload:
    """`varlen.pack_varlen` on the rl_batch inputs (B=1024, prompts 50–500, responses 50–2000)."""
    from batchproof.impl import varlen as impl
    from batchproof.reference import varlen as reference

    prompts, responses, _ = rl_batch_inputs(batch, seed)
    tokens = sum(len(p) + len(r) for p, r in zip(prompts, responses))
    response_tokens = sum(len(r) for r in responses)
    padded = -(-tokens // 128) * 128
    outputs = [((1, padded), torch.int64)] * 2 + [((response_tokens,), torch.int64)] * 3
    output_bytes = _bytes(outputs)
    j_prompts = hs.jagged(prompts, torch.int64, device)
    j_responses = hs.jagged(responses, torch.int64, device)

    def list_floor():
        flatten_floor(prompts, responses, dtypes=[np.int64, np.int64])
        return write_floor(outputs)

    variants = {
        "reference": lambda: reference.pack_varlen(prompts, responses, pad_to_multiple=128),
        "impl (lists)": lambda: impl.pack_varlen(prompts, responses, pad_to_multiple=128),
        "floor (lists)": list_floor,
        "impl (jagged)": lambda: impl.pack_varlen(j_prompts, j_responses, pad_to_multiple=128,
                                                  device=device),
        "floor (output write)": lambda: write_floor(outputs, device),
    }
    return Workload("varlen", "pack_varlen", f"B={batch}, {tokens / 1e6:.2f} M tokens",
                    variants, output_bytes, tokens)


# --------------------------------------------------------------------------- sft

SFT_PACK_CONFIG = {"capacity": 16384, "dp_size": 8, "tp_size": 2, "cp_size": 2}


def sft_inputs(batch: int = 1024, seed: int = 0, length=(50, 2000), vocab: int = 32000,
               as_tensors: bool = False, device: str = "cpu") -> list[dict]:
    """Examples as SkyRL builds them: input_ids, attention_mask (all ones), num_actions uniform
    in [1, s], a 0/1 loss mask with ~10% interior zeros (Python lists, or 1-D tensors)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(length[0], length[1] + 1, batch)
    examples = []
    for s in lengths:
        n = int(rng.integers(1, s + 1))
        ids, loss = rng.integers(0, vocab, s), (rng.random(n) < 0.9).astype(np.int64)
        if as_tensors:
            examples.append({"input_ids": torch.from_numpy(ids).to(device),
                             "attention_mask": torch.ones(s, dtype=torch.int64, device=device),
                             "num_actions": n,
                             "loss_mask": torch.from_numpy(loss).float().to(device)})
        else:
            examples.append({"input_ids": ids.tolist(), "attention_mask": [1] * int(s),
                             "num_actions": n, "loss_mask": loss.tolist()})
    return examples


def sft_jagged(examples: list[dict]) -> TensorDict:
    """Tensor examples (`sft_inputs(as_tensors=True)`) as one batch: a TensorDict of jagged
    input_ids, attention_mask and loss_mask, and the (N,) num_actions."""
    def jagged(key):
        rows = [ex[key] for ex in examples]
        offsets = torch.tensor([0] + [len(r) for r in rows], device=rows[0].device).cumsum(0)
        return torch.nested.nested_tensor_from_jagged(torch.cat(rows), offsets=offsets)

    fields = {key: jagged(key) for key in ("input_ids", "attention_mask", "loss_mask")}
    fields["num_actions"] = torch.tensor([ex["num_actions"] for ex in examples],
                                         device=examples[0]["input_ids"].device)
    return TensorDict(fields, batch_size=[len(examples)])


def _list_floor(examples, outputs):
    def floor():
        flatten_floor([ex["input_ids"] for ex in examples],
                      [ex["attention_mask"] for ex in examples],
                      [ex["loss_mask"] for ex in examples],
                      dtypes=[np.int64, np.int64, np.float32])
        write_floor(outputs)
    return floor


def _bytes(outputs) -> int:
    return sum(int(np.prod(s)) * torch.empty((), dtype=d).element_size() for s, d in outputs)


def collate_sft_workload(batch: int = 1024, device: str = "cpu", seed: int = 0) -> Workload:
    from batchproof.impl import sft as impl
    from batchproof.reference import sft as reference

    examples = sft_inputs(batch, seed)
    tensors = sft_inputs(batch, seed, as_tensors=True, device=device)
    jagged = sft_jagged(tensors)
    n, width = len(examples), max(len(ex["input_ids"]) for ex in examples)
    response = max(ex["num_actions"] for ex in examples)
    outputs = [((n, width), torch.int64)] * 2 + [((n, response), torch.float32)]
    variants = {
        "reference": lambda: reference.collate_sft(examples, pad_token_id=0),
        "impl (lists)": lambda: impl.collate_sft(examples, pad_token_id=0),
        "floor (lists)": _list_floor(examples, outputs),
        "impl (tensors)": lambda: impl.collate_sft(tensors, pad_token_id=0, device=device),
        "impl (jagged)": lambda: impl.collate_sft(jagged, pad_token_id=0, device=device),
        "floor (output write)": lambda: write_floor(outputs, device),
    }
    tokens = sum(len(ex["input_ids"]) for ex in examples)
    return Workload("sft", "collate_sft", f"N={batch}, {tokens / 1e6:.2f} M tokens", variants,
                    _bytes(outputs), tokens,
                    lists_call=("sft.collate_sft", Case((examples,), {"pad_token_id": 0})))


def pack_sft_workload(batch: int = 1024, device: str = "cpu", seed: int = 0) -> Workload:
    from batchproof.impl import sft as impl
    from batchproof.reference import sft as reference

    examples = sft_inputs(batch, seed)
    tensors = sft_inputs(batch, seed, as_tensors=True, device=device)
    jagged = sft_jagged(tensors)
    shape = impl.pack_sft(examples, pad_token_id=0, **SFT_PACK_CONFIG)
    rows, width = shape["input_ids"].shape
    outputs = [((rows, width), torch.int64)] * 3 + [((rows, width - 1), torch.float32),
                                                    ((batch,), torch.int64),
                                                    ((batch + 1,), torch.int32)]
    variants = {
        "reference": lambda: reference.pack_sft(examples, pad_token_id=0, **SFT_PACK_CONFIG),
        "impl (lists)": lambda: impl.pack_sft(examples, pad_token_id=0, **SFT_PACK_CONFIG),
        "floor (lists)": _list_floor(examples, outputs),
        "impl (tensors)": lambda: impl.pack_sft(tensors, pad_token_id=0, device=device,
                                                **SFT_PACK_CONFIG),
        "impl (jagged)": lambda: impl.pack_sft(jagged, pad_token_id=0, device=device,
                                               **SFT_PACK_CONFIG),
        "floor (output write)": lambda: write_floor(outputs, device),
    }
    if device == "cpu":  # the strong baseline: NumPy per-row slice assignment
        from batchproof.perf.baselines import numpy_rows_pack_sft

        variants["numpy rows (lists)"] = lambda: numpy_rows_pack_sft(
            examples, pad_token_id=0, **SFT_PACK_CONFIG)
        variants["numpy rows (tensors)"] = lambda: numpy_rows_pack_sft(
            tensors, pad_token_id=0, **SFT_PACK_CONFIG)
        variants["numpy rows (jagged)"] = lambda: numpy_rows_pack_sft(
            jagged, pad_token_id=0, **SFT_PACK_CONFIG)
    tokens = sum(len(ex["input_ids"]) for ex in examples)
    return Workload("sft", "pack_sft", f"N={batch}, {tokens / 1e6:.2f} M tokens, "
                    f"{rows} x {width} rows, dp=8 tp=2 cp=2", variants, _bytes(outputs), tokens,
                    lists_call=("sft.pack_sft", Case((examples,), {"pad_token_id": 0,
                                                                   **SFT_PACK_CONFIG})))


def device_sft_batch(batch: int, device: str, length_min: int, length_max: int, seed: int = 0,
                     vocab: int = 32000) -> TensorDict:
    """`sft_jagged`'s batch made on the device (no Python lists): lengths s uniform in
    [length_min, length_max], num_actions uniform in [1, s], a loss mask with ~10% zeros,
    attention all ones."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(length_min, length_max + 1, (batch,), generator=gen)
    actions = (torch.rand(batch, generator=gen, dtype=torch.float64) * lengths).long() + 1
    lengths, actions = lengths.to(device), actions.to(device)
    n_tokens, n_actions = int(lengths.sum()), int(actions.sum())
    on = torch.Generator(device=device).manual_seed(seed)
    ids = torch.randint(0, vocab, (n_tokens,), generator=on, device=device)
    loss = (torch.rand(n_actions, generator=on, device=device) < 0.9).float()
    return TensorDict({
        "input_ids": device_jagged(lengths, ids),
        "attention_mask": device_jagged(lengths, torch.ones_like(ids)),
        "loss_mask": device_jagged(actions, loss),
        "num_actions": actions,
    }, batch_size=[batch])


def pack_sft_device_workload(batch: int = 8192, device: str = "cpu", seed: int = 0,
                             length_min: int = 50, length_max: int = 4096) -> Workload:
    """`pack_sft` from a jagged batch made on the device (`device_sft_batch`: B = 8192
    examples of 50..4096 tokens, SFT_PACK_CONFIG): the impl (one Triton pass on CUDA) and the
    write floor of its outputs."""
    from batchproof.impl import sft as impl

    jagged = device_sft_batch(batch, device, length_min, length_max, seed)
    rows, width = impl.pack_sft(jagged, pad_token_id=0, **SFT_PACK_CONFIG)["input_ids"].shape
    outputs = [((rows, width), torch.int64)] * 3 + [((rows, width - 1), torch.float32),
                                                    ((batch,), torch.int64),
                                                    ((rows + 1,), torch.int64),
                                                    ((batch + 1,), torch.int32)]

    def check():
        from batchproof.reference import sft as reference

        _check_against(reference.pack_sft(jagged.to("cpu"), pad_token_id=0, **SFT_PACK_CONFIG),
                       impl.pack_sft(jagged, pad_token_id=0, **SFT_PACK_CONFIG), "pack_sft")

    variants = {  # (on CUDA `bench` adds the torch path: the Triton kernels off)
        "impl (jagged)": lambda: impl.pack_sft(jagged, pad_token_id=0, **SFT_PACK_CONFIG),
        "floor (output write)": lambda: write_floor(outputs, device)}
    tokens = int(jagged["input_ids"].offsets()[-1])
    input_bytes = _tensor_bytes(_parts(jagged))[1]
    return Workload("sft", "pack_sft", f"N={batch}, {tokens / 1e6:.1f} M tokens "
                    f"({input_bytes / 1e9:.2f} GB jagged, on {device}), {rows} x {width} rows, "
                    "dp=8 tp=2 cp=2", variants, _bytes(outputs), tokens, check)


# --------------------------------------------------------------------------- cp

CP_BENCH_SIZE = 8  # cp ranks: the zigzag chunks are 2·8 = 16 per sequence


def device_cp_row(batch: int, device: str, prompt_max: int, response_max: int, seed: int = 0,
                  cp_size: int = CP_BENCH_SIZE) -> tuple[TensorDict, int]:
    """(pad_for_cp's padded row made on the device, its real tokens): the rl_batch device
    workload's samples (lengths uniform in [1, prompt_max] + [1, response_max]) packed into one
    row of `batch` sequences, each padded to a multiple of 2·cp, with a per-token float32 loss
    mask of ~90% ones."""
    from batchproof.impl import cp

    _, _, _, p_len, r_len = device_rl_batch_inputs(batch, device, prompt_max, response_max, seed)
    lengths = p_len + r_len
    cu = torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)])
    tokens = int(cu[-1])
    on = torch.Generator(device=device).manual_seed(seed)
    ids = torch.randint(0, 32000, (tokens,), generator=on, device=device)
    mask = (torch.rand(tokens, generator=on, device=device) < 0.9).float()
    return cp.pad_for_cp(ids, cu, cp_size=cp_size, loss_mask=mask), tokens


def cp_shard_device_workload(batch: int = 8192, device: str = "cpu", seed: int = 0,
                             prompt_max: int = 2048, response_max: int = 14336,
                             cp_size: int = CP_BENCH_SIZE) -> Workload:
    """`cp.shard` (zigzag, every rank) of one padded row of trainer scale (`device_cp_row`: the
    rl_batch device workload's tokens): the impl (the Triton index and gather kernels on CUDA)
    and the write floor of its outputs (four per-token fields, padded_index and token_index per
    rank, the local boundaries)."""
    from batchproof.impl import cp

    padded, tokens = device_cp_row(batch, device, prompt_max, response_max, seed, cp_size)
    outputs, output_bytes = _tensor_bytes(_parts(cp.shard(padded, cp_size=cp_size)))

    def check():
        from batchproof.reference import cp as reference

        _check_against(reference.shard(padded.to("cpu"), cp_size=cp_size),
                       cp.shard(padded, cp_size=cp_size), "shard")

    variants = {  # (on CUDA `bench` adds the torch path: the Triton kernels off)
        "impl (tensors)": lambda: cp.shard(padded, cp_size=cp_size),
        "floor (output write)": lambda: write_floor(outputs, device)}
    total = padded["input_ids"].shape[1]
    size = (f"{batch} sequences, {tokens:,} tokens padded to {total:,} for cp={cp_size} "
            f"(on {device})")
    return Workload("cp", "shard", size, variants, output_bytes, tokens, check)


def cp_shard_workload(batch: int = 1024, device: str = "cpu", seed: int = 0) -> Workload:
    """`cp.shard` at the default bench scale: the rl_batch list workload's lengths (prompts up
    to 500, responses up to 2000), made as tensors."""
    return cp_shard_device_workload(batch, device, seed, prompt_max=500, response_max=2000)


# ---------------------------------------------------------------- nesting (the PR #6009 batch)

BENCH_BATCH, BENCH_MAX_PROMPT, BENCH_MAX_RESPONSE, BENCH_FILL = 512, 2048, 14336, 0.08
REFERENCE_ROWS = 64


def verl_batch(batch: int = BENCH_BATCH, device: str = "cpu", seed: int = 6009) -> TensorDict:
    """The benchmark's batch: shaped like the verl run of PR #6009, ~8% real tokens."""
    from batchproof.ops.nesting import synthetic_verl_batch, verl_like_lengths

    generator = torch.Generator().manual_seed(seed)
    prompts, responses = verl_like_lengths(batch, BENCH_MAX_PROMPT, BENCH_MAX_RESPONSE, BENCH_FILL,
                                           generator)
    td = synthetic_verl_batch(prompts, responses, max_prompt=BENCH_MAX_PROMPT,
                              max_response=BENCH_MAX_RESPONSE, generator=generator)
    return td.to(device)


def _sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def nesting_workload(batch: int = BENCH_BATCH, device: str = "cpu", seed: int = 6009) -> Workload:
    """nest_by_mask + unnest_by_mask on the PR #6009 batch: the variants `batchproof bench` times."""
    from batchproof.impl import nesting as impl
    from batchproof.reference import nesting as ref_nesting

    dense = verl_batch(batch, device, seed)
    nested = impl.nest_by_mask(dense, pad_token_id=0, strict=True)
    small = dense[:REFERENCE_ROWS].clone()
    values = [nested.get(k).values() for k in nested.keys()
              if not nested.is_non_tensor(k) and nested.get(k).is_nested]

    def reference_round_trip():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref_nesting.unnest_by_mask(ref_nesting.nest_by_mask(small, pad_token_id=0))

    def impl_round_trip():
        impl.unnest_by_mask(impl.nest_by_mask(dense, pad_token_id=0))
        _sync(device)

    def timed(fn):
        def run():
            fn()
            _sync(device)
        return run

    variants = {
        "reference": reference_round_trip,
        "impl nest": timed(lambda: impl.nest_by_mask(dense, pad_token_id=0)),
        "impl unnest": timed(lambda: impl.unnest_by_mask(nested)),
        "impl nest+unnest": impl_round_trip,
        "floor (copy real bytes)": timed(lambda: [v.clone() for v in values]),
        "floor (copy dense batch)": timed(lambda: dense.clone()),
    }
    tokens = int(dense["attention_mask"].sum())
    output_bytes = sum(v.numel() * v.element_size() for v in values)
    size = (f"B={batch}, P={BENCH_MAX_PROMPT}, R={BENCH_MAX_RESPONSE}, {tokens / 1e6:.2f} M real "
            f"tokens; reference on {REFERENCE_ROWS} rows")
    return Workload("nesting", "nest_by_mask+unnest_by_mask", size, variants, output_bytes,
                    tokens)
