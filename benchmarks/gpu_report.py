"""The GPU report of `varlen.response_logprobs` (issue 19): two Markdown tables for the docs.

1. |Δ| table: the packed micro-batches of `batchproof.impl.varlen.response_logprobs` against the
   dense per-sample forward of the oracle (`batchproof.reference.varlen.response_logprobs`), per
   tiny model architecture (llama, qwen2, qwen3) x attention implementation (eager, sdpa,
   flex_attention) x dtype (float32, bfloat16): max and mean |Δ| over the valid response tokens,
   next to the tolerance of the project's comparator (`batchproof.compare.LOGPROB_TOLERANCE`).
2. tokens/s table: the packed forward against one dense padded forward of the same batch at ~50%
   fill, per attention implementation, on a model whose matmuls dominate (Llama, hidden 1024,
   8 layers, bf16 on CUDA; the tiny float32 Llama on the CPU, as a smoke test).

    python benchmarks/gpu_report.py [--device cuda|cpu] [--out DIR] [--quick]

Prints both tables to stdout (progress goes to stderr); with --out also writes DIR/report.md and
DIR/report.json. A row that raises is reported as "failed: <ExceptionType: message>" and the
script goes on. Every input is drawn from a local, seeded `torch.Generator` (never the global RNG).

flex_attention and packing: the packed forward passes `position_ids` that restart at 0 for every
sample and `attention_mask=None`. In transformers (checked in 5.23.0, masking_utils.py),
`create_causal_mask` calls `_preprocess_mask_arguments`, which runs
`find_packed_sequence_indices(position_ids)` whenever the 2-D attention mask is None and there is
no cache, independently of the attention implementation; `create_causal_mask` then wraps the
causal mask function in `packed_sequence_compatibility_function` (same sample AND causal on the
per-sample positions) *before* it calls the implementation's mask builder
(`ALL_MASK_ATTENTION_FUNCTIONS[config._attn_implementation]`). For "flex_attention" that builder is
`flex_attention_mask`, which hands the very same mask function to `create_block_mask`: flex gets
the document (block-diagonal causal) mask exactly as sdpa (`sdpa_mask`) and eager (`eager_mask`)
do, only as a BlockMask instead of a dense tensor. `impl.varlen._check_packed_attention` accepts
flex_attention for packing="position_ids" (it is in ALL_MASK_ATTENTION_FUNCTIONS).

flex_attention compiles its kernels (torch.compile) on first use: its rows take tens of seconds
the first time, then the compiled kernels are reused. Every packed micro-batch and every oracle
sample has its own length, so torch.compile recompiles a few times; past dynamo's recompile limit
(8) flex would silently run its unfused eager fallback, so the flex rows run with a higher limit.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import itertools
import json
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from batchproof.compare import LOGPROB_TOLERANCE, Mismatch, assert_logprobs_close
from batchproof.impl import varlen as impl
from batchproof.models import ARCHITECTURES, GPU_ATTENTION, VOCAB, tiny_model
from batchproof.reference import varlen as reference

DTYPES = ("float32", "bfloat16")
SEED = 0

# --------------------------------------------------------------------------- helpers


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _failure(err: BaseException) -> str:
    """`ExceptionType: message` on one line, short enough for a table cell."""
    message = " ".join(str(err).split())
    if len(message) > 200:
        message = message[:197] + "..."
    return f"{type(err).__name__}: {message}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _flex_limits(attn: str):
    """Raise dynamo's recompile limits for flex_attention rows (see the module docstring)."""
    if attn != "flex_attention":
        return contextlib.nullcontext()
    return torch._dynamo.config.patch(recompile_limit=64, accumulated_recompile_limit=4096)


def draw_samples(count: int, low: int, high: int, *, seed: int = SEED, vocab: int = VOCAB):
    """`count` (prompt, response) token lists, both lengths uniform in [low, high], token ids
    uniform in [0, vocab), from a local generator."""
    gen = torch.Generator().manual_seed(seed)
    p_lens = torch.randint(low, high + 1, (count,), generator=gen).tolist()
    r_lens = torch.randint(low, high + 1, (count,), generator=gen).tolist()
    prompts = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in p_lens]
    responses = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in r_lens]
    return prompts, responses


def response_mask(responses, device="cpu") -> torch.Tensor:
    """(B, max r) bool: True on the last r_k columns of row k (the right-aligned output layout)."""
    r_lens = torch.tensor([len(r) for r in responses], device=device)
    width = int(r_lens.max())
    return torch.arange(width, device=device)[None] >= width - r_lens[:, None]


def masked_delta(expected: torch.Tensor, actual: torch.Tensor, mask: torch.Tensor):
    """(max |Δ|, mean |Δ|) in float64 over the masked entries."""
    delta = (expected.detach().double().cpu() - actual.detach().double().cpu()).abs()[mask.cpu()]
    if delta.numel() == 0:
        return 0.0, 0.0
    return float(delta.max()), float(delta.mean())


# --------------------------------------------------------------------------- 1. the |Δ| table


@dataclass
class DeltaSetup:
    samples: int
    low: int
    high: int
    budget: int

    @classmethod
    def make(cls, quick: bool) -> DeltaSetup:
        return cls(12, 1, 47, 128) if quick else cls(32, 1, 127, 1024)


def delta_row(arch: str, attn: str, dtype: str, device: torch.device, prompts, responses,
              budget: int, hidden: int = 64) -> dict[str, Any]:
    """One row: packed `impl` against the per-sample oracle on the same tiny model."""
    torch_dtype = getattr(torch, dtype)
    tol_max, tol_mean = LOGPROB_TOLERANCE[torch_dtype]
    row: dict[str, Any] = dict(arch=arch, hidden=hidden, attn=attn, dtype=dtype, tol_max=tol_max,
                               tol_mean=tol_mean, max_abs=None, mean_abs=None, within=None,
                               verdict=None, tokens=sum(len(r) for r in responses), seconds=None,
                               error=None)
    start = time.perf_counter()
    try:
        # built outside inference_mode: tiny_model is cached for the whole process, and its
        # parameters must not become inference tensors
        model = tiny_model(arch, attn, dtype=torch_dtype, device=str(device), hidden_size=hidden)
        with _flex_limits(attn), torch.inference_mode():
            expected = reference.response_logprobs(model, prompts, responses)
            actual = impl.response_logprobs(model, prompts, responses,
                                            max_tokens_per_batch=budget)
            _sync(device)
        mask = response_mask(responses)
        row["max_abs"], row["mean_abs"] = masked_delta(expected, actual, mask)
        try:
            assert_logprobs_close(expected.cpu(), actual.cpu(), mask, torch_dtype)
            row["within"], row["verdict"] = True, "yes"
        except Mismatch as err:
            row["within"], row["verdict"] = False, "NO: " + _failure(err)
    except Exception as err:  # noqa: BLE001 - one failed row must not stop the report
        row["error"] = _failure(err)
    row["seconds"] = time.perf_counter() - start
    return row


def delta_rows(device: torch.device, quick: bool = False, *, archs=ARCHITECTURES,
               attns=GPU_ATTENTION, dtypes=DTYPES, hiddens=(64,)) -> list[dict[str, Any]]:
    """Every arch x attn x dtype row of the |Δ| table, on the same seeded inputs."""
    setup = DeltaSetup.make(quick)
    prompts, responses = draw_samples(setup.samples, setup.low, setup.high)
    rows = []
    for hidden, arch, attn, dtype in itertools.product(hiddens, archs, attns, dtypes):
        row = delta_row(arch, attn, dtype, device, prompts, responses, setup.budget, hidden)
        shown = row["error"] or f"max |Δ| {row['max_abs']:.3g}"
        _log(f"  |Δ| {hidden:4d} {arch:6s} {attn:15s} {dtype:9s} {shown} "
             f"({row['seconds']:.1f} s)")
        rows.append(row)
    _free(device)
    return rows


def delta_markdown(rows: list[dict[str, Any]], quick: bool = False) -> str:
    setup = DeltaSetup.make(quick)
    lines = [
        f"Packed `varlen.response_logprobs` (max_tokens_per_batch={setup.budget}) vs the dense "
        f"per-sample oracle: {setup.samples} samples, prompt and response lengths uniform in "
        f"{setup.low}..{setup.high}, vocab {VOCAB}, tiny models (2 layers, 4 heads / 2 KV heads; "
        f"hidden 64 is the suite's model, head_dim 16; hidden 256 has head_dim 64). |Δ| over "
        f"the valid response tokens; tolerance = the comparator's (max / mean) for the dtype.",
        "",
        "| arch | hidden | attention | dtype | max \\|Δ\\| | mean \\|Δ\\| | tolerance (max / mean) "
        "| within | seconds |",
        "|---|---:|---|---|---:|---:|---|---|---:|",
    ]
    for r in rows:
        tol = f"{r['tol_max']:g} / {r['tol_mean']:g}" if r["tol_mean"] else f"{r['tol_max']:g} / —"
        if r["error"]:
            lines.append(f"| {r['arch']} | {r['hidden']} | {r['attn']} | {r['dtype']} | "
                         f"{_cell('failed: ' + r['error'])} | — | {tol} | — | {r['seconds']:.1f} |")
        else:
            lines.append(f"| {r['arch']} | {r['hidden']} | {r['attn']} | {r['dtype']} | "
                         f"{r['max_abs']:.3g} | "
                         f"{r['mean_abs']:.3g} | {tol} | {_cell(r['verdict'])} | "
                         f"{r['seconds']:.1f} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- 2. tokens/s


@dataclass
class ThroughputSetup:
    model: str
    big: bool
    dtype: str
    batch: int
    segment: int  # prompt and response lengths are uniform in 1..segment
    budget: int
    warmup: int
    runs: int

    @classmethod
    def make(cls, device: torch.device, quick: bool) -> ThroughputSetup:
        if device.type == "cuda":
            model = ("Llama hidden 1024, 8 layers, 16 heads / 8 KV heads, MLP 2816, vocab 32000, "
                     "bfloat16")
            if quick:
                return cls(model, True, "bfloat16", 16, 256, 1024, 2, 5)
            return cls(model, True, "bfloat16", 64, 1024, 4096, 3, 7)
        model = "tiny Llama (hidden 64, 2 layers, vocab 128), float32"
        if quick:
            return cls(model, False, "float32", 4, 16, 64, 2, 5)
        return cls(model, False, "float32", 8, 64, 256, 2, 5)

    @property
    def vocab(self) -> int:
        return 32000 if self.big else VOCAB


def throughput_model(attn: str, setup: ThroughputSetup, device: torch.device) -> torch.nn.Module:
    if not setup.big:
        return tiny_model("llama", attn, dtype=getattr(torch, setup.dtype), device=str(device))
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                         num_attention_heads=16, num_key_value_heads=8, vocab_size=32000,
                         max_position_embeddings=4 * setup.segment, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):  # weights drawn on the CPU, global RNG untouched
        torch.manual_seed(SEED)
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attn,
                                                 dtype=torch.float32)
    model.requires_grad_(False)
    return model.to(device=device, dtype=getattr(torch, setup.dtype)).eval()


def throughput_samples(setup: ThroughputSetup):
    """Lengths uniform in 1..segment for prompt and response; sample 0 is the longest possible
    (segment + segment), so the mean sample is about half of the padded width (~50% fill)."""
    prompts, responses = draw_samples(setup.batch, 1, setup.segment, seed=SEED + 1,
                                      vocab=setup.vocab)
    gen = torch.Generator().manual_seed(SEED + 2)
    prompts[0] = torch.randint(0, setup.vocab, (setup.segment,), generator=gen).tolist()
    responses[0] = torch.randint(0, setup.vocab, (setup.segment,), generator=gen).tolist()
    return prompts, responses


def dense_padded_logprobs(model, prompts, responses, chunk_rows: int = 1024) -> torch.Tensor:
    """The dense replay: one left-padded (B, max(p + r)) forward with a 2-D attention mask and
    position ids counted over the real tokens, logits of the last max(r) + 1 columns, float32
    log-softmax over about `chunk_rows` token rows at a time. (B, max r) float32, right-aligned,
    zeros elsewhere (the layout of `response_logprobs`)."""
    device = next(model.parameters()).device
    width = max(len(p) + len(r) for p, r in zip(prompts, responses))
    r_width = max(len(r) for r in responses)
    rows = [[0] * (width - len(p) - len(r)) + list(p) + list(r) for p, r in zip(prompts, responses)]
    marks = [[0] * (width - len(p) - len(r)) + [1] * (len(p) + len(r))
             for p, r in zip(prompts, responses)]
    ids = torch.tensor(rows, dtype=torch.int64).to(device)
    mask = torch.tensor(marks, dtype=torch.int64).to(device)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False,
                   logits_to_keep=r_width + 1).logits[:, :-1]
    targets = ids[:, width - r_width:]
    out = torch.empty((len(rows), r_width), dtype=torch.float32, device=device)
    step = max(1, chunk_rows // max(1, r_width))
    for s in range(0, len(rows), step):
        logprobs = torch.log_softmax(logits[s:s + step].float(), dim=-1)
        out[s:s + step] = logprobs.gather(-1, targets[s:s + step, :, None]).squeeze(-1)
    valid = response_mask(responses, device)
    return torch.where(valid, out, torch.zeros((), dtype=out.dtype, device=device))


def micro_batch_count(prompts, responses, budget: int) -> int:
    """How many packed forwards `impl.response_logprobs` makes (greedy, consecutive samples)."""
    count, used = 0, None
    for p, r in zip(prompts, responses):
        n = len(p) + len(r)
        if used is None or used + n > budget:
            count, used = count + 1, 0
        used += n
    return count


def median_seconds(fn: Callable[[], Any], device: torch.device, warmup: int, runs: int):
    """(median seconds, every run's seconds, the last output) of `fn` after `warmup` calls."""
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(runs):
        _sync(device)
        start = time.perf_counter()
        out = fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, out


def sdpa_backends(fn: Callable[[], Any]) -> dict[str, str]:
    """Which SDPA backends accept `fn`'s attention calls, each alone: "ok" or why not. With none of
    flash / efficient / cudnn accepting, the forward needs the math fallback."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    result = {}
    for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([backend]):
                    fn()
                result[name] = "ok"
            except RuntimeError as err:
                reasons = [" ".join(str(w.message).split()) for w in caught]
                result[name] = "refused: " + (reasons[0][:160] if reasons else _failure(err))
    return result


def _path_row(attn: str, path: str, real: int, **extra) -> dict[str, Any]:
    row = dict(attn=attn, path=path, real_tokens=real, median_s=None, times=None,
               tokens_per_s=None, vs_dense=None, max_abs_vs_dense=None, error=None)
    row.update(extra)
    return row


def throughput_rows(device: torch.device, quick: bool = False, *, attns=GPU_ATTENTION):
    """Per attention implementation: a dense padded row and a packed row; plus the SDPA backends
    that accept each path's attention (sdpa only). Returns (setup, rows, notes)."""
    setup = ThroughputSetup.make(device, quick)
    prompts, responses = throughput_samples(setup)
    real = sum(len(p) + len(r) for p, r in zip(prompts, responses))
    padded = setup.batch * max(len(p) + len(r) for p, r in zip(prompts, responses))
    details = {
        "dense padded": dict(padded_tokens=padded, padding_fraction=1 - real / padded),
        "packed": dict(micro_batches=micro_batch_count(prompts, responses, setup.budget),
                       budget=setup.budget),
    }
    rows, notes = [], {}
    for attn in attns:
        try:
            model = throughput_model(attn, setup, device)
        except Exception as err:  # noqa: BLE001 - one failed row must not stop the report
            rows += [_path_row(attn, path, real, error=_failure(err), **details[path])
                     for path in details]
            _log(f"  tok/s {attn}: model failed: {_failure(err)}")
            continue
        rows += _attn_rows(model, attn, setup, prompts, responses, real, details)
        if attn == "sdpa":
            notes.update(_sdpa_notes(model, setup, prompts, responses))
        del model
        _free(device)
    return setup, rows, notes


def _attn_rows(model, attn: str, setup: ThroughputSetup, prompts, responses, real: int,
               details) -> list[dict[str, Any]]:
    """The dense padded row, then the packed row (with its ratio and |Δ| to the dense one)."""
    device = next(model.parameters()).device
    paths = {
        "dense padded": lambda: dense_padded_logprobs(model, prompts, responses),
        "packed": lambda: impl.response_logprobs(model, prompts, responses,
                                                 max_tokens_per_batch=setup.budget),
    }
    rows, dense_out, dense_s = [], None, None
    for path, fn in paths.items():
        row = _path_row(attn, path, real, **details[path])
        try:
            with _flex_limits(attn), torch.inference_mode():
                median, times, out = median_seconds(fn, device, setup.warmup, setup.runs)
            row.update(median_s=median, times=times, tokens_per_s=real / median)
            if path == "dense padded":
                dense_out, dense_s = out, median
            else:
                if dense_s is not None:
                    row["vs_dense"] = dense_s / median
                if dense_out is not None:
                    valid = response_mask(responses, device)
                    row["max_abs_vs_dense"] = masked_delta(dense_out, out, valid)[0]
            del out
        except Exception as err:  # noqa: BLE001
            row["error"] = _failure(err)
        shown = row["error"] or f"{row['tokens_per_s']:,.0f} tok/s"
        _log(f"  tok/s {attn:15s} {path:13s} {shown}")
        rows.append(row)
        _free(device)
    return rows


def _sdpa_notes(model, setup: ThroughputSetup, prompts, responses) -> dict[str, dict[str, str]]:
    """Which SDPA backends accept each path. A few samples suffice: the backend choice depends on
    the mask, the dtype and the head size, not on the batch size."""
    few_p, few_r = prompts[:8], responses[:8]
    probes = {
        "dense padded": lambda: dense_padded_logprobs(model, few_p, few_r),
        "packed": lambda: impl.response_logprobs(model, few_p, few_r,
                                                 max_tokens_per_batch=setup.budget),
    }
    notes = {}
    for path, probe in probes.items():
        try:
            with torch.inference_mode():
                notes[f"sdpa backends, {path}"] = sdpa_backends(probe)
        except Exception as err:  # noqa: BLE001
            notes[f"sdpa backends, {path}"] = {"probe": "failed: " + _failure(err)}
    return notes


def throughput_markdown(setup: ThroughputSetup, rows: list[dict[str, Any]],
                        notes: dict[str, dict[str, str]]) -> str:
    real = rows[0]["real_tokens"] if rows else 0
    dense = next((r for r in rows if r["path"] == "dense padded"), {})
    padded, fill = dense.get("padded_tokens", 0), dense.get("padding_fraction", 0.0)
    lines = [
        f"Packed `varlen.response_logprobs` (max_tokens_per_batch={setup.budget}) vs one dense "
        f"left-padded forward with an attention mask: {setup.model}; B={setup.batch}, prompt and "
        f"response lengths uniform in 1..{setup.segment} (sample 0 the longest), {real:,} real "
        f"tokens, dense batch {padded:,} tokens ({fill:.0%} padding). Real tokens (prompt + "
        f"response, no padding) / median of {setup.runs} runs after {setup.warmup} warm-up "
        f"calls, under torch.inference_mode().",
        "",
        "| attention | path | median ms | real tokens/s | packed / dense | padding | "
        "max \\|Δ\\| vs dense |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        if r["path"] == "dense padded":
            pad = f"{r['padding_fraction']:.0%} of {r['padded_tokens']:,}"
        else:
            pad = f"{r['micro_batches']} micro-batches"
        if r["error"]:
            lines.append(f"| {r['attn']} | {r['path']} | {_cell('failed: ' + r['error'])} | — "
                         f"| — | {pad} | — |")
            continue
        ratio = "1.00x (baseline)" if r["path"] == "dense padded" else (
            f"{r['vs_dense']:.2f}x" if r["vs_dense"] is not None else "—")
        delta = "—" if r["max_abs_vs_dense"] is None else f"{r['max_abs_vs_dense']:.3g}"
        lines.append(f"| {r['attn']} | {r['path']} | {1e3 * r['median_s']:.2f} | "
                     f"{r['tokens_per_s']:,.0f} | {ratio} | {pad} | {delta} |")
    if notes:
        lines.append("")
    for key, backends in notes.items():
        accepted = [name for name, v in backends.items() if v == "ok"]
        fast = [name for name in accepted if name != "MATH"]
        verdict = ("needs the math fallback" if not fast
                   else f"no math fallback needed ({', '.join(fast)} accepted)")
        lines.append(f"- {key} (each SDPA backend alone): accepted by "
                     f"{', '.join(accepted) or 'none'}; {verdict}.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the report


def environment(device: torch.device) -> dict[str, Any]:
    import transformers

    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return dict(date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                device=name, torch=torch.__version__, cuda=torch.version.cuda,
                transformers=transformers.__version__, python=platform.python_version())


def render(env: dict[str, Any], quick: bool, deltas, setup, rows, notes, seconds: float) -> str:
    cuda = f", CUDA {env['cuda']}" if env["cuda"] else ""
    return "\n".join([
        f"# varlen.response_logprobs: GPU report{' (quick)' if quick else ''}",
        "",
        f"{env['date']} · {env['device']} · torch {env['torch']}{cuda} · transformers "
        f"{env['transformers']} · Python {env['python']} · {seconds:.0f} s",
        "",
        "## |Δ| packed vs dense per-sample",
        "",
        delta_markdown(deltas, quick),
        "",
        *(["## Throughput: packed vs dense padded", "", throughput_markdown(setup, rows, notes),
           ""] if rows else []),
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"),
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, help="also write DIR/report.md and DIR/report.json")
    parser.add_argument("--quick", action="store_true", help="small inputs (a smoke test)")
    parser.add_argument("--hidden", type=int, nargs="+", default=[64],
                        help="tiny models' hidden sizes for the |Δ| table (head_dim = hidden / 4)")
    parser.add_argument("--no-throughput", action="store_true", help="the |Δ| table only")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch.cuda.is_available() is False")
    device = torch.device(args.device)
    start = time.perf_counter()
    env = environment(device)
    _log(f"gpu_report on {env['device']}: |Δ| table")
    deltas = delta_rows(device, args.quick, hiddens=tuple(args.hidden))
    setup, rows, notes = ThroughputSetup.make(device, args.quick), [], {}
    if not args.no_throughput:
        _log("tokens/s table")
        setup, rows, notes = throughput_rows(device, args.quick)
    seconds = time.perf_counter() - start
    markdown = render(env, args.quick, deltas, setup, rows, notes, seconds)
    print(markdown)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "report.md").write_text(markdown)
        report = dict(environment=env, quick=args.quick, seconds=seconds,
                      delta=dict(setup=asdict(DeltaSetup.make(args.quick)), rows=deltas),
                      throughput=dict(setup=asdict(setup), rows=rows, sdpa_backends=notes))
        (args.out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        _log(f"wrote {args.out / 'report.md'} and {args.out / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
