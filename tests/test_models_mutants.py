"""`batchproof.models`: the tiny models are what the module docstring promises (transformers'
own config class at the tiny sizes, fixed weights from a seed drawn on the CPU in float32, the
global RNG untouched, eval mode, no gradients; a trainable copy with the same weights), the
refusals name what was asked, and `ModelSpec`/`ModelCase` name, build and print a model as
documented. A few one- and two-layer models are built (under a second each); these tests are
the killers of `batchproof mutate --mutmut --harness models`."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from batchproof import models
from batchproof.models import ModelCase, ModelSpec

transformers = pytest.importorskip("transformers")


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    return pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k].to(pa[k].dtype))
                                          for k in pa)


# --------------------------------------------------------------------------- families


def test_the_attention_families_are_available_without_asking_transformers() -> None:
    """(A family named like an attention one is not looked up: here its class does not exist.)"""
    for name in models.ARCHITECTURES:
        assert models.Family(name, "NoSuchConfigClass", "attention", {}).available()


def test_a_family_is_available_when_transformers_has_its_config() -> None:
    assert models.family("lfm2").available()
    assert not models.Family("made_up", "NoSuchConfigClass", "attention", {}).available()


def test_no_family_is_available_without_transformers(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "transformers" else real(name, *a))
    assert not models.family("llama").available()
    assert not models.family("lfm2").available()


def test_an_unknown_architecture_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError) as error:
        models.family("gpt9")
    assert str(error.value) == f"unknown architecture 'gpt9'; known: {tuple(models.FAMILIES)}"
    assert models.family("qwen3").name == "qwen3"


# --------------------------------------------------------------------------- configs


def test_config_is_transformers_own_class_at_the_tiny_sizes() -> None:
    config = models.config("llama")
    assert type(config) is transformers.LlamaConfig
    assert (config.hidden_size, config.vocab_size, config.num_hidden_layers) == \
        (64, models.VOCAB, 2)
    assert config.initializer_range == 0.02
    assert models.config("lfm2").initializer_range == 0.05
    assert type(models.config("mamba2")) is transformers.Mamba2Config


def test_another_hidden_size_for_an_attention_family() -> None:
    config = models.config("qwen2", hidden_size=256)
    assert (config.hidden_size, config.intermediate_size, config.num_attention_heads) == \
        (256, 512, 4)
    assert config.hidden_size // config.num_attention_heads == 64
    assert models.config("qwen2", hidden_size=64).intermediate_size == 128
    # the family's own sizes are not changed by it
    assert models.family("qwen2").sizes["hidden_size"] == 64


def test_another_hidden_size_for_a_hybrid_is_refused() -> None:
    with pytest.raises(ValueError) as error:
        models.config("lfm2", hidden_size=128)
    assert str(error.value) == (f"hidden_size 128: only the attention architectures "
                                f"{models.ARCHITECTURES} come in other sizes")


@pytest.fixture
def made_up(monkeypatch) -> str:
    """A family whose config class the installed transformers lacks (in a copy of FAMILIES)."""
    family = models.Family("made_up", "NoSuchConfigClass", "attention", {}, packs=False)
    monkeypatch.setattr(models, "FAMILIES", {**models.FAMILIES, "made_up": family})
    return "made_up"


def test_a_family_transformers_lacks_is_refused(made_up) -> None:
    with pytest.raises(ValueError) as error:
        models.config(made_up)
    assert str(error.value) == (f"architecture 'made_up' needs transformers' NoSuchConfigClass, "
                                f"which transformers {transformers.__version__} does not have")


# --------------------------------------------------------------------------- tiny models


def test_a_tiny_model_is_fixed_weights_in_eval_mode_without_gradients() -> None:
    before = torch.random.get_rng_state()
    model = models.tiny_model.__wrapped__("llama", "eager")
    assert torch.equal(torch.random.get_rng_state(), before)  # the global RNG untouched
    again = models.tiny_model.__wrapped__("llama", "eager")
    assert same_weights(model, again)
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    assert model.config._attn_implementation == "eager"
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in model.parameters())
    other_seed = models.tiny_model.__wrapped__("llama", "eager", seed=1)
    assert not same_weights(model, other_seed)
    assert same_weights(model, models.tiny_model.__wrapped__("llama", "sdpa", seed=0))


def test_a_tiny_model_in_another_dtype_has_the_float32_weights_cast() -> None:
    model = models.tiny_model.__wrapped__("qwen3", "sdpa", dtype=torch.bfloat16)
    float32 = models.tiny_model.__wrapped__("qwen3", "sdpa")
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert same_weights(model, float32.to(torch.bfloat16))
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    assert model.config._attn_implementation == "sdpa"


def test_tiny_model_is_cached_per_arguments() -> None:
    assert models.tiny_model("llama", "eager") is models.tiny_model("llama", "eager")


def test_another_hidden_size_builds_that_model() -> None:
    model = models.tiny_model.__wrapped__("llama", "eager", hidden_size=128)
    assert model.config.hidden_size == 128


def test_an_attention_implementation_is_checked() -> None:
    with pytest.raises(ValueError) as error:
        models.tiny_model.__wrapped__("llama", "flash")
    assert str(error.value) == ("unknown attention implementation 'flash'; known: "
                                f"{models.GPU_ATTENTION}")
    with pytest.raises(ValueError) as error:
        models.tiny_model.__wrapped__("mamba2", "sdpa")
    assert str(error.value) == "mamba2 is built with attention ('eager',) only, not 'sdpa'"
    with pytest.raises(ValueError) as error:
        models.tiny_model.__wrapped__("lfm2", "flex_attention")
    assert str(error.value) == ("lfm2 is built with attention ('eager', 'sdpa') only, not "
                                "'flex_attention'")


def test_flex_attention_is_accepted_for_the_attention_families() -> None:
    model = models.tiny_model.__wrapped__("qwen2", "flex_attention")
    assert model.config._attn_implementation == "flex_attention"


def test_a_trainable_model_has_the_same_weights_and_gradients() -> None:
    spec = ModelSpec("llama", "eager")
    trainable = models.trainable_model(spec)
    assert trainable is models.trainable_model(ModelSpec("llama", "eager"))
    assert trainable is not spec.build()
    assert all(p.requires_grad for p in trainable.parameters())
    assert not trainable.training
    assert same_weights(trainable, spec.build())
    assert not any(p.requires_grad for p in spec.build().parameters())  # the shared one stays
    half = models.trainable_model(ModelSpec("llama", "eager", "bfloat16"))
    assert all(p.dtype == torch.bfloat16 for p in half.parameters())
    assert models.trainable_model(ModelSpec("llama", "sdpa")).config._attn_implementation == \
        "sdpa"
    on_meta = models.trainable_model(ModelSpec("llama", "eager", device="meta"))
    assert all(p.device.type == "meta" for p in on_meta.parameters())


# --------------------------------------------------------------------------- specs


def test_a_spec_names_builds_and_moves_its_model() -> None:
    spec = ModelSpec("qwen3", "eager", "bfloat16")
    assert str(spec) == "qwen3-eager-bfloat16-cpu"
    assert spec.torch_dtype is torch.bfloat16
    assert spec.build() is models.tiny_model("qwen3", "eager", dtype=torch.bfloat16,
                                             device="cpu")
    moved = spec.on(torch.device("meta"))
    assert moved == ModelSpec("qwen3", "eager", "bfloat16", "meta") and moved.device == "meta"
    assert spec.device == "cpu" and ModelSpec("llama", "sdpa").dtype == "float32"
    assert hash(spec) == hash(ModelSpec("qwen3", "eager", "bfloat16"))


def test_a_spec_packs_as_its_family_does() -> None:
    assert ModelSpec("llama", "sdpa").packs
    assert not ModelSpec("lfm2", "sdpa").packs
    assert not ModelSpec("mamba2", "eager").packs


def test_specs_are_every_architecture_by_attention_for_each_device_and_dtype() -> None:
    assert [str(s) for s in models.specs()] == [
        f"{arch}-{attn}-float32-cpu" for arch in ("llama", "qwen2", "qwen3")
        for attn in ("eager", "sdpa")]
    found = models.specs(("cpu", "meta"), ("float32", "bfloat16"), ("mamba2", "llama"))
    assert [str(s) for s in found] == [
        f"{arch}-{attn}-{dtype}-{device}" for device in ("cpu", "meta")
        for dtype in ("float32", "bfloat16")
        for arch, attn in (("mamba2", "eager"), ("llama", "eager"), ("llama", "sdpa"))]


def test_specs_leave_out_what_transformers_lacks(made_up) -> None:
    assert [s.arch for s in models.specs(architectures=(made_up, "mamba2"))] == ["mamba2"]


def test_hybrid_specs_are_the_families_that_do_not_pack() -> None:
    found = models.hybrid_specs(("meta",), ("bfloat16",))
    assert {s.arch for s in found} == {name for name, f in models.FAMILIES.items()
                                       if not f.packs}
    assert all(not s.packs and s.device == "meta" and s.dtype == "bfloat16" for s in found)
    assert [s.attn for s in found if s.arch == "mamba2"] == ["eager"]


def test_cuda_specs_only_with_a_gpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert models.cuda_specs() == models.specs(("cuda",), ("float32", "bfloat16"))
    assert {s.dtype for s in models.cuda_specs()} == {"float32", "bfloat16"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert models.cuda_specs() == []


# --------------------------------------------------------------------------- cases


def test_a_model_case_calls_with_the_built_model_first() -> None:
    case = ModelCase((1, 2), {"k": 3}, "lbl", ModelSpec("llama", "eager"))
    got = case.call(lambda model, *args, **kwargs: (model, args, kwargs))
    assert got[0] is case.model.build() and got[1:] == ((1, 2), {"k": 3})
    assert ModelCase().model == ModelSpec("llama", "sdpa")


def test_a_model_case_replaced_or_moved_keeps_its_model_and_label() -> None:
    case = ModelCase((1, 2), {"k": 3}, "lbl", ModelSpec("qwen2", "eager"))
    assert case.replace(7, j=4) == ModelCase((7,), {"k": 3, "j": 4}, "lbl", case.model)
    assert case.replace(k=5) == ModelCase((1, 2), {"k": 5}, "lbl", case.model)
    assert case.kwargs == {"k": 3}
    assert case.on("meta") == ModelCase((1, 2), {"k": 3}, "lbl",
                                        ModelSpec("qwen2", "eager", "float32", "meta"))


def test_a_model_case_prints_its_model() -> None:
    case = ModelCase((1,), {"a": 2}, "lbl", ModelSpec("qwen3", "eager"))
    assert repr(case) == "ModelCase(model=qwen3-eager-float32-cpu, Case(1, a=2))"
    assert case.short() == "model=qwen3-eager-float32-cpu [lbl] Case(1, a=2)"
    long = ModelCase(("x" * 50,), {}, "", ModelSpec("llama", "sdpa"))
    assert long.short(10) != long.short()
    assert long.short(10) == "model=llama-sdpa-float32-cpu " + models.Case(long.args).short(10)
    for n in (297, 298, 299):  # reprs of 299 to 301 characters: Case.short's default cut
        given = ModelCase(("x" * n,), {}, "", ModelSpec("llama", "sdpa"))
        assert given.short() == "model=llama-sdpa-float32-cpu " + models.Case(given.args).short()
    assert case.as_call("f") == "f(<tiny qwen3-eager-float32-cpu model>, 1, a=2)"
    assert ModelCase((), {"a": (1, 2)}).as_call("g") == \
        "g(<tiny llama-sdpa-float32-cpu model>, a=(1, 2))"
    assert ModelCase().as_call("g") == "g(<tiny llama-sdpa-float32-cpu model>)"
