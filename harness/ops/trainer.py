"""Registry records for `trainer` (spec: trainer.md): the divisible batch-size multiple, padding
a batch with synthetic samples, selecting its real rows, and step-wise advantage broadcast."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from tensordict import TensorDict

from batchproof import blocks as hs
from batchproof import replay
from batchproof.compare import assert_identical
from batchproof.ops.rl_batch import picture as rl_batch_picture
from batchproof.reference import trainer as _reference
from batchproof.reference.rl_batch import build_rl_batch
from batchproof.registry import BadCase, Case, OpInfo, Pin, Property, register

MAX_ROWS = 8
MAX_PART = 6
TOKEN_FIELDS = ("input_ids", "attention_mask", "position_ids")
REPLAY_FIELDS = _reference.REPLAY_FIELDS  # routes, their mask, support: padded as no token


def _assert(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _bits(t: torch.Tensor) -> torch.Tensor:
    view = {torch.float32: torch.int32, torch.float64: torch.int64}.get(t.dtype)
    return t.contiguous().view(view) if view is not None else t


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


# --------------------------------------------------------------------------- required_multiple


MINI_SIZES = st.one_of(st.integers(1, 16), st.sampled_from([15, 16, 12, 6]))
"""Mini-batch sizes 1-16; a third of them (Hypothesis' integers favour 1 and 2, which divide
almost anything) from sizes with factors dp 1-8 rarely has."""


@st.composite
def required_multiple_cases(draw) -> Case:
    """dp 1-8 and a regime: a critic-only step (`actor_updates=False` with an actor mini-batch
    size, which must not count), an actor step (a mini-batch size and n >= 2 samples per prompt,
    which it must count), or each keyword present or not. The regimes that need a keyword come
    first: Hypothesis draws the first of `sampled_from`'s choices most often."""
    kwargs = {}
    regime = draw(st.sampled_from(["critic_only", "actor", "any"]))
    for name in ("mini_batch_size", "critic_mini_batch_size"):
        if (regime != "any" and name == "mini_batch_size") or draw(st.booleans()):
            kwargs[name] = draw(MINI_SIZES)
    if regime == "actor":
        kwargs["n"] = draw(st.integers(2, 8))
    elif draw(st.booleans()):
        kwargs["n"] = draw(st.integers(1, 8))
    if regime == "critic_only":
        kwargs["actor_updates"] = False
    elif draw(st.booleans()):
        kwargs["actor_updates"] = draw(st.booleans()) or regime == "actor"
    return Case((draw(st.integers(1, 8)),), kwargs)


@st.composite
def bad_required_multiple_cases(draw, *, valid: st.SearchStrategy[Case] | None = None
                                ) -> BadCase:
    """One defect on dp_size 2 (no other argument), or on a call `valid` draws."""
    name = draw(st.sampled_from(["dp_size", "mini_batch_size", "critic_mini_batch_size", "n",
                                 "actor_updates"]))
    good = draw(valid) if valid is not None else Case((2,))
    if name == "actor_updates":  # a flag, not a size: 1 and None are not bools
        value = draw(st.sampled_from([1, None, "yes"]))
        return BadCase(hs.with_argument(good, ("dp_size",), name, value), TypeError,
                       f"actor_updates={value!r}")
    value = draw(st.sampled_from([0, -1, 2.0, True]))
    raises = ValueError if isinstance(value, int) and not isinstance(value, bool) else TypeError
    return BadCase(hs.with_argument(good, ("dp_size",), name, value), raises,
                   f"{name}={value!r}")


def _sizes(case: Case) -> list[int]:
    """Every size the batch must split into evenly."""
    n = case.kwargs.get("n", 1)
    sizes = [case.args[0]]
    if case.kwargs.get("critic_mini_batch_size") is not None:
        sizes.append(case.kwargs["critic_mini_batch_size"] * n)
    if case.kwargs.get("actor_updates", True) and case.kwargs.get("mini_batch_size") is not None:
        sizes.append(case.kwargs["mini_batch_size"] * n)
    return sizes


def prop_divisible(case: Case, multiple) -> None:
    """The multiple splits into DP shards and into every updating model's mini-batches."""
    _assert(type(multiple) is int and multiple >= 1, f"{multiple!r} is not a positive int")
    for size in _sizes(case):
        _assert(multiple % size == 0, f"{multiple} is not a multiple of {size}")


def prop_least(case: Case, multiple) -> None:
    """No smaller common multiple: dividing by any prime factor breaks divisibility."""
    for p in _prime_factors(multiple):
        smaller = multiple // p
        _assert(any(smaller % size for size in _sizes(case)),
                f"{smaller} already divides by {_sizes(case)}: {multiple} is not the least")


def _prime_factors(value: int) -> list[int]:
    factors, p = [], 2
    while p * p <= value:
        while value % p == 0:
            factors.append(p)
            value //= p
        p += 1
    return factors + ([value] if value > 1 else [])


def _expect(literal):
    def expect(case: Case, output) -> None:
        _assert(output == literal, f"expected {literal}, got {output}")
    return expect


MULTIPLE_PINS = [
    Pin("dp2_mini15_n8", Case((2,), {"mini_batch_size": 15, "n": 8}),
        "spec example: mini-batch sizes count prompts, n samples each", _expect(120)),
    Pin("critic_only_when_actor_frozen",
        Case((4,), {"mini_batch_size": 3, "critic_mini_batch_size": 2, "n": 2,
                    "actor_updates": False}),
        "a step without actor update only needs the critic's mini-batches", _expect(4)),
    Pin("dp_zero", BadCase(Case((0,)), ValueError, "dp_size < 1"), "sizes must be >= 1"),
]

# --------------------------------------------------------------------------- batches


@st.composite
def trainer_batches(draw, layouts: tuple[str, ...] = ("left", "two_segment"),
                    prompt_room: int = 1) -> TensorDict:
    """An `rl_batch` batch in either layout with the fields trainers add: per-sample floats,
    per-token advantages, integer uids, sometimes 3-D (multi-axis RoPE) position ids and an
    existing `is_padding`. The first row has a prompt of at least `prompt_room` tokens and a
    response (room for a padding sample of `2 * prompt_room - 1` tokens in both layouts).

    Structure is drawn by Hypothesis; contents (token ids, floats: these ops copy them, never
    read them) come from one drawn seed, which keeps an example at a few milliseconds.
    """
    layout = draw(st.sampled_from(layouts))
    pairs = draw(hs.length_pairs(max_rows=MAX_ROWS, max_prompt=MAX_PART, max_response=MAX_PART))
    p0, r0 = pairs[0]
    pairs[0] = (max(p0, prompt_room), max(r0, 1))  # room for a padding sample, both layouts
    p_lens, r_lens = [p for p, _ in pairs], [r for _, r in pairs]
    gen = draw(hs.generators())
    kwargs = {"pad_token_id": draw(st.sampled_from([0, 1, 49])), "layout": layout}
    if draw(st.booleans()):
        kwargs["rewards"] = _float_rows(gen, r_lens)
    if draw(st.booleans()):
        kwargs["logprobs"] = _float_rows(gen, r_lens)
    td = build_rl_batch(_token_rows(gen, p_lens), _token_rows(gen, r_lens), **kwargs)
    return _with_trainer_fields(td, gen, draw(st.lists(st.booleans(), min_size=5, max_size=5)),
                                draw(hs.float_dtypes()))


def _token_rows(gen: torch.Generator, lengths: list[int]) -> list[list[int]]:
    """Token ids in [0, 8): pad-id collisions are common."""
    flat = torch.randint(0, 8, (sum(lengths),), generator=gen).tolist()
    return _split(flat, lengths)


def _float_rows(gen: torch.Generator, lengths: list[int]) -> list[list[float]]:
    """float32 values, half of them from the special ones (-0.0, subnormals, huge)."""
    flat = _floats(gen, sum(lengths)).tolist()
    return _split(flat, lengths)


def _floats(gen: torch.Generator, count: int) -> torch.Tensor:
    special = torch.tensor(hs.SPECIAL_FLOATS, dtype=torch.float32)
    pick = special[torch.randint(0, len(special), (count,), generator=gen)]
    plain = torch.randn(count, generator=gen) * 100
    return torch.where(torch.rand(count, generator=gen) < 0.5, pick, plain)


def _split(flat: list, lengths: list[int]) -> list[list]:
    out, start = [], 0
    for n in lengths:
        out.append(flat[start:start + n])
        start += n
    return out


def _with_trainer_fields(td: TensorDict, gen: torch.Generator, which: list[bool],
                         dtype: torch.dtype = torch.float32) -> TensorDict:
    """Optional trainer fields; `scores` and `advantages` in `dtype` (any float dtype)."""
    batch, width = td["input_ids"].shape
    response_width = td["response_mask"].shape[1]
    scores, advantages, uid, multi_axis, flagged = which
    if scores:
        td.set("scores", _floats(gen, batch).to(dtype))
    if advantages:
        td.set("advantages", _floats(gen, batch * response_width).reshape(batch, response_width)
               .to(dtype))
    if uid:
        td.set("uid", torch.randint(0, 3, (batch,), generator=gen))
    if multi_axis:  # multi-axis RoPE: (B, 3, T), axes that differ on real rows
        pos = td["position_ids"]
        td.set("position_ids", torch.stack([pos, pos, pos + 2 * td["attention_mask"]], dim=1))
    if flagged:
        td.set("is_padding", torch.rand(batch, generator=gen) < 0.4)
    return td


def fitting_min_lengths(td: TensorDict, layout: str) -> list[int]:
    """The min_length values whose padding sample fits the batch's widths."""
    width, response_width = td["input_ids"].shape[1], td["response_mask"].shape[1]
    out = []
    for length in range(2, width + 1):
        response = length // 2 if response_width else 0
        prompt = length - response
        room = width if layout == "left" else width - response_width
        if (length if layout == "left" else prompt) <= room and response <= response_width:
            out.append(length)
    return out


@st.composite
def pad_to_multiple_cases(draw) -> Case:
    """A batch, a multiple around its size, a fitting min_length; layout and pad id from the
    batch's own entries or given explicitly.

    Hypothesis draws the first of `sampled_from`'s (and `one_of`'s) choices most often, so the
    regime that exercises the padding sample comes first: an "odd split" (two_segment, a prompt
    of 2+ tokens in the first row, an odd min_length and a multiple B does not divide: a padding
    row whose extra token, the prompt's, shows where it goes). Otherwise either layout, a
    multiple that divides B (no padding: the input comes back) first, else 2-8 or around B, and
    min_length odd, any fitting one, or absent.
    """
    odd_split = draw(st.sampled_from(["odd_split", "any"])) == "odd_split"
    td = draw(trainer_batches(layouts=("two_segment",), prompt_room=2) if odd_split
              else trainer_batches())
    batch = td.batch_size[0]
    layout = td.get_non_tensor("layout")
    around = [batch + 1, 2 * batch, batch + 2, max(batch - 1, 1)]  # sizes around multiples
    multiple = draw(st.sampled_from([batch + 1, batch + 2, 2 * batch + 1]) if odd_split else
                    st.one_of(st.sampled_from([batch, 1]), st.integers(2, 8),
                              st.sampled_from(around), st.sampled_from(around)))
    kwargs = {"eos_token_id": draw(st.sampled_from([2, 0, 49, 7]))}
    fitting = fitting_min_lengths(td, layout)[:4]
    odd = [length for length in fitting if length % 2]
    min_length = "odd" if odd_split else draw(st.sampled_from(["odd", "any", "default"]))
    if min_length == "odd" and odd:
        kwargs["min_length"] = draw(st.sampled_from(odd))
    elif min_length != "default":
        kwargs["min_length"] = draw(st.sampled_from(fitting))
    if draw(st.booleans()):  # the caller passes what the batch does not carry
        kwargs["layout"] = layout
        kwargs["pad_token_id"] = td.get_non_tensor("pad_token_id")
        td = td.exclude("layout", "pad_token_id")
    if draw(st.integers(0, 3)) == 0:  # a batch without position ids: none are padded
        td = td.exclude("position_ids")
    if draw(st.integers(0, 2)) == 0:  # router replay: routes laid out, their mask, support
        td = draw(with_replay_fields(td))
    return Case((td, multiple), kwargs)


@st.composite
def with_replay_fields(draw, td: TensorDict) -> TensorDict:
    """`td` with `routed_experts` (B, T, layers, topk) and `router_padding_mask` (B, T) as
    `build_rl_batch` lays them out (a route on each attended column, the dummy route and the
    mask on the rest), and in half of them `sample_support` (B, R, top_k): ids, then -1, on the
    response columns (what a trainer's batch carries after the rollout; pad_to_multiple copies
    real rows and never reads them)."""
    batch, width = td["input_ids"].shape
    attended = td["attention_mask"].bool()
    counts = [int(n) for n in attended.sum(1)]
    entries = [replay.as_tensor(e) for e in draw(replay.route_entries(
        counts, arrays=("torch",), min_captured=max(counts, default=0)))]
    layers, topk = entries[0].shape[1:]
    routes = replay.dummy_slot(layers, topk, entries[0].dtype).expand(
        batch, width, layers, topk).clone()
    for i, entry in enumerate(entries):
        routes[i, attended[i]] = entry
    td = td.clone(recurse=False)
    td.set("routed_experts", routes)
    td.set("router_padding_mask", ~attended)
    if draw(st.booleans()):
        response = td["response_mask"].bool()
        rows = [replay.as_tensor(e) for e in draw(replay.support_entries(
            [int(n) for n in response.sum(1)], arrays=("torch",)))]
        support = torch.full((batch, response.shape[1], rows[0].shape[1]), -1,
                             dtype=rows[0].dtype)
        for i, row in enumerate(rows):
            support[i, response[i]] = row
        td.set("sample_support", support)
    return td


@st.composite
def bad_pad_to_multiple_cases(draw, *, valid: st.SearchStrategy[Case] | None = None
                              ) -> BadCase:
    """One defect on a valid call (`valid`, default `pad_to_multiple_cases()`)."""
    # the defect before the valid call: drawn after it, Hypothesis favours the first kind
    kind = draw(st.sampled_from(["multiple_zero", "multiple_type", "no_layout", "uids_list",
                                 "nested", "min_length_small", "min_length_wide", "eos_type",
                                 "is_padding_dtype", "jagged", "layout", "not_td",
                                 "no_batch_dim", "no_input_ids", "field_shape",
                                 "replay_dtype", "replay_shape"]))
    good = draw(valid if valid is not None else pad_to_multiple_cases())
    td, multiple = good.args
    kwargs = dict(good.kwargs)
    batch = td.batch_size[0]
    if kind == "layout":
        return BadCase(Case((td, multiple), kwargs | {"layout": "right"}), ValueError,
                       "unknown layout")
    if kind == "not_td":
        return BadCase(Case((td.to_dict(), multiple), kwargs), TypeError, "a dict of tensors")
    if kind == "no_batch_dim":
        return BadCase(Case((td[0], multiple), kwargs), ValueError, "one row: no batch dimension")
    if kind == "no_input_ids":
        return BadCase(Case((td.exclude("input_ids"), multiple), kwargs), ValueError,
                       "no input_ids")
    if kind == "field_shape":  # a token field or response_mask one column too wide or 1-D
        key = draw(st.sampled_from([k for k in ("input_ids", "attention_mask", "position_ids",
                                                "response_mask") if k in td.keys()]))
        value = td[key]
        wide = torch.zeros((*value.shape[:-1], td["input_ids"].shape[1] + 1), dtype=value.dtype)
        td = td.clone()
        td.set(key, wide if draw(st.booleans()) else value.reshape(batch, -1)[:, 0])
        return BadCase(Case((td, multiple), kwargs), ValueError, f"{key} has the wrong shape")
    if kind in ("replay_dtype", "replay_shape"):
        return _replay_field_defect(draw, kind, td, multiple, kwargs)
    if kind == "multiple_zero":
        return BadCase(Case((td, draw(st.integers(-2, 0))), kwargs), ValueError, "multiple < 1")
    if kind == "multiple_type":
        return BadCase(Case((td, 2.0), kwargs), TypeError, "multiple not an int")
    if kind == "no_layout":
        kwargs.pop("layout", None)
        return BadCase(Case((td.exclude("layout"), multiple), kwargs), ValueError,
                       "no layout given or stored")
    if kind == "eos_type":
        return BadCase(Case((td, multiple), kwargs | {"eos_token_id": None}), TypeError,
                       "eos_token_id not an int")
    if kind == "min_length_small":
        return BadCase(Case((td, multiple), kwargs | {"min_length": 1}), ValueError,
                       "min_length < 2")
    if kind == "min_length_wide":
        wide = td["input_ids"].shape[1] + 1
        return BadCase(Case((td, multiple), kwargs | {"min_length": wide}), ValueError,
                       "min_length wider than the batch")
    td = td.clone()
    if kind == "uids_list":
        td.set_non_tensor("uids", [f"u{i}" for i in range(batch)])
        why = "uids stored as a non-tensor per-row list"
    elif kind == "nested":
        td.set("extra", TensorDict({"x": torch.zeros(batch)}, batch_size=[batch]))
        why = "a nested TensorDict field"
    elif kind == "jagged":
        td.set("ragged", torch.nested.nested_tensor([torch.zeros(i + 1) for i in range(batch)],
                                                    layout=torch.jagged))
        why = "a jagged field"
    else:
        td.set("is_padding", torch.zeros(batch, dtype=torch.int64))
        why = "is_padding is not bool"
    return BadCase(Case((td, multiple), kwargs), ValueError, why)


def _replay_field_defect(draw, kind: str, td: TensorDict, multiple, kwargs) -> BadCase:
    """A router-replay field of a dtype (TypeError) or a shape (ValueError) the contract does
    not take; the fields are added first when the batch has none."""
    if "routed_experts" not in td.keys():
        td = draw(with_replay_fields(td))
    key = draw(st.sampled_from([k for k in REPLAY_FIELDS if k in td.keys()]))
    value = td[key]
    td = td.clone(recurse=False)
    if kind == "replay_dtype":
        wrong = {"routed_experts": torch.float32, "router_padding_mask": torch.int64,
                 "sample_support": torch.uint8}[key]
        td.set(key, value.to(wrong))
        return BadCase(Case((td, multiple), kwargs), TypeError, f"{key} is {wrong}")
    td.set(key, value[:, :-1] if value.shape[1] else value.unsqueeze(-1))
    return BadCase(Case((td, multiple), kwargs), ValueError, f"{key} has the wrong shape")


def _td_on(case: Case, device: str) -> Case:
    return Case((case.args[0].to(device), *case.args[1:]), case.kwargs)


# --------------------------------------------------------------------------- pad properties


class _Padded:
    """Facts about one pad_to_multiple call: input, output, the count of padding rows."""

    def __init__(self, case: Case, out: TensorDict) -> None:
        self.td, self.multiple = case.args
        self.out = out
        self.batch = self.td.batch_size[0]
        self.count = out.batch_size[0] - self.batch
        self.layout = case.kwargs.get("layout") or self.td.get_non_tensor("layout")
        pad = case.kwargs.get("pad_token_id")
        self.pad = pad if pad is not None else self.td.get_non_tensor("pad_token_id")
        self.eos = case.kwargs["eos_token_id"]
        self.min_length = case.kwargs.get("min_length", 2)

    def tensor_keys(self) -> list[str]:
        return [k for k in self.td.keys() if not self.td.is_non_tensor(k)]

    def padding(self, key: str) -> torch.Tensor:
        return self.out[key][self.batch:]


def prop_batch_size(case: Case, out) -> None:
    """B' % multiple == 0 and 0 <= B' - B < multiple; with B' == B no field is added."""
    facts = _Padded(case, out)
    size = out.batch_size[0]
    _assert(size % facts.multiple == 0 and 0 <= facts.count < facts.multiple,
            f"B'={size} for B={facts.batch}, multiple {facts.multiple}")
    if facts.count == 0:
        _assert(set(out.keys()) == set(facts.td.keys()),
                f"B == B' but keys changed: {sorted(set(out.keys()) ^ set(facts.td.keys()))}")


def prop_real_rows_unchanged(case: Case, out) -> None:
    """The first B rows of every field are bit-identical to the input; entries unchanged."""
    facts = _Padded(case, out)
    for key in facts.td.keys():
        if facts.td.is_non_tensor(key):
            _assert(out.get_non_tensor(key) == facts.td.get_non_tensor(key), f"{key} changed")
        else:
            _assert(_same_bits(out[key][:facts.batch], facts.td[key]), f"real rows of {key} "
                    "differ from the input")


def prop_field_shapes(case: Case, out) -> None:
    """Every field keeps its dtype and trailing shape; is_padding is bool (B',)."""
    facts = _Padded(case, out)
    for key in facts.tensor_keys():
        a, b = facts.td[key], out[key]
        _assert(a.dtype == b.dtype and a.shape[1:] == b.shape[1:],
                f"{key}: {tuple(a.shape[1:])} {a.dtype} became {tuple(b.shape[1:])} {b.dtype}")
    if facts.count:
        _assert(out["is_padding"].dtype == torch.bool and out["is_padding"].dim() == 1,
                "is_padding must be a bool (B',) tensor")


def prop_is_padding_flags(case: Case, out) -> None:
    """is_padding: the input's flags (False if absent) for real rows, True for padding rows."""
    facts = _Padded(case, out)
    if facts.count == 0:
        return
    before = (facts.td["is_padding"].tolist() if "is_padding" in facts.td.keys()
              else [False] * facts.batch)
    _assert(out["is_padding"].tolist() == before + [True] * facts.count,
            f"is_padding {out['is_padding'].tolist()}")


def prop_zero_masked_loss(case: Case, out) -> None:
    """Padding rows contribute exactly 0 to any loss masked by loss_mask or response_mask."""
    facts = _Padded(case, out)
    if facts.count == 0:
        return
    masks = [facts.padding(k).float() for k in ("loss_mask", "response_mask") if k in out.keys()]
    per_token = [k for k in facts.tensor_keys() if out[k].is_floating_point()
                 and out[k].shape[1:] == out["response_mask"].shape[1:]]
    for mask in masks:
        _assert(bool((mask == 0).all()), "a padding row has a non-zero loss/response mask")
        for key in per_token:
            _assert(float((facts.padding(key) * mask).sum()) == 0.0,
                    f"padding rows contribute to a loss over {key}")


def prop_padding_sample_valid(case: Case, out) -> None:
    """A padding row is a minimal valid sample in the batch's layout: min_length eos tokens
    (ceil/2 prompt, floor/2 response), pad elsewhere, positions from its mask on every axis."""
    facts = _Padded(case, out)
    if facts.count == 0:
        return
    width, response_width = out["input_ids"].shape[1], out["response_mask"].shape[1]
    length = facts.min_length
    response = length // 2 if response_width else 0
    start = (width - length if facts.layout == "left"
             else width - response_width - (length - response))
    mask = [1 if start <= j < start + length else 0 for j in range(width)]
    ids = [facts.eos if m else facts.pad for m in mask]
    positions = [max(sum(mask[:j + 1]) - 1, 0) for j in range(width)]
    for row in range(facts.count):
        _assert(facts.padding("input_ids")[row].tolist() == ids,
                f"padding row input_ids {facts.padding('input_ids')[row].tolist()} != {ids}")
        if "attention_mask" in out.keys():
            _assert(facts.padding("attention_mask")[row].tolist() == mask,
                    f"padding row attention_mask {facts.padding('attention_mask')[row].tolist()}")
        if "position_ids" in out.keys():
            got = facts.padding("position_ids")[row].reshape(-1, width).tolist()
            _assert(all(axis == positions for axis in got),
                    f"padding row position_ids {got} != {positions} on every axis")


def prop_other_fields_zero(case: Case, out) -> None:
    """Every field but the token fields and is_padding is +0 (bitwise) on padding rows."""
    facts = _Padded(case, out)
    if facts.count == 0:
        return
    for key in facts.tensor_keys():
        if key in TOKEN_FIELDS or key in REPLAY_FIELDS or key == "is_padding":
            continue
        value = facts.padding(key)
        _assert(_same_bits(value, torch.zeros_like(value)),
                f"padding rows of {key} are not +0: {value.tolist()}")


def prop_padding_rows_replay_nothing(case: Case, out) -> None:
    """Router replay on padding rows: every slot holds the dummy route 0 .. topk-1 (`topk`
    distinct experts: never all zeros, verl #7524) and is masked, and the support is all -1."""
    facts = _Padded(case, out)
    if facts.count == 0:
        return
    if "routed_experts" in facts.tensor_keys():
        routes = facts.padding("routed_experts")
        dummy = torch.arange(routes.shape[-1], dtype=routes.dtype, device=routes.device)
        _assert(routes.dtype == case.args[0]["routed_experts"].dtype, "routes changed dtype")
        _assert(bool((routes == dummy).all()), f"padding rows' routes {routes.tolist()} are "
                "not the dummy route on every slot")
    if "router_padding_mask" in facts.tensor_keys():
        mask = facts.padding("router_padding_mask")
        _assert(mask.dtype == torch.bool and bool(mask.all()),
                f"padding rows' router_padding_mask {mask.tolist()} is not all True")
    if "sample_support" in facts.tensor_keys():
        support = facts.padding("sample_support")
        _assert(bool((support == -1).all()), f"padding rows' support {support.tolist()} != -1")


def prop_real_rows_roundtrip(case: Case, out) -> None:
    """For a batch without padding rows, real_rows(pad_to_multiple(td)) equals td on its keys."""
    td = case.args[0]
    if "is_padding" in td.keys() and bool(td["is_padding"].any()):
        return
    back = _reference.real_rows(out)
    assert_identical(td, back.select(*td.keys()) if set(back.keys()) != set(td.keys()) else back)


def padding_picture(td) -> dict[str, list[str]]:
    """rl_batch's picture (`.` pad, `p` prompt, `r` response) with padding rows drawn in `e`."""
    families = rl_batch_picture(td)
    if "is_padding" in td.keys():
        for rows in families.values():
            for i, padding in enumerate(td["is_padding"].tolist()):
                if padding:
                    rows[i] = "".join("." if c == "." else "e" for c in rows[i])
    return families


# --------------------------------------------------------------------------- pad pins


def _batch(prompts, responses, **kwargs) -> TensorDict:
    return build_rl_batch(prompts, responses, pad_token_id=0, **kwargs)


def _multi_axis(td: TensorDict) -> TensorDict:
    pos = td["position_ids"]
    td.set("position_ids", torch.stack([pos, pos, pos + 2 * td["attention_mask"]], dim=1))
    return td


def _flagged(td: TensorDict, flags: list[bool]) -> TensorDict:
    td.set("is_padding", torch.tensor(flags, dtype=torch.bool))
    return td


def _with_uids(td: TensorDict) -> TensorDict:
    td.set_non_tensor("uids", [f"u{i}" for i in range(td.batch_size[0])])
    return td


def _expect_padding_row(**fields):
    def expect(case: Case, out) -> None:
        for key, want in fields.items():
            got = out[key][-1].tolist()
            _assert(got == want, f"padding row {key}: {got} != {want}")
    return expect


PAD_PINS = [
    Pin("response_mask_other_shape",
        Case((_batch([[1, 2, 3], [4]], [[5, 6], [7]]), 3), {"eos_token_id": 9}),
        "padding rows built with the sequence width for response fields (verl #5969): the "
        "padding row's response_mask must be (R,) zeros, not a (T,) row",
        _expect_padding_row(input_ids=[0, 0, 0, 9, 9], attention_mask=[0, 0, 0, 1, 1],
                            response_mask=[0, 0], loss_mask=[0.0, 0.0])),
    Pin("verl_7524_padding_rows_zero_routes",
        Case((_batch([[1, 2], [3]], [[4], [5, 6]], routed_experts=[
            torch.tensor([[[2, 3]], [[3, 1]], [[1, 2]]], dtype=torch.int16),
            torch.tensor([[[3, 2]], [[2, 0]]], dtype=torch.int16)], sample_support=[
            torch.tensor([[5, -1]], dtype=torch.int32),
            torch.tensor([[7, 8], [9, -1]], dtype=torch.int32)]), 3), {"eos_token_id": 9}),
        "padding rows' routes all zeros (verl 0.9.1's build_padding_routed_experts, verl "
        "#7524): every slot of a padding row holds the dummy route 0 .. topk-1 and is masked, "
        "and its support is -1",
        _expect_padding_row(routed_experts=[[[0, 1]]] * 3, router_padding_mask=[True] * 3,
                            sample_support=[[-1, -1]] * 2)),
    Pin("multi_axis_position_ids",
        Case((_multi_axis(_batch([[1, 2], [3]], [[4], [5, 6]])), 4), {"eos_token_id": 9}),
        "1-D position_ids for a padding row in a batch of (B, 3, T) multi-axis RoPE positions",
        _expect_padding_row(position_ids=[[0, 0, 1]] * 3)),
    Pin("duplicated_real_rows",
        Case((_batch([[1, 2], [3], [4, 5]], [[6], [7, 8], [9]], rewards=[1.0, 2.0, 3.0]), 4),
             {"eos_token_id": 2, "min_length": 3}),
        "padding by duplicating real rows biases group advantages, gradients and metrics: a "
        "padding row is synthetic (eos tokens, zero rewards, is_padding)",
        _expect_padding_row(input_ids=[2, 2, 2], rewards=[0.0, 0.0], is_padding=True)),
    Pin("two_segment_context_parallel",
        Case((_batch([[1, 2, 3], [4]], [[5, 6], [7, 8, 9]], layout="two_segment"), 4),
             {"eos_token_id": 9, "min_length": 4}),
        "two_segment layout: 2 prompt tokens right-aligned before the response columns, 2 "
        "response tokens left-aligned after them",
        _expect_padding_row(input_ids=[0, 9, 9, 9, 9, 0], attention_mask=[0, 1, 1, 1, 1, 0],
                            position_ids=[0, 0, 1, 2, 3, 3], response_mask=[0, 0, 0])),
    Pin("two_segment_odd_min_length",
        Case((_batch([[1, 2, 3], [4]], [[5, 6], [7, 8, 9]], layout="two_segment"), 4),
             {"eos_token_id": 9, "min_length": 3}),
        "an odd min_length gives the prompt the extra token: ceil(3/2) = 2 prompt tokens, "
        "floor(3/2) = 1 response token (columns [P - 2, P + 1) = [1, 4))",
        _expect_padding_row(input_ids=[0, 9, 9, 9, 0, 0], attention_mask=[0, 1, 1, 1, 0, 0],
                            position_ids=[0, 0, 1, 2, 2, 2], response_mask=[0, 0, 0])),
    Pin("existing_is_padding_extended",
        Case((_flagged(_batch([[1], [2], [3]], [[4], [5], [6]]), [False, True, False]), 2),
             {"eos_token_id": 2}),
        "a batch padded before (or after a shuffle) keeps its flags: extend, never overwrite",
        lambda case, out: _assert(out["is_padding"].tolist() == [False, True, False, True],
                                  f"is_padding {out['is_padding'].tolist()}")),
    Pin("uids_as_non_tensor_list",
        BadCase(Case((_with_uids(_batch([[1], [2], [3]], [[4], [5], [6]])), 2),
                     {"eos_token_id": 2}), ValueError, "uids: a per-row list"),
        "a non-tensor per-row list cannot be padded faithfully: reject, never half-pad"),
    Pin("multiple_zero",
        BadCase(Case((_batch([[1]], [[2]]), 0), {"eos_token_id": 2}), ValueError,
                "multiple < 1"), "a multiple must be >= 1"),
    Pin("eos_token_id_beyond_int64",
        BadCase(Case((_batch([[1]], [[2]]), 2), {"eos_token_id": 2**63}), ValueError,
                "eos_token_id does not fit int64"),
        "a token id the int64 input_ids cannot hold is a ValueError naming it (the impl used to "
        "raise torch's RuntimeError, the reference an OverflowError-like ValueError from torch)"),
    Pin("without_position_ids",
        Case((_batch([[1, 2], [3]], [[4], [5, 6]]).exclude("position_ids"), 3),
             {"eos_token_id": 9}),
        "a batch without position_ids gets padding rows without them (nothing is invented)",
        _expect_padding_row(input_ids=[0, 9, 9], attention_mask=[0, 1, 1])),
    *[Pin(name, BadCase(Case((td, 4), {"eos_token_id": 2} | kwargs), raises, why), why)
      for name, td, kwargs, raises, why in [
          ("td_is_a_dict", {"input_ids": torch.zeros(2, 3)}, {}, TypeError, "td is a dict"),
          ("td_without_batch_dimension", TensorDict({"input_ids": torch.zeros(2, 3)}, []), {},
           ValueError, "td has no batch dimension"),
          ("unknown_layout", _batch([[1]], [[2]]), {"layout": "right"}, ValueError,
           "layout is neither left nor two_segment"),
          ("min_length_one", _batch([[1]], [[2]]), {"min_length": 1}, ValueError,
           "a padding sample of one token has no prompt and response"),
          ("no_input_ids", _batch([[1]], [[2]]).exclude("input_ids"), {}, ValueError,
           "td has no input_ids"),
          ("nested_tensordict_field", _batch([[1]], [[2]]).set(
              "extra", TensorDict({"x": torch.zeros(1)}, [1])), {}, ValueError,
           "a nested TensorDict field"),
          ("input_ids_1d", _batch([[1]], [[2]]).set("input_ids", torch.zeros(1)), {},
           ValueError, "input_ids is not (B, T)"),
          ("attention_mask_wider", _batch([[1]], [[2]]).set("attention_mask", torch.ones(1, 3)),
           {}, ValueError, "attention_mask is not the shape of input_ids"),
          ("position_ids_wider", _batch([[1]], [[2]]).set("position_ids", torch.ones(1, 3)), {},
           ValueError, "position_ids is not (B, T) or (B, C, T)"),
          ("response_mask_wider", _batch([[1]], [[2]]).set("response_mask", torch.ones(1, 3)),
           {}, ValueError, "the response width exceeds the sequence width"),
          ("response_mask_1d", _batch([[1]], [[2]]).set("response_mask", torch.ones(1)), {},
           ValueError, "response_mask is not (B, R)"),
          ("max_response_length_negative",
           _batch([[1]], [[2]]).exclude("response_mask").set_non_tensor("max_response_length", -1),
           {}, ValueError, "no response_mask and a negative max_response_length entry"),
      ]],
]

# --------------------------------------------------------------------------- real_rows


@st.composite
def real_rows_cases(draw) -> Case:
    """A batch with padding flags anywhere (after a shuffle they interleave), or none."""
    td = draw(trainer_batches())
    batch = td.batch_size[0]
    if draw(st.integers(0, 4)) == 0:
        return Case((td.exclude("is_padding"),))
    flags = draw(st.one_of(st.lists(st.booleans(), min_size=batch, max_size=batch),
                           st.integers(0, batch).map(lambda k: [False] * (batch - k) + [True] * k)))
    td.set("is_padding", torch.tensor(flags, dtype=torch.bool))
    return Case((td,))


@st.composite
def bad_real_rows_cases(draw) -> BadCase:
    """One defect on a fixed batch. No `valid=`: the call has one argument, so no two defects
    on different arguments (two_defects)."""
    td = _batch([[1], [2]], [[3], [4]])
    kind = draw(st.sampled_from(["int_flags", "not_td", "uids_list", "no_batch_dim"]))
    if kind == "int_flags":
        td.set("is_padding", torch.tensor([0, 1]))
        return BadCase(Case((td,)), ValueError, "is_padding is not bool")
    if kind == "uids_list":
        td.set("is_padding", torch.tensor([False, True]))
        return BadCase(Case((_with_uids(td),)), ValueError, "a per-row list cannot be filtered")
    if kind == "no_batch_dim":
        return BadCase(Case((TensorDict({"x": torch.zeros(2)}, batch_size=[]),)), ValueError,
                       "no batch dimension")
    return BadCase(Case(({"input_ids": torch.zeros(2, 2)},)), TypeError, "not a TensorDict")


def prop_keeps_real_rows(case: Case, out) -> None:
    """Exactly the rows with is_padding False, in order, on every field; entries kept."""
    td = case.args[0]
    batch = td.batch_size[0]
    flags = td["is_padding"].tolist() if "is_padding" in td.keys() else [False] * batch
    keep = torch.tensor([i for i, f in enumerate(flags) if not f], dtype=torch.int64)
    _assert(out.batch_size[0] == len(keep), f"{out.batch_size[0]} rows, expected {len(keep)}")
    _assert(set(out.keys()) == set(td.keys()), "keys changed")
    for key in td.keys():
        if td.is_non_tensor(key):
            _assert(out.get_non_tensor(key) == td.get_non_tensor(key), f"{key} changed")
        else:
            _assert(_same_bits(out[key], td[key][keep]), f"{key}: not the real rows")


REAL_ROWS_PINS = [
    Pin("interleaved_padding",
        Case((_flagged(_batch([[1], [2], [3], [4]], [[5], [6], [7], [8]]),
                       [True, False, True, False]),)),
        "after a shuffle padding rows sit anywhere: select by flag, never by count",
        lambda case, out: _assert(out["input_ids"].tolist() == [[2, 6], [4, 8]],
                                  f"rows {out['input_ids'].tolist()}")),
]

# --------------------------------------------------------------------------- broadcast


@st.composite
def stepwise_cases(draw) -> Case:
    """Step-wise trajectories: each trajectory's turns have growing prompts and shrinking
    responses (anti-correlated), so its steps' response columns differ; masks right-aligned
    (left layout) or left-aligned, sometimes with interior zeros; rows in any order."""
    steps = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    right_aligned = draw(st.booleans())
    lengths, owners = [], []
    for trajectory, count in enumerate(steps):
        first = draw(st.integers(0, MAX_PART))
        shrink = draw(st.lists(st.integers(0, 2), min_size=count, max_size=count))
        for k in range(count):
            lengths.append(max(first - sum(shrink[:k]), 0))
            owners.append(trajectory)
    width = max(lengths) + draw(st.integers(0, 1))
    inner = draw(st.one_of(st.just([[1] * n for n in lengths]), hs.mask_rows(lengths)))
    rows = [[0] * (width - n) + m if right_aligned else m + [0] * (width - n)
            for n, m in zip(lengths, inner)]
    order = draw(st.permutations(range(len(rows))))
    mask = torch.tensor([rows[i] for i in order], dtype=torch.int64).reshape(len(rows), width)
    mask = mask.to(draw(st.sampled_from([torch.int64, torch.int64, torch.float32, torch.bool])))
    scalars = draw(st.lists(hs.float32s(), min_size=len(steps), max_size=len(steps) + 1))
    return Case((scalars, [owners[i] for i in order], mask))


@st.composite
def bad_stepwise_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on scalars [1.0], traj_ids [0, 0] and a (2, 3) mask, or on a call `valid`
    draws; `negative` and `out_of_range` change a trajectory id (the last), `count` adds one."""
    scalars, ids, mask = draw(valid).args if valid is not None else (
        [1.0], [0, 0], torch.tensor([[0, 1, 1], [0, 0, 1]]))
    kind = draw(st.sampled_from(["out_of_range", "negative", "count", "mask_3d", "mask_value",
                                 "not_finite", "float_ids", "mask_list", "ids_2d", "ids_type",
                                 "id_type", "scalars_2d", "scalars_bool", "scalars_type",
                                 "scalar_type"]))
    last = len(ids) - 1
    if kind == "mask_list":
        return BadCase(Case((scalars, ids, mask.tolist())), TypeError, "mask is a list")
    if kind == "ids_2d":
        return BadCase(Case((scalars, torch.tensor(ids, dtype=torch.int64)[:, None], mask)),
                       ValueError, "traj_ids tensor is 2-D")
    if kind == "ids_type":
        bad = draw(st.sampled_from(["00", 0, None]))
        return BadCase(Case((scalars, bad, mask)), TypeError, "traj_ids is not a sequence")
    if kind == "id_type":
        value = draw(st.sampled_from([0.0, True, "0"]))
        return BadCase(Case((scalars, ids[:-1] + [value], mask)), TypeError,
                       f"traj_ids[{last}] is not an int")
    if kind == "scalars_2d":
        return BadCase(Case((torch.tensor([scalars], dtype=torch.float32), ids, mask)),
                       ValueError, "scalars is 2-D")
    if kind == "scalars_bool":
        values = draw(st.sampled_from([torch.tensor([True]), torch.tensor([1j])]))
        return BadCase(Case((values, ids, mask)), TypeError, f"scalars are {values.dtype}")
    if kind == "scalars_type":
        bad = draw(st.sampled_from(["1.0", 1.0, None]))
        return BadCase(Case((bad, ids, mask)), TypeError, "scalars is not a sequence")
    if kind == "scalar_type":
        value = draw(st.sampled_from([None, True, "1.0"]))
        return BadCase(Case((scalars + [value], ids, mask)), TypeError,
                       f"scalars[{len(scalars)}] is not a real number")
    if kind == "out_of_range":
        return BadCase(Case((scalars, ids[:-1] + [len(scalars)], mask)), ValueError,
                       f"traj_ids[{last}] = {len(scalars)} >= {len(scalars)} scalars")
    if kind == "negative":
        return BadCase(Case((scalars, ids[:-1] + [-1], mask)), ValueError,
                       f"traj_ids[{last}] < 0")
    if kind == "count":
        return BadCase(Case((scalars, ids + [0], mask)), ValueError,
                       f"{len(ids) + 1} ids for {len(ids)} rows")
    if kind == "mask_value" and mask.numel():
        bad = mask.to(torch.int64)  # a copy unless int64
        bad = bad.clone() if bad is mask else bad
        bad.view(-1)[-1] = 2
        return BadCase(Case((scalars, ids, bad)), ValueError, "mask holds 2")
    if kind in ("mask_3d", "mask_value"):
        return BadCase(Case((scalars, ids, mask[None])), ValueError, "mask is 3-D")
    if kind == "not_finite":
        value = draw(st.sampled_from([float("inf"), float("nan"), 1e39]))
        return BadCase(Case((scalars[:-1] + [value], ids, mask)), ValueError,
                       "a non-finite float32 scalar")
    return BadCase(Case((scalars, torch.tensor(ids, dtype=torch.float32), mask)), TypeError,
                   "float traj_ids")


def _as_tensors(case: Case) -> Case:
    scalars, ids, mask = case.args
    return Case((torch.tensor(scalars, dtype=torch.float32), torch.tensor(ids, dtype=torch.int64),
                 mask), case.kwargs)


def _stepwise_on(case: Case, device: str) -> Case:
    scalars, ids, mask = _as_tensors(case).args
    return Case((scalars.to(device), ids.to(device), mask.to(device)), case.kwargs)


def prop_support_is_mask(case: Case, adv) -> None:
    """Off the mask every entry is +0.0 bit for bit (a product would leave -0.0)."""
    _, _, mask = case.args
    _assert(adv.dtype == torch.float32 and adv.shape == mask.shape,
            f"advantages {tuple(adv.shape)} {adv.dtype}, expected {tuple(mask.shape)} float32")
    off = adv[mask == 0]
    _assert(_same_bits(off, torch.zeros_like(off)), "an entry off the mask is not +0.0")


def prop_trajectory_scalar(case: Case, adv) -> None:
    """On row i's own mask every entry equals float32(scalars[traj_ids[i]]): the rows of one
    trajectory differ only by their masks, whatever the columns of each step's response."""
    scalars, ids, mask = case.args
    values = torch.tensor(scalars, dtype=torch.float32)
    for row, trajectory in enumerate(ids):
        on = adv[row][mask[row] == 1]
        want = values[trajectory].expand(on.shape)
        _assert(_same_bits(on, want), f"row {row} (trajectory {trajectory}): {on.tolist()} "
                                      f"!= {values[trajectory].item()} on its mask")


SKYRL_STEPS = Case(([-1.5, 2.0], [0, 0, 1], torch.tensor([[0, 1, 1, 1], [0, 0, 0, 1],
                                                           [1, 1, 1, 1]])))
STEPWISE_PINS = [
    Pin("skyrl_last_step_row", SKYRL_STEPS,
        "SkyRL before #1507: advantages = last_step_advantages[traj_ids] copies the last step's "
        "masked row; with right-aligned responses the earlier step got 0 on 2 of its 3 tokens",
        lambda case, adv: _assert(adv.tolist() == [[0.0, -1.5, -1.5, -1.5], [0.0, 0.0, 0.0, -1.5],
                                                   [2.0, 2.0, 2.0, 2.0]], f"{adv.tolist()}")),
    Pin("traj_id_out_of_range",
        BadCase(Case(([1.0], [0, 1], torch.tensor([[1], [1]]))), ValueError, "traj_ids[1] = 1"),
        "an index past the scalars must not wrap or read garbage"),
    Pin("no_rows", Case(([1.0], [], torch.zeros(0, 3, dtype=torch.int64))),
        "a batch of no rows: a (0, R) float32 result, no trajectory read",
        lambda case, adv: _assert(adv.shape == (0, 3) and adv.dtype == torch.float32,
                                  f"{tuple(adv.shape)} {adv.dtype}")),
]

# --------------------------------------------------------------------------- records

REQUIRED_MULTIPLE = register(OpInfo(
    op="trainer",
    function="required_multiple",
    valid=required_multiple_cases(),
    invalid=hs.one_or_two_defects(
        bad_required_multiple_cases, required_multiple_cases(), _reference.required_multiple),
    compare=assert_identical,
    properties=[Property.of(prop_divisible),
                Property.of(prop_least)],
    pins=MULTIPLE_PINS,
    example=MULTIPLE_PINS[0].case,
    doc="the batch-size multiple for DP shards and PPO mini-batches",
))

PAD_TO_MULTIPLE = register(OpInfo(
    op="trainer",
    function="pad_to_multiple",
    valid=pad_to_multiple_cases(),
    invalid=hs.one_or_two_defects(
        bad_pad_to_multiple_cases, pad_to_multiple_cases(), _reference.pad_to_multiple),
    compare=assert_identical,
    properties=[
        Property.of(prop_batch_size),
        Property.of(prop_real_rows_unchanged),
        Property.of(prop_field_shapes),
        Property.of(prop_is_padding_flags),
        Property.of(prop_zero_masked_loss),
        Property.of(prop_padding_sample_valid),
        Property.of(prop_other_fields_zero),
        Property.of(prop_padding_rows_replay_nothing),
        Property.of(prop_real_rows_roundtrip),
    ],
    pins=PAD_PINS,
    devices=("cpu", "cuda"),
    to_device=_td_on,
    picture=padding_picture,
    example=PAD_PINS[0].case,
    doc="append synthetic padding samples up to a multiple of the batch size",
))

REAL_ROWS = register(OpInfo(
    op="trainer",
    function="real_rows",
    valid=real_rows_cases(),
    invalid=bad_real_rows_cases(),
    compare=assert_identical,
    properties=[Property.of(prop_keeps_real_rows)],
    pins=REAL_ROWS_PINS,
    devices=("cpu", "cuda"),
    to_device=lambda case, device: Case((case.args[0].to(device),), case.kwargs),
    doc="the rows every quality metric must be computed on",
))

BROADCAST_STEPWISE_ADVANTAGES = register(OpInfo(
    op="trainer",
    function="broadcast_stepwise_advantages",
    valid=stepwise_cases(),
    invalid=hs.one_or_two_defects(
        bad_stepwise_cases, stepwise_cases(), _reference.broadcast_stepwise_advantages),
    compare=assert_identical,
    properties=[
        Property.of(prop_support_is_mask),
        Property.of(prop_trajectory_scalar),
    ],
    pins=STEPWISE_PINS,
    forms={"lists": lambda c: c, "tensors": _as_tensors},
    devices=("cpu", "cuda"),
    to_device=_stepwise_on,
    example=SKYRL_STEPS,
    doc="one outcome scalar per trajectory onto every step's own response columns",
))
