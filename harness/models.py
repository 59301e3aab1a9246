"""Tiny randomly initialised causal LMs for the model-level checks (nothing is downloaded).

    tiny_model("llama", "eager")                      float32 on the CPU, cached per process
    tiny_model("qwen3", "sdpa", dtype=torch.bfloat16, device="cuda")

Every model is built from a config (hidden 64, 2 layers, 4 heads / 2 KV heads, vocab 128) with a
fixed seed inside `torch.random.fork_rng`, so the weights are the same on every run and torch's
global RNG is left untouched. The models are in eval mode and must be treated as read-only: they
are shared by every test of the process.

`ModelSpec` names one model (hashable, comparable, cheap to copy); `ModelCase` is a registry `Case`
whose call builds the model from its spec and passes it as the first argument, so the harness's
input-mutation check snapshots the token lists, never the model.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import torch

from batchproof.registry import Case

ARCHITECTURES = ("llama", "qwen2", "qwen3")
ATTENTION = ("eager", "sdpa")
# also accepted by `tiny_model` (benchmarks/gpu_report.py), never drawn by `specs()`: flex_attention
# compiles its kernels on first use (tens of seconds), too slow for the CPU test lists
GPU_ATTENTION = ATTENTION + ("flex_attention",)
VOCAB = 128
SEED = 0

_SIZES = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    max_position_embeddings=512,
    tie_word_embeddings=False,
)


def config(arch: str, hidden_size: int = 64):
    """The transformers config of the tiny `arch` model (default initializer_range 0.02);
    `hidden_size` other than 64: 4 heads, head_dim = hidden_size / 4, an MLP twice as wide
    (docs/equivalence.md's GPU table measures hidden 64 and 256)."""
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    classes = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}
    if arch not in classes:
        raise ValueError(f"unknown architecture {arch!r}; known: {ARCHITECTURES}")
    return classes[arch](**{**_SIZES, "hidden_size": hidden_size,
                            "intermediate_size": 2 * hidden_size})


@functools.cache
def tiny_model(
    arch: str,
    attn: str = "sdpa",
    *,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = SEED,
    hidden_size: int = 64,
) -> torch.nn.Module:
    """The tiny `arch` model with attention implementation `attn` (cached: do not modify it).

    The weights are drawn on the CPU in float32 from `seed` (whatever the target dtype and device,
    so every variant of one architecture shares them), then cast and moved.
    """
    from transformers import AutoModelForCausalLM

    if attn not in GPU_ATTENTION:
        raise ValueError(f"unknown attention implementation {attn!r}; known: {GPU_ATTENTION}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config(arch, hidden_size), attn_implementation=attn,
                                                 dtype=torch.float32)
    model.requires_grad_(False)
    return model.to(device=device, dtype=dtype).eval()


@dataclass(frozen=True)
class ModelSpec:
    """The name of one tiny model: architecture, attention implementation, dtype, device."""

    arch: str
    attn: str
    dtype: str = "float32"
    device: str = "cpu"

    def build(self) -> torch.nn.Module:
        return tiny_model(self.arch, self.attn, dtype=getattr(torch, self.dtype),
                          device=self.device)

    def on(self, device: str) -> ModelSpec:
        return ModelSpec(self.arch, self.attn, self.dtype, str(device))

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def __str__(self) -> str:
        return f"{self.arch}-{self.attn}-{self.dtype}-{self.device}"


def specs(
    devices: tuple[str, ...] = ("cpu",), dtypes: tuple[str, ...] = ("float32",)
) -> list[ModelSpec]:
    """Every architecture x attention implementation, for the given devices and dtypes."""
    return [ModelSpec(arch, attn, dtype, device) for device in devices for dtype in dtypes
            for arch in ARCHITECTURES for attn in ATTENTION]


def cuda_specs() -> list[ModelSpec]:
    """The CUDA variants (float32 and bfloat16) when a GPU is present, else none."""
    if not torch.cuda.is_available():
        return []
    return specs(("cuda",), ("float32", "bfloat16"))


@dataclass(frozen=True)
class ModelCase(Case):
    """A registry case whose function takes a model first: `fn(spec.build(), *args, **kwargs)`."""

    model: ModelSpec = field(default_factory=lambda: ModelSpec("llama", "sdpa"))

    def call(self, fn) -> Any:
        return fn(self.model.build(), *self.args, **dict(self.kwargs))

    def replace(self, *args: Any, **kwargs: Any) -> ModelCase:
        new_kwargs = {**self.kwargs, **kwargs}
        return ModelCase(args if args else self.args, new_kwargs, self.label, self.model)

    def on(self, device: str) -> ModelCase:
        return ModelCase(self.args, self.kwargs, self.label, self.model.on(device))

    def __repr__(self) -> str:
        return f"ModelCase(model={self.model}, {super().__repr__()})"

    def short(self, limit: int = 300) -> str:
        return f"model={self.model} {super().short(limit)}"

    def as_call(self, function: str) -> str:
        call = Case(self.args, self.kwargs).as_call(function)
        model = f"<tiny {self.model} model>"
        return call.replace("(", f"({model}, " if self.args or self.kwargs else f"({model}", 1)
