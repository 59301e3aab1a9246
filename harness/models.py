"""Tiny randomly initialised causal LMs for the model-level checks (nothing is downloaded).

    tiny_model("llama", "eager")                      float32 on the CPU, cached per process
    tiny_model("qwen3", "sdpa", dtype=torch.bfloat16, device="cuda")
    tiny_model("qwen3_next", "sdpa")                  a hybrid: gated delta net + attention

Every model is built from transformers' own config class (hidden 64, vocab 128, one or two
layers of each kind, initializer_range 0.02 — 0.05 for LFM2, whose short convolution's leak across
a packed boundary is within float32 rounding on some inputs at 0.02) with a fixed seed inside
`torch.random.fork_rng`, so the weights are the same
on every run and torch's global RNG is left untouched. The models are in eval mode and must be
treated as read-only: they are shared by every test of the process.

`FAMILIES` names every model family, what mixes its tokens along the sequence, and whether
transformers' PyTorch path keeps the samples of a packed row apart (`Family.packs`, measured on
transformers 5.23.0 and 5.24.0, docs/equivalence.md): the pure attention families do (their mask
is built from the restarting `position_ids`); the hybrid and recurrent ones do not — their
short convolutions and recurrent kernels run over the whole row and carry state from one sample
into the next. `varlen.response_logprobs` scores those with `packing="rows"` (docs/varlen.md).

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

VOCAB = 128
SEED = 0


@dataclass(frozen=True)
class Family:
    """One model family: its transformers config class and tiny sizes, what mixes tokens along
    the sequence, the attention implementations it is drawn with on the CPU, and whether
    transformers' PyTorch path keeps the samples of a packed row apart (`packs`)."""

    name: str
    config_class: str
    mixers: str
    sizes: dict = field(hash=False, compare=False)
    attention: tuple[str, ...] = ("eager", "sdpa")
    packs: bool = True

    def available(self) -> bool:
        """Whether the installed transformers has this family's config class (the attention
        families are in every transformers the `models` extra allows: asking imports nothing)."""
        import importlib.util

        if importlib.util.find_spec("transformers") is None:
            return False
        if self.name in ARCHITECTURES:
            return True
        import transformers

        return hasattr(transformers, self.config_class)


_ATTENTION_SIZES = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    max_position_embeddings=512,
    tie_word_embeddings=False,
)
_HEADS = dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16)
_COMMON = dict(vocab_size=VOCAB, hidden_size=64, tie_word_embeddings=False,
               initializer_range=0.02, max_position_embeddings=512)
# gated delta net layers: 2 key heads / 4 value heads of 16 (transformers' fallback kernels are
# the PyTorch ones when flash-linear-attention is absent)
_GDN = dict(linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_conv_kernel_dim=4,
            layer_types=["linear_attention", "full_attention"])
# Mamba2 mixers: 4 heads of 32 (= expand 2 x hidden 64), state 16, chunks of 16 tokens (so a
# packed row of the checks spans several chunks)

FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("llama", "LlamaConfig", "attention", _ATTENTION_SIZES),
    Family("qwen2", "Qwen2Config", "attention", _ATTENTION_SIZES),
    Family("qwen3", "Qwen3Config", "attention", _ATTENTION_SIZES),
    Family("lfm2", "Lfm2Config", "short convolution (kernel 3) + attention",
           dict(_COMMON, **_HEADS, intermediate_size=128, num_hidden_layers=2,
                layer_types=["conv", "full_attention"], block_auto_adjust_ff_dim=False,
                initializer_range=0.05),
           packs=False),
    Family("qwen3_next", "Qwen3NextConfig", "gated delta net (with a short convolution) + "
           "attention", dict(_COMMON, **_HEADS, **_GDN, intermediate_size=128,
                             num_hidden_layers=2, mlp_only_layers=[0, 1]), packs=False),
    Family("qwen3_5", "Qwen3_5TextConfig", "gated delta net (with a short convolution) + "
           "attention (Qwen3.5's text model)",
           dict(_COMMON, **_HEADS, **_GDN, intermediate_size=128, num_hidden_layers=2),
           packs=False),
    Family("bamba", "BambaConfig", "Mamba2 mixer + attention",
           dict(_COMMON, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                num_hidden_layers=2, attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=32,
                mamba_n_groups=1, mamba_d_state=16, mamba_chunk_size=16), packs=False),
    Family("nemotron_h", "NemotronHConfig", "Mamba2 mixer, attention and MLP blocks",
           dict(_COMMON, **_HEADS, intermediate_size=128,
                layers_block_type=["mamba", "attention", "mlp"], mamba_num_heads=4,
                mamba_head_dim=32, ssm_state_size=16, n_groups=1, chunk_size=16),
           packs=False),
    # transformers builds Mamba2 with eager only (it has no attention): its own setting
    Family("mamba2", "Mamba2Config", "Mamba2 mixer only",
           dict(_COMMON, num_hidden_layers=2, num_heads=4, head_dim=32, state_size=16,
                n_groups=1, chunk_size=16), attention=("eager",), packs=False),
)}

ARCHITECTURES = ("llama", "qwen2", "qwen3")  # pure attention: packing keeps samples apart
HYBRID_ARCHITECTURES = tuple(name for name, f in FAMILIES.items() if not f.packs)
ATTENTION = ("eager", "sdpa")
# also accepted by `tiny_model` (benchmarks/gpu_report.py), never drawn by `specs()`: flex_attention
# compiles its kernels on first use (tens of seconds), too slow for the CPU test lists
GPU_ATTENTION = ATTENTION + ("flex_attention",)


def family(arch: str) -> Family:
    """The `Family` named `arch` (ValueError naming the known ones otherwise)."""
    if arch not in FAMILIES:
        raise ValueError(f"unknown architecture {arch!r}; known: {tuple(FAMILIES)}")
    return FAMILIES[arch]


def config(arch: str, hidden_size: int = 64):
    """The transformers config of the tiny `arch` model (initializer_range 0.02);
    `hidden_size` other than 64 (attention families only): 4 heads, head_dim = hidden_size / 4,
    an MLP twice as wide (docs/equivalence.md's GPU table measures hidden 64 and 256)."""
    import transformers

    spec = family(arch)
    if not spec.available():
        raise ValueError(f"architecture {arch!r} needs transformers' {spec.config_class}, which "
                         f"transformers {transformers.__version__} does not have")
    sizes = dict(spec.sizes)
    if hidden_size != 64:
        if arch not in ARCHITECTURES:
            raise ValueError(f"hidden_size {hidden_size}: only the attention architectures "
                             f"{ARCHITECTURES} come in other sizes")
        sizes.update(hidden_size=hidden_size, intermediate_size=2 * hidden_size)
    return getattr(transformers, spec.config_class)(**sizes)


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
    allowed = family(arch).attention + (("flex_attention",) if arch in ARCHITECTURES else ())
    if attn not in allowed:
        raise ValueError(f"{arch} is built with attention {allowed} only, not {attn!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config(arch, hidden_size), attn_implementation=attn,
                                                 dtype=torch.float32)
    model.requires_grad_(False)
    return model.to(device=device, dtype=dtype).eval()


@functools.cache
def _trainable(arch: str, attn: str, dtype: torch.dtype, device: str) -> torch.nn.Module:
    return tiny_model.__wrapped__(arch, attn, dtype=dtype, device=device).requires_grad_(True)


def trainable_model(spec: ModelSpec) -> torch.nn.Module:
    """A copy of `spec`'s tiny model whose parameters require gradients (the same weights; eval
    mode), cached per process apart from `tiny_model`'s: whoever uses it resets its gradients
    first (`parameter.grad = None`) and changes nothing else."""
    return _trainable(spec.arch, spec.attn, spec.torch_dtype, spec.device)


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

    @property
    def packs(self) -> bool:
        """Whether transformers' PyTorch path keeps this family's packed samples apart."""
        return family(self.arch).packs

    def __str__(self) -> str:
        return f"{self.arch}-{self.attn}-{self.dtype}-{self.device}"


def specs(
    devices: tuple[str, ...] = ("cpu",), dtypes: tuple[str, ...] = ("float32",),
    architectures: tuple[str, ...] = ARCHITECTURES,
) -> list[ModelSpec]:
    """Every architecture (default: the attention ones) x its attention implementations, for the
    given devices and dtypes; an architecture the installed transformers lacks is left out."""
    return [ModelSpec(arch, attn, dtype, device) for device in devices for dtype in dtypes
            for arch in architectures if family(arch).available()
            for attn in family(arch).attention]


def hybrid_specs(devices: tuple[str, ...] = ("cpu",),
                 dtypes: tuple[str, ...] = ("float32",)) -> list[ModelSpec]:
    """The hybrid and recurrent families (`Family.packs` False) the installed transformers has."""
    return specs(devices, dtypes, HYBRID_ARCHITECTURES)


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
