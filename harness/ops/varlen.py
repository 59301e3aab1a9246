"""Registry records for `varlen` (spec: varlen.md): `pack_varlen`, `unpack_response_logprobs`,
`unpad`, `repad` (exact, bit for bit) and `response_logprobs` (packed vs dense forwards of tiny
Llama / Qwen2 / Qwen3 models, compared per token within the dtype's tolerance).

The `response_logprobs` record draws the model (architecture x attention implementation) with the
tokens: its cases are `harness.models.ModelCase`s, which pass the cached tiny model first.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

from batchproof import blocks as hs
from batchproof import replay
from batchproof.compare import LOGPROB_TOLERANCE, Mismatch, assert_identical, assert_logprobs_close
from batchproof.models import (
    FAMILIES,
    VOCAB,
    ModelCase,
    ModelSpec,
    specs,
    trainable_model,
)
from batchproof.reference import varlen as _reference
from batchproof.registry import BadCase, Case, OpInfo, Paths, Pin, Property, register, tensors_on
from batchproof.replay import assert_dummy_where_masked, assert_route_count

MAX_ROWS = hs.MAX_ROWS
MODEL_MAX_ROWS = 4  # model cases: a few samples of a few tokens keep one example ~10 ms
MODEL_MAX_LEN = 8

# --------------------------------------------------------------------------- shared strategies


def valid_pairs(*, max_rows: int = MAX_ROWS, max_len: int = hs.MAX_LEN, min_rows: int = 1):
    """(p, r) per sample in the shapes of `hs.length_pairs`, made packable: a sample with an empty
    prompt and a response either gets a one-token prompt or becomes a zero-length sample."""
    pairs = hs.length_pairs(min_rows=min_rows, max_rows=max_rows, max_prompt=max_len,
                            max_response=max_len)

    def repair(drawn):
        pairs, fixes = drawn
        return [(p, r) if p > 0 or r == 0 else ((1, r) if fix else (0, 0))
                for (p, r), fix in zip(pairs, fixes)]

    return pairs.flatmap(lambda ps: st.tuples(
        st.just(ps), st.lists(st.booleans(), min_size=len(ps), max_size=len(ps)))).map(repair)


@st.composite
def samples(draw, *, max_rows: int = MAX_ROWS, max_len: int = hs.MAX_LEN, vocab: int = hs.VOCAB,
            min_rows: int = 1):
    """(prompts, responses) as lists of token lists, valid for packing."""
    pairs = draw(valid_pairs(max_rows=max_rows, max_len=max_len, min_rows=min_rows))
    prompts = draw(hs.token_rows([p for p, _ in pairs], vocab=vocab))
    responses = draw(hs.token_rows([r for _, r in pairs], vocab=vocab))
    return prompts, responses


def _assert(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _lengths(case: Case) -> tuple[list[int], list[int]]:
    prompts, responses = case.args[-2:]
    return [len(p) for p in prompts], [len(r) for r in responses]


REPLAY_ARGS = ("routed_experts", "sample_support")


def _jagged_form(case: Case, device: str = "cpu", holes: bool = False) -> Case:
    """Tokens as jagged tensors; router-replay inputs too (`replay.jagged_entries`)."""
    prompts, responses = case.args[-2:]
    head = case.args[:-2]
    replayed = {name: replay.jagged_entries(case.kwargs[name], holes=holes).to(device)
                for name in REPLAY_ARGS if _entries_given(case, name)}
    return case.replace(*head, hs.jagged(prompts, torch.int64, device, holes=holes),
                        hs.jagged(responses, torch.int64, device, holes=holes), **replayed)


def _tensor_form(case: Case) -> Case:
    """Tokens as lists of tensors; router-replay inputs as lists of torch tensors (the lists
    form mixes NumPy arrays in)."""
    prompts, responses = case.args[-2:]
    replayed = {name: [replay.as_tensor(e) for e in case.kwargs[name]]
                for name in REPLAY_ARGS if _entries_given(case, name)}
    return case.replace(*case.args[:-2], hs.tensor_rows(prompts, torch.int64),
                        hs.tensor_rows(responses, torch.int64), **replayed)


def _entries_given(case: Case, name: str) -> bool:
    """Whether the call passes `name` as a list of per-sample arrays (the forms are applied to
    valid calls)."""
    value = case.kwargs.get(name)
    return isinstance(value, list) and all(isinstance(e, (torch.Tensor, np.ndarray))
                                           for e in value)


def _int_rows(rows) -> bool:
    return isinstance(rows, list) and len(rows) > 0 and all(
        isinstance(row, (list, tuple))
        and all(isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63
                for v in row) for row in rows)


def _tokens_on(case: Case, device: str) -> Case:
    """Token lists as jagged tensors on `device` (bad inputs that are not int lists stay as
    they are, so the defect survives the move)."""
    if len(case.args) >= 2 and _int_rows(case.args[-2]) and _int_rows(case.args[-1]):
        return _jagged_form(case, device)
    return case


def _pack_on(case: Case, device: str) -> Case:
    """Tokens as jagged tensors on `device`, router-replay inputs as tensors there (NumPy
    arrays stay on the host: the op moves them), the `device` keyword."""
    moved = {name: [e.to(device) if isinstance(e, torch.Tensor) else e
                    for e in case.kwargs[name]]
             for name in REPLAY_ARGS if isinstance(case.kwargs.get(name), list)}
    return _tokens_on(case, device).replace(device=device, **moved)


def _model_case_on(case: Case, device: str) -> Case:
    return _tokens_on(case.on(device) if isinstance(case, ModelCase) else case, device)


def _tensors_on(case: Case, device: str) -> Case:
    """Every tensor argument on `device` (a meta tensor stays: it stands for another device)."""
    return case.replace(*(a.to(device) if isinstance(a, torch.Tensor) and not a.is_meta else a
                          for a in case.args))


def describe_samples(case: Case, row: int) -> str:
    p_lens, r_lens = _lengths(case)
    if isinstance(case, ModelCase):
        return f"p={p_lens[row]} r={r_lens[row]} (model {case.model})"
    return f"packed row of samples p={p_lens} r={r_lens}"


# --------------------------------------------------------------------------- pack_varlen


TAIL_REGIMES = ("short", "longest", "none", "multiple")
"""How `pack_cases` draws `pad_to_multiple`, one regime per example: `sum(p + r) + t` (a tail pad
of exactly t = 1..3 tokens); `sum(p + r) + max(p + r) + t` (a tail pad longer than every sample:
the longest segment); absent; a small multiple (1, 2, 3, 4, 8: the tail pad may be 0). Without the
first two a tail pad, and a pad longer than the samples above all, came only by chance. They come
first because Hypothesis draws the first choice most often (about 40%); a failure's minimal case
drops the keyword arguments it fails without anyway."""


@st.composite
def pack_cases(draw) -> Case:
    """A valid `pack_varlen` call: lengths first, then tokens, then the tail-pad options, the
    tail drawn from `TAIL_REGIMES` and `pad_token_id` non-zero (so a tail of token 0 is wrong), 0
    or absent."""
    prompts, responses = draw(samples())
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    kwargs = {}
    regime = draw(st.sampled_from(TAIL_REGIMES))
    if regime == "multiple":
        kwargs["pad_to_multiple"] = draw(st.sampled_from([1, 2, 3, 4, 8]))
    elif regime == "short":
        kwargs["pad_to_multiple"] = sum(lengths) + draw(st.integers(1, 3))
    elif regime == "longest":
        kwargs["pad_to_multiple"] = sum(lengths) + max(lengths) + draw(st.integers(1, 3))
    # pad_token_id non-zero first, as above; position_ids_start absent, 2 (RoBERTa-like models
    # count from 2) or 1, drawn together with it (one draw: a second one reshuffled the
    # derandomized examples enough that tests/test_regimes.py's budget missed a regime)
    pad_token_id, start = draw(st.sampled_from(PAD_AND_START))
    if pad_token_id is not None:
        kwargs["pad_token_id"] = pad_token_id
    if start is not None:
        kwargs["position_ids_start"] = start
    # router replay, drawn last (the draws above stay as they were): each in a third of the
    # examples (shrinking drops them), per sample a torch or NumPy array (`batchproof.replay`)
    if _replayed(draw):
        kwargs["routed_experts"] = draw(replay.route_entries(lengths))
    if _replayed(draw):
        kwargs["sample_support"] = draw(replay.support_entries([len(r) for r in responses]))
    return Case((prompts, responses), kwargs)


def _replayed(draw) -> bool:
    """Whether a router-replay input is passed: in a third of the examples (shrinks to not)."""
    return draw(st.integers(0, 2)) == 2


PAD_AND_START = [(pad, start) for start in (None, 2, 1) for pad in (1, 49, 0, None)]


PACK_DEFECTS = ["pad_token_type", "pad_token_range", "multiple_type", "multiple_zero", "count",
                "empty",
                "empty_prompt", "float_token", "bool_token", "row_2d", "row_str", "float_row",
                "token_range", "not_a_sequence", "start_type", "start_negative",
                "routed_experts", "routed_experts", "sample_support"]
"""The defects of `bad_pack_cases`; the last three: a bad router-replay input
(`batchproof.replay`: each error of docs/conventions.md), routes twice as often as support."""


@st.composite
def bad_pack_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """Invalid `pack_varlen` calls, one defect each, with the exception type the spec requires:
    on drawn samples with no other keyword argument, or on a call `valid` draws (its keyword
    arguments kept). `empty` and `empty_prompt` change both prompts and responses."""
    kind = draw(st.sampled_from(PACK_DEFECTS))  # first: drawn after the samples, Hypothesis
    good = draw(valid) if valid is not None else None  # favours the first kind
    prompts, responses = good.args if good is not None else draw(samples())
    kw = dict(good.kwargs) if good is not None else {}
    if kind in ("routed_experts", "sample_support"):
        return draw(_replay_defect(prompts, responses, kw, kind))
    k = draw(st.integers(0, len(prompts) - 1))
    if kind == "pad_token_type":
        value = draw(st.sampled_from([0.0, "0", None, True]))
        return _bad((prompts, responses), kw | {"pad_token_id": value}, TypeError, "pad_token_id")
    if kind == "pad_token_range":  # even when there is no tail pad
        value = draw(st.sampled_from([2**63, -2**63 - 1]))
        return _bad((prompts, responses), kw | {"pad_token_id": value}, ValueError, "pad beyond int64")
    if kind == "multiple_type":
        value = draw(st.sampled_from([2.0, "4", True]))
        return _bad((prompts, responses), kw | {"pad_to_multiple": value}, TypeError, "multiple type")
    if kind == "multiple_zero":
        value = draw(st.sampled_from([0, -1]))
        return _bad((prompts, responses), kw | {"pad_to_multiple": value}, ValueError, "multiple < 1")
    if kind == "start_type":
        value = draw(st.sampled_from([2.0, "2", True]))
        return _bad((prompts, responses), kw | {"position_ids_start": value}, TypeError,
                    "position_ids_start type")
    if kind == "start_negative":
        return _bad((prompts, responses), kw | {"position_ids_start": -1}, ValueError,
                    "position_ids_start < 0")
    if kind == "count":
        return _bad((prompts + [[1]], responses), kw, ValueError, "counts differ")
    if kind == "empty":
        return _bad(([], []), kw, ValueError, "empty batch")
    if kind == "not_a_sequence":
        return _bad((draw(st.sampled_from([5, "12", None])), responses), kw, TypeError,
                    "prompts is not a sequence")
    if kind == "empty_prompt":
        prompts, responses = list(prompts), list(responses)
        prompts[k], responses[k] = [], responses[k] or [5]
        return _bad((prompts, responses), kw, ValueError, f"p == 0 < r in sample {k}")
    rows = [list(r) for r in prompts]
    if kind == "float_token":
        rows[k] = rows[k] + [1.5]
    elif kind == "bool_token":
        rows[k] = rows[k] + [True]
    elif kind == "row_2d":
        rows[k] = torch.zeros((1, 2), dtype=torch.int64)
        return _bad((rows, responses), kw, ValueError, f"prompts[{k}] is 2-D")
    elif kind == "row_str":
        rows[k] = "abc"
    elif kind == "token_range":  # an id int64 cannot hold (ids beyond int32 are valid)
        rows[k] = rows[k] + [draw(st.sampled_from([2**63, -2**63 - 1]))]
        return _bad((rows, responses), kw, ValueError, f"prompts[{k}] beyond int64")
    else:
        rows[k] = torch.zeros(2)
    return _bad((rows, responses), kw, TypeError, f"prompts[{k}]: {kind}")


@st.composite
def _replay_defect(draw, prompts, responses, kwargs: dict, name: str) -> BadCase:
    """The call with a bad `routed_experts` or `sample_support` (built on the call's own, or
    on one drawn valid first when it has none); its other arguments kept."""
    if name == "routed_experts":
        counts = [len(p) + len(r) for p, r in zip(prompts, responses)]
        valid = kwargs.get(name) or draw(replay.route_entries(counts))
        bad, raises, why = draw(replay.route_defect(valid, counts))
    else:
        lengths = [len(r) for r in responses]
        valid = kwargs.get(name) or draw(replay.support_entries(lengths))
        bad, raises, why = draw(replay.support_defect(valid, lengths))
    return _bad((prompts, responses), kwargs | {name: bad}, raises, why)


def _bad(args, kwargs, raises, why, model: ModelSpec | None = None) -> BadCase:
    case = ModelCase(args, kwargs, model=model) if model is not None else Case(args, kwargs)
    return BadCase(case, raises, why)


def pack_picture(td) -> dict[str, list[str]]:
    """The packed row, one character per column: `p` prompt, `r` response, `.` tail pad."""
    row = []
    for p, r in zip(td["prompt_lengths"].tolist(), td["response_lengths"].tolist()):
        row += ["p"] * p + ["r"] * r
    row += ["."] * (td["input_ids"].shape[1] - len(row))
    return {"row": ["".join(row)]}


def _pack_geometry(case: Case):
    """(prompts, responses, per-sample offsets, real length, padded length N)."""
    prompts, responses = (list(map(list, rows)) for rows in case.args)
    multiple = case.kwargs.get("pad_to_multiple", 1)
    offsets, offset = [], 0
    for p, r in zip(prompts, responses):
        offsets.append(offset)
        offset += len(p) + len(r)
    total = -(-offset // multiple) * multiple
    return prompts, responses, offsets, offset, total


def prop_layout(case: Case, td) -> None:
    """Keys, shapes and dtypes; sample k is prompt_k + response_k at [off_k, off_k + p_k + r_k);
    the tail (N = roundup(sum(p + r), pad_to_multiple)) holds pad_token_id; lengths; max_seqlen."""
    prompts, responses, offsets, real, total = _pack_geometry(case)
    n_resp = sum(len(r) for r in responses)
    expected = {"input_ids": ((1, total), torch.int64), "position_ids": ((1, total), torch.int64),
                "prompt_lengths": ((len(prompts),), torch.int64),
                "response_lengths": ((len(prompts),), torch.int64),
                "predict_index": ((n_resp,), torch.int64),
                "target_index": ((n_resp,), torch.int64),
                "sample_index": ((n_resp,), torch.int64)}
    for key, (shape, dtype) in expected.items():
        _assert(tuple(td[key].shape) == shape and td[key].dtype == dtype,
                f"{key}: got {tuple(td[key].shape)} {td[key].dtype}, expected {shape} {dtype}")
    _assert(td["cu_seqlens"].dtype == torch.int32, f"cu_seqlens is {td['cu_seqlens'].dtype}")
    ids = td["input_ids"][0].tolist()
    for k, (p, r) in enumerate(zip(prompts, responses)):
        _assert(ids[offsets[k]:offsets[k] + len(p) + len(r)] == p + r,
                f"sample {k} is not prompt + response at [{offsets[k]}, "
                f"{offsets[k] + len(p) + len(r)})")
    pad_id = case.kwargs.get("pad_token_id", 0)
    _assert(ids[real:] == [pad_id] * (total - real), f"the tail pad does not hold {pad_id}")
    _assert(td["prompt_lengths"].tolist() == [len(p) for p in prompts], "prompt_lengths")
    _assert(td["response_lengths"].tolist() == [len(r) for r in responses], "response_lengths")
    longest = max([len(p) + len(r) for p, r in zip(prompts, responses)] + [total - real])
    _assert(td.get_non_tensor("max_seqlen") == longest,
            f"max_seqlen {td.get_non_tensor('max_seqlen')} != {longest}")


def prop_targets_are_responses(case: Case, td) -> None:
    """input_ids[0, target_index] is every response token, in order; sample_index names its
    sample."""
    _, responses = case.args
    ids = td["input_ids"][0]
    tokens = ids[td["target_index"]].tolist()
    _assert(tokens == [t for r in responses for t in r],
            f"input_ids[target_index] = {tokens} is not the concatenated responses")
    owners = [k for k, r in enumerate(responses) for _ in r]
    _assert(td["sample_index"].tolist() == owners, f"sample_index {td['sample_index'].tolist()} "
            f"!= {owners}")


def prop_predict_is_previous_token(case: Case, td) -> None:
    """predict_index = target_index - 1 inside the same segment: the token before the scored one
    in the same sample, never the last position of a segment (p == 0 would break this)."""
    prompts, responses = case.args
    ids, pos = td["input_ids"][0].tolist(), td["position_ids"][0].tolist()
    predict, target = td["predict_index"].tolist(), td["target_index"].tolist()
    i = 0
    for p, r in zip(prompts, responses):
        sample = list(p) + list(r)
        for j in range(len(r)):
            _assert(0 <= predict[i] < len(ids) and ids[predict[i]] == sample[len(p) - 1 + j],
                    f"predict_index[{i}] = {predict[i]} does not hold the token before response "
                    f"token {j} of its sample")
            _assert(predict[i] == target[i] - 1 and pos[predict[i]] + 1 == pos[target[i]],
                    f"predict_index[{i}] = {predict[i]} is not in the segment of target "
                    f"{target[i]} (positions {pos[predict[i]]}, {pos[target[i]]})")
            i += 1


def prop_cu_seqlens(case: Case, td) -> None:
    """cu_seqlens: int32, 0 first, N last, strictly increasing (no zero-length segment), one
    boundary per non-empty sample, plus the tail pad only when the pad is > 0."""
    prompts, responses, _, real, total = _pack_geometry(case)
    cu = td["cu_seqlens"].tolist()
    _assert(cu[0] == 0 and cu[-1] == total, f"cu_seqlens {cu} must run from 0 to N = {total}")
    _assert(all(a < b for a, b in zip(cu, cu[1:])),
            f"cu_seqlens {cu} is not strictly increasing (a zero-length segment breaks kernels)")
    nonempty = sum(1 for p, r in zip(prompts, responses) if len(p) + len(r) > 0)
    want = nonempty + 1 + (1 if total > real else 0)
    _assert(len(cu) == want, f"cu_seqlens {cu} has {len(cu)} entries, expected {want}")


def prop_segments_never_cross(case: Case, td) -> None:
    """Inside each cu_seqlens segment position_ids run s, s + 1, s + 2, ... (s =
    position_ids_start, 0 by default); they restart exactly at the boundaries, so attention that
    splits at restarting positions sees the same segments."""
    start = case.kwargs.get("position_ids_start", 0)
    pos = td["position_ids"][0].tolist()
    cu = td["cu_seqlens"].tolist()
    for a, b in zip(cu, cu[1:]):
        _assert(pos[a:b] == list(range(start, start + b - a)),
                f"position_ids[{a}:{b}] = {pos[a:b]} is not {start}..{start + b - a - 1}")


def prop_segments_are_cu_seqlens(case: Case, td) -> None:
    """The boundary contract: `packed_segments` (the oracle's) reads back from the row's
    position_ids exactly its cu_seqlens and max_seqlen — what every consumer that finds the
    samples from the positions (flash-attention's kwargs, a mask, a Mamba seq_idx) sees."""
    start = case.kwargs.get("position_ids_start", 0)
    try:
        seen = _reference.packed_segments(td["position_ids"].cpu(), position_ids_start=start)
    except ValueError as err:
        raise AssertionError(f"position_ids {td['position_ids'][0].tolist()} are not a packed "
                             f"row: {err}") from None
    got, want = seen["cu_seqlens"].tolist(), td["cu_seqlens"].tolist()
    _assert(got == want, f"the segments of position_ids {td['position_ids'][0].tolist()} are "
            f"cu_seqlens {got}, but the row says {want}")
    _assert(seen.get_non_tensor("max_seqlen") == td.get_non_tensor("max_seqlen"),
            f"the longest segment of position_ids is {seen.get_non_tensor('max_seqlen')}, but "
            f"max_seqlen is {td.get_non_tensor('max_seqlen')}")


# --------------------------------------------------------------------------- router replay


def replay_entries(case: Case, name: str) -> list[torch.Tensor] | None:
    """A router-replay input's per-sample arrays as CPU tensors, or None when not passed."""
    value = case.kwargs.get(name)
    return None if value is None else [replay.as_tensor(e) for e in replay.entries_of(value)]


def _absent(td, keys: tuple[str, ...], given: str) -> None:
    extra = [key for key in keys if key in td.keys()]
    _assert(not extra, f"{extra} in the output, but no {given} was given: without router "
            "replay the outputs are as before")


def prop_routes_on_their_tokens(case: Case, td) -> None:
    """Every captured route reaches its own token exactly once: route j of sample k sits at
    slot off_k + j of routed_experts (1, N, layers, topk), bit for bit and in the given dtype;
    router_padding_mask (1, N, bool) is False exactly on those slots. Without routes, neither
    output is there."""
    entries = replay_entries(case, "routed_experts")
    if entries is None:
        return _absent(td, ("routed_experts", "router_padding_mask"), "routed_experts")
    _, _, offsets, _, total = _pack_geometry(case)
    layers, topk = entries[0].shape[1:]
    routes, mask = td["routed_experts"].cpu(), td["router_padding_mask"].cpu()
    _assert(tuple(routes.shape) == (1, total, layers, topk) and routes.dtype == entries[0].dtype,
            f"routed_experts is {tuple(routes.shape)} {routes.dtype}, expected "
            f"{(1, total, layers, topk)} {entries[0].dtype} (the dtype as given)")
    _assert(tuple(mask.shape) == (1, total) and mask.dtype == torch.bool,
            f"router_padding_mask is {tuple(mask.shape)} {mask.dtype}, expected (1, {total}) bool")
    slots = [offsets[k] + j for k, entry in enumerate(entries) for j in range(entry.shape[0])]
    unmasked = (~mask[0]).nonzero().flatten().tolist()
    _assert(unmasked == slots, f"router_padding_mask is False on slots {unmasked}, but the "
            f"captured tokens sit on slots {slots}")
    for k, entry in enumerate(entries):
        for j in range(entry.shape[0]):
            slot = offsets[k] + j
            _assert(torch.equal(routes[0, slot], entry[j]),
                    f"slot {slot} (sample {k}, token {j}) holds route {routes[0, slot].tolist()}, "
                    f"its captured route is {entry[j].tolist()}")


def prop_dummy_routes_where_masked(case: Case, td) -> None:
    """Every slot where router_padding_mask is True (the tail pad, uncaptured tokens) holds the
    dummy route 0 .. topk-1 on every layer: topk distinct experts, never zeros (verl #7524)."""
    if replay_entries(case, "routed_experts") is None:
        return
    assert_dummy_where_masked(td["routed_experts"].cpu()[0], td["router_padding_mask"].cpu()[0],
                              "slot")


def prop_route_count_per_layer(case: Case, td) -> None:
    """Per layer the row's N token slots send N * topk distinct (token, expert) assignments
    (a dropless dispatcher's invariant; all-zero padding routes send one per slot)."""
    entries = replay_entries(case, "routed_experts")
    if entries is not None:
        assert_route_count(td["routed_experts"].cpu(), entries, "the packed row")


def prop_support_on_response_tokens(case: Case, td) -> None:
    """sample_support (sum r, top_k), in the given dtype: row e is the support row of the
    response token at target_index[e] (sample sample_index[e]'s next response token), bit for
    bit. Without sample_support, no such output."""
    entries = replay_entries(case, "sample_support")
    if entries is None:
        return _absent(td, ("sample_support",), "sample_support")
    support = td["sample_support"].cpu()
    top_k, rows = entries[0].shape[1], sum(int(e.shape[0]) for e in entries)
    _assert(tuple(support.shape) == (rows, top_k) and support.dtype == entries[0].dtype,
            f"sample_support is {tuple(support.shape)} {support.dtype}, expected "
            f"{(rows, top_k)} {entries[0].dtype}")
    owners = td["sample_index"].cpu().tolist()
    seen = [0] * len(entries)
    for e, k in enumerate(owners):
        _assert(0 <= k < len(entries) and seen[k] < entries[k].shape[0]
                and torch.equal(support[e], entries[k][seen[k]]),
                f"sample_support[{e}] = {support[e].tolist()} is not the support of response "
                f"token {seen[k] if 0 <= k < len(entries) else '?'} of sample {k}")
        seen[k] += 1


PACK_PINS = [
    Pin("length_one_samples", Case(([[3], [4], [5]], [[], [], []]), {}),
        "samples of one token (p = 1, r = 0): three segments of length 1, no index entries"),
    Pin("empty_responses", Case(([[1, 2], [3, 4, 5]], [[], [6]]), {"pad_to_multiple": 4}),
        "a sample with r == 0 contributes no index, its tokens still occupy the row"),
    Pin("single_token_prompts", Case(([[7], [8]], [[1, 2], [3]]), {}),
        "p == 1: the first response token is scored by the logit at the sample's own first "
        "position (off_k), never the previous sample's"),
    Pin("zero_length_middle", Case(([[1, 2], [], [3]], [[4], [], [5, 6]]),
                                   {"pad_to_multiple": 4}),
        "a zero-length sample occupies nothing and adds no cu_seqlens boundary (a duplicate "
        "boundary is a zero-length segment that breaks varlen kernels)",
        lambda case, td: _assert(td["cu_seqlens"].tolist() == [0, 3, 6, 8],
                                 f"cu_seqlens {td['cu_seqlens'].tolist()} != [0, 3, 6, 8]")),
    Pin("pad_tail_of_zero", Case(([[1, 2], [3]], [[4], [5, 6, 7]]), {"pad_to_multiple": 7}),
        "N already a multiple: pad 0 adds no boundary (cu_seqlens [0, 3, 7], not [0, 3, 7, 7])",
        lambda case, td: _assert(td["cu_seqlens"].tolist() == [0, 3, 7],
                                 f"cu_seqlens {td['cu_seqlens'].tolist()} != [0, 3, 7]")),
    Pin("tail_pad_holds_pad_token",
        Case(([[1, 2], [3]], [[4], [5]]), {"pad_to_multiple": 8, "pad_token_id": 49}),
        "the tail pad holds pad_token_id (not 0) and is its own segment 0..pad-1",
        lambda case, td: _assert(td["input_ids"][0, 5:].tolist() == [49, 49, 49]
                                 and td["position_ids"][0, 5:].tolist() == [0, 1, 2],
                                 f"tail {td['input_ids'][0, 5:].tolist()} positions "
                                 f"{td['position_ids'][0, 5:].tolist()}")),
    Pin("pad_is_longest_segment", Case(([[1]], [[]]), {"pad_to_multiple": 5}),
        "a tail pad longer than every sample is the longest segment: max_seqlen 4 (not 1), and "
        "the pad adds its boundary (cu_seqlens [0, 1, 5])",
        lambda case, td: _assert(td.get_non_tensor("max_seqlen") == 4
                                 and td["cu_seqlens"].tolist() == [0, 1, 5],
                                 f"max_seqlen {td.get_non_tensor('max_seqlen')}, cu_seqlens "
                                 f"{td['cu_seqlens'].tolist()}: expected 4, [0, 1, 5]")),
    Pin("empty_prompt_reads_previous_logit",
        BadCase(Case(([[1, 2], []], [[3], [4, 5]]), {}), ValueError,
                "p == 0 < r: predict_index off_k - 1 is the previous sample's last logit"),
        "p == 0 with r > 0 must be rejected, not scored with the previous sample's logit"),
    Pin("ids_beyond_int32", Case(([[2**40, -5]], [[2**63 - 1]]), {"pad_to_multiple": 4}),
        "token ids are int64: ids beyond int32 are packed exactly (the CPU list path packs them "
        "with struct, not in its int32 pass)",
        lambda case, td: _assert(td["input_ids"][0, :3].tolist() == [2**40, -5, 2**63 - 1],
                                 f"input_ids {td['input_ids'].tolist()}")),
    *[Pin(name, BadCase(Case(args, {}), raises, why), why) for name, args, raises, why in [
        ("count_mismatch", ([[1], [2]], [[3]]), ValueError, "2 prompts, 1 response"),
        ("prompts_not_a_sequence", (5, [[3]]), TypeError, "prompts is an int"),
        ("token_id_beyond_int64", ([[1, 2**63]], [[3]]), ValueError, "an id int64 cannot hold"),
        ("empty_jagged_batch", (hs.jagged([], torch.int64), hs.jagged([], torch.int64)),
         ValueError, "a jagged batch of no rows"),
        ("int32_sized_non_ints", ([[1.5, True]], [[3]]), TypeError,
         "a float and a bool marshal to the bytes of two int32 ids (9 + 1 = 2 x 5)"),
    ]],
    Pin("output_device_given", Case(([[1, 2]], [[3]]), {"device": "cpu"}),
        "an explicit device places the outputs there"),
    Pin("positions_start_at_two",
        Case(([[5, 6], [7]], [[8], [9, 10]]), {"position_ids_start": 2, "pad_to_multiple": 8}),
        "RoBERTa-like models number positions from padding_idx + 1 = 2: every sample and the "
        "tail pad count from position_ids_start (transformers #47496 / #47525: "
        "DataCollatorWithFlattening wrote 0-based positions for them)",
        lambda case, td: _assert(td["position_ids"][0].tolist() == [2, 3, 4, 2, 3, 4, 2, 3]
                                 and td["cu_seqlens"].tolist() == [0, 3, 6, 8],
                                 f"position_ids {td['position_ids'][0].tolist()}, cu_seqlens "
                                 f"{td['cu_seqlens'].tolist()}")),
]

def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False  # as decoded wire routes are (SkyRL #1909)
    return array


def _expect_routes(routes: list, mask: list[bool]):
    """A pin's literal expectation: routed_experts[0] (as lists) and router_padding_mask[0]."""
    def expect(case: Case, td) -> None:
        got = td["routed_experts"][0].tolist(), td["router_padding_mask"][0].tolist()
        _assert(got == (routes, mask), f"routed_experts {got[0]}, router_padding_mask {got[1]}: "
                f"expected {routes}, {mask}")
    return expect


ROUTE_PINS = [
    Pin("skyrl_1909_packed_route_arrays",
        Case(([[1, 2], [3]], [[4], [5, 6]]), {"routed_experts": [
            _read_only(np.array([[[0, 3]], [[2, 1]], [[4, 0]]], dtype=np.uint8)),
            _read_only(np.array([[[1, 2]], [[3, 0]]], dtype=np.uint8))]}),
        "SkyRL #1909: routes arrive as compact, read-only uint8 NumPy arrays decoded from the "
        "wire; packed, they keep uint8 and sit on their own tokens, the last sampled token "
        "(no route captured) gets the dummy route",
        _expect_routes([[[0, 3]], [[2, 1]], [[4, 0]], [[1, 2]], [[3, 0]], [[0, 1]]],
                       [False] * 5 + [True])),
    Pin("slime_1052_padding_routes",
        Case(([[1, 2]], [[3, 4]]), {"pad_to_multiple": 8, "routed_experts": [
            torch.tensor([[[5, 6, 7]], [[8, 9, 10]], [[11, 3, 2]]], dtype=torch.int32)]}),
        "slime #1052 (and slime #822: uniform padding routes counted once by the dispatcher): "
        "the uncaptured token and the tail pad get the dummy route 0, 1, 2, never zeros, and "
        "the router padding mask",
        _expect_routes([[[5, 6, 7]], [[8, 9, 10]], [[11, 3, 2]]] + [[[0, 1, 2]]] * 5,
                       [False] * 3 + [True] * 5)),
    Pin("routes_across_sample_boundaries",
        Case(([[1, 2], [3], [4, 5, 6]], [[7], [8, 9], []]), {"routed_experts": [
            torch.tensor([[[10, 11]], [[12, 13]], [[14, 15]]], dtype=torch.int16),
            torch.tensor([[[20, 21]], [[22, 23]]], dtype=torch.int16),
            torch.tensor([[[30, 31]], [[32, 33]], [[34, 35]]], dtype=torch.int16)]}),
        "each sample's first route on its own first token (a route shifted by one at a sample "
        "boundary lands on the previous sample's last token: rllm #543's offset class)",
        _expect_routes([[[10, 11]], [[12, 13]], [[14, 15]], [[20, 21]], [[22, 23]], [[0, 1]],
                        [[30, 31]], [[32, 33]], [[34, 35]]],
                       [False] * 5 + [True] + [False] * 3)),
    Pin("skyrl_packed_support_rows",
        Case(([[1, 2], [3]], [[4], [5, 6]]), {"sample_support": [
            torch.tensor([[7, -1]], dtype=torch.int32),
            torch.tensor([[8, 9], [5, -1]], dtype=torch.int32)]}),
        "SkyRL's packed sample support: one row per response token, in target_index order",
        lambda case, td: _assert(td["sample_support"].tolist() == [[7, -1], [8, 9], [5, -1]],
                                 f"sample_support {td['sample_support'].tolist()}")),
    *[Pin(name, BadCase(Case(([[1, 2], [3]], [[4], [5]]), kwargs), raises, why), why)
      for name, kwargs, raises, why in [
          ("routes_for_some_samples_only",
           {"routed_experts": [torch.zeros((2, 1, 2), dtype=torch.uint8), None]}, ValueError,
           "routes given for sample 0 only"),
          ("routes_longer_than_sample",
           {"routed_experts": [torch.zeros((4, 1, 2), dtype=torch.uint8),
                               torch.zeros((0, 1, 2), dtype=torch.uint8)]}, ValueError,
           "4 routes for 3 tokens"),
          ("routes_float", {"routed_experts": [torch.zeros((1, 1, 2)),
                                               torch.zeros((1, 1, 2))]}, TypeError,
           "float expert ids"),
          ("support_rows_not_per_response_token",
           {"sample_support": [torch.full((2, 2), -1, dtype=torch.int32),
                               torch.full((1, 2), -1, dtype=torch.int32)]}, ValueError,
           "2 support rows for 1 response token")]],
]

PACK_PINS += ROUTE_PINS

PACK_EXAMPLE = Case(([[11, 12, 13], [], [21]], [[14, 15], [], [22]]), {"pad_to_multiple": 4})

# lists: the row packed in C (_write_lists), then the other outputs by the compiled kernel (or,
# kernels off, torch); tensors and jagged: the kernel writes everything (kernels off: one
# memcpy per prompt and response, _copy_rows); CUDA: one Triton kernel
_SAMPLES_KERNEL, _COPY_ROWS = "numba:varlen.write_samples", "cpu:varlen._copy_rows"
_TRITON_SAMPLES = ("triton:varlen._samples",)
PACK_PATHS = Paths(kernel=("cpu:varlen._write_lists", _SAMPLES_KERNEL),
                   cpu=("cpu:varlen._write_lists", _COPY_ROWS), triton=_TRITON_SAMPLES)

PACK_VARLEN = register(OpInfo(
    op="varlen",
    function="pack_varlen",
    valid=pack_cases(),
    invalid=hs.one_or_two_defects(bad_pack_cases, pack_cases(), _reference.pack_varlen),
    compare=assert_identical,
    properties=[
        Property.of(prop_layout),
        Property.of(prop_targets_are_responses),
        Property.of(prop_predict_is_previous_token),
        Property.of(prop_cu_seqlens),
        Property.of(prop_segments_never_cross),
        Property.of(prop_segments_are_cu_seqlens),
        Property.of(prop_routes_on_their_tokens),
        Property.of(prop_dummy_routes_where_masked),
        Property.of(prop_route_count_per_layer),
        Property.of(prop_support_on_response_tokens),
    ],
    pins=PACK_PINS,
    forms={"lists": lambda c: c, "tensors": _tensor_form, "jagged": _jagged_form,
           "jagged with holes": lambda c: _jagged_form(c, holes=True)},
    devices=("cpu", "cuda"),
    to_device=_pack_on,
    paths=PACK_PATHS,
    describe_row=describe_samples,
    picture=pack_picture,
    example=PACK_EXAMPLE,
    targets=lambda case: {"samples": len(case.args[0])},
    doc="prompts + responses → one packed row: restarting position_ids, cu_seqlens, indices",
))

# --------------------------------------------------------------------------- packed_segments


SEGMENT_LENGTHS = (1, 1, 2, 3, 4, 6)  # one-token samples as often as any other length


@st.composite
def text_row(draw, width: int, start: int, mrope: bool) -> list[int]:
    """One packed row of `width` text positions: segments of drawn lengths (one-token ones
    often), each counting up from `start` by 1, or for mRoPE's text axis by 0 (an image's
    tokens share a temporal position; never at `start` itself), 1 or a jump of 2 or 3."""
    row = []
    while len(row) < width:
        length = min(draw(st.sampled_from(SEGMENT_LENGTHS)), width - len(row))
        position = start
        row.append(position)
        for _ in range(length - 1):
            steps = [1, 2, 3] + ([0] if position > start else []) if mrope else [1]
            position += draw(st.sampled_from(steps))
            row.append(position)
    return row


@st.composite
def segment_cases(draw) -> Case:
    """A valid `packed_segments` call: a start (absent, 2 or 1), a layout — (B, L), mRoPE
    (3, B, L), or transformers' text row + mRoPE (4, B, L) — then B rows of L text positions
    (B = 0 and L = 0 included); the mRoPE planes other than the text axis hold anything (values
    equal to the start too), since only the text axis decides."""
    start = draw(st.sampled_from([None, 2, 1]))
    first = start or 0
    planes = draw(st.sampled_from([0, 3, 4]))  # 0: (B, L)
    batch, width = draw(st.integers(0, 3)), draw(st.integers(0, 10))
    rows = [draw(text_row(width, first, planes > 0)) for _ in range(batch)]
    text = torch.tensor(rows, dtype=torch.int64).reshape(batch, width)
    if planes:
        others = torch.randint(0, 12, (planes - 1, batch, width), generator=draw(hs.generators()))
        text = torch.cat([text[None], others])
    return Case((text,), {} if start is None else {"position_ids_start": start})


SEGMENT_DEFECTS = ["jump", "row_start", "mrope_decrease", "start_type", "start_negative",
                   "float", "bool", "list", "dims"]


@st.composite
def bad_segment_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """Invalid `packed_segments` calls, one defect each: positions no packer writes (a jump or a
    decrease that is not a restart, a row that does not begin at the start), wrong argument
    types, shapes that are neither (B, L) nor (3 | 4, B, L)."""
    kind = draw(st.sampled_from(SEGMENT_DEFECTS))
    good = draw(valid if valid is not None else segment_cases())  # (or on a call `valid` draws)
    (positions,), kwargs = good.args, dict(good.kwargs)
    start = kwargs.get("position_ids_start", 0)
    if kind in ("jump", "row_start", "mrope_decrease"):
        mrope = kind == "mrope_decrease"
        batch = draw(st.integers(1, 3))
        rows = [draw(text_row(6, start, mrope)) for _ in range(batch)]
        b = draw(st.integers(0, batch - 1))
        rows[b] = {"jump": [start, start + 1, start + 2, start + 3, start + 1, start + 2],
                   "row_start": [start + 1, start + 2, start, start + 1, start + 2, start + 3],
                   "mrope_decrease": [start, start + 2, start + 2, start + 1, start, start]}[kind]
        text = torch.tensor(rows, dtype=torch.int64)
        if mrope:
            text = torch.stack([text, text + 1, text])
        return BadCase(Case((text,), kwargs), ValueError, f"{kind} in row {b}")
    if kind == "start_type":
        kwargs["position_ids_start"] = draw(st.sampled_from([2.0, "2", True]))
        return BadCase(Case((positions,), kwargs), TypeError, "position_ids_start type")
    if kind == "start_negative":
        kwargs["position_ids_start"] = -1
        return BadCase(Case((positions,), kwargs), ValueError, "position_ids_start < 0")
    if kind == "float":
        return BadCase(Case((positions.float(),), kwargs), TypeError, "float positions")
    if kind == "bool":
        return BadCase(Case((positions != 0,), kwargs), TypeError, "bool positions")
    if kind == "list":
        return BadCase(Case((positions.tolist(),), kwargs), TypeError, "a list")
    shape = draw(st.sampled_from([(5,), (2, 1, 4), (3, 1, 1, 4), (5, 1, 3)]))
    return BadCase(Case((torch.zeros(shape, dtype=torch.int64),), kwargs), ValueError,
                   f"shape {shape}")


def _text_of(positions: torch.Tensor) -> list[list[int]]:
    return (positions if positions.dim() == 2 else positions[0]).tolist()


def prop_segments(case: Case, td) -> None:
    """cu_seqlens (int32) runs from 0 to B * L (just [0] without tokens), strictly increasing,
    with a boundary exactly at every flat column whose text position is position_ids_start (each
    row's first column among them: no segment spans two rows); seq_idx (int32, (B, L)) numbers
    them from 0 in every row; max_seqlen is the longest segment, a Python int."""
    (positions,), start = case.args, case.kwargs.get("position_ids_start", 0)
    rows = _text_of(positions)
    batch, width = positions.shape[-2], positions.shape[-1]
    cu, seq_idx = td["cu_seqlens"], td["seq_idx"]
    _assert(cu.dtype == torch.int32 and seq_idx.dtype == torch.int32,
            f"cu_seqlens {cu.dtype}, seq_idx {seq_idx.dtype}: both must be int32")
    _assert(tuple(seq_idx.shape) == (batch, width),
            f"seq_idx has shape {tuple(seq_idx.shape)}, expected ({batch}, {width}): one entry "
            f"per token of the text axis")
    flat = [v for row in rows for v in row]
    want = [i for i, v in enumerate(flat) if v == start] + ([len(flat)] if flat else [])
    _assert(cu.tolist() == (want or [0]),
            f"cu_seqlens {cu.tolist()} != {want or [0]}: a segment starts exactly where the text "
            f"position is {start}")
    numbers = [[sum(v == start for v in row[:j + 1]) - 1 for j in range(len(row))]
               for row in rows]
    _assert(seq_idx.tolist() == numbers, f"seq_idx {seq_idx.tolist()} != {numbers}")
    lengths = [b - a for a, b in zip(want, want[1:])]
    max_seqlen = td.get_non_tensor("max_seqlen")
    _assert(type(max_seqlen) is int and max_seqlen == max(lengths, default=0),
            f"max_seqlen {max_seqlen!r} != {max(lengths, default=0)} (a Python int)")


def prop_text_axis_only(case: Case, td, candidate) -> None:
    """Only the text axis decides: mRoPE's other planes replaced by anything (every value the
    start, or reversed along the row) change nothing, and (B, L) positions given as three equal
    mRoPE planes (text-only mRoPE) give the same segments."""
    (positions,), kwargs = case.args, dict(case.kwargs)
    start = kwargs.get("position_ids_start", 0)
    if positions.dim() == 3:
        variants = [torch.cat([positions[:1], torch.full_like(positions[1:], start)]),
                    torch.cat([positions[:1], positions[1:].flip(-1)])]
    else:
        variants = [positions.expand(3, *positions.shape).clone()]
    for variant in variants:
        try:
            assert_identical(td, candidate(variant, **kwargs))
        except Mismatch as err:
            raise Mismatch(f"position_ids of shape {tuple(variant.shape)} with the same text axis "
                           f"give other segments: {err}") from None


def _segment_form(convert):
    return lambda case: case.replace(convert(case.args[0]))


def _expect_segments(cu: list[int], seq_idx: list[list[int]] | None = None,
                     max_seqlen: int | None = None):
    def expect(case: Case, td) -> None:
        _assert(td["cu_seqlens"].tolist() == cu, f"cu_seqlens {td['cu_seqlens'].tolist()} != {cu}")
        if seq_idx is not None:
            _assert(td["seq_idx"].tolist() == seq_idx,
                    f"seq_idx {td['seq_idx'].tolist()} != {seq_idx}")
        if max_seqlen is not None:
            _assert(td.get_non_tensor("max_seqlen") == max_seqlen,
                    f"max_seqlen {td.get_non_tensor('max_seqlen')} != {max_seqlen}")
    return expect


def _positions(rows) -> Case:
    return Case((torch.tensor(rows, dtype=torch.int64),))


MROPE_IMAGE = torch.tensor([[[0, 1, 2, 2, 2, 5, 0, 1]],      # text axis (temporal): an image at 2
                            [[0, 1, 2, 2, 3, 5, 0, 1]],      # height
                            [[0, 1, 2, 3, 2, 5, 0, 1]]])     # width

SEGMENT_PINS = [
    Pin("single_token_sample", _positions([[0, 1, 2, 0, 0, 1, 2]]),
        "a one-token sample between two longer ones is its own segment: 0 after 0 is a restart "
        "(ms-swift #9904: boundaries found only where the position decreases merged it into "
        "the next sample)", _expect_segments([0, 3, 4, 7], [[0, 0, 0, 1, 2, 2, 2]], 3)),
    Pin("consecutive_single_token_samples", _positions([[0, 0, 0]]),
        "three one-token samples: three segments", _expect_segments([0, 1, 2, 3], [[0, 1, 2]], 1)),
    Pin("single_token_samples_at_the_end", _positions([[0, 1, 0, 0]]),
        "one-token samples that end the row stay one-token segments: positions cannot tell them "
        "from a zero-padded tail, and coalescing them (VeOmni #845 / #918 do for their pad) "
        "would let real samples attend to each other",
        _expect_segments([0, 2, 3, 4], [[0, 0, 1, 2]], 2)),
    Pin("zero_padded_tail", _positions([[0, 1, 2, 0, 1, 0, 0, 0]]),
        "a tail padded with position 0 is read as one-token segments, as every reader of the "
        "positions reads it (VeOmni #746: cu_seqlens grew with the pad); a packer writes its "
        "tail pad as its own segment counting up (pack_varlen's property "
        "segments_are_cu_seqlens), which is then one segment",
        _expect_segments([0, 3, 5, 6, 7, 8])),
    Pin("counted_tail_is_one_segment", _positions([[0, 1, 2, 0, 1, 0, 1, 2]]),
        "the tail pad pack_varlen writes (0, 1, 2, ...) is one segment, never many",
        _expect_segments([0, 3, 5, 8], [[0, 0, 0, 1, 1, 2, 2, 2]], 3)),
    Pin("restart_at_position_ids_start",
        Case((torch.tensor([[2, 3, 4, 2, 3]]),), {"position_ids_start": 2}),
        "RoBERTa-like positions count from 2: segments restart at position_ids_start, not at 0 "
        "(transformers #47496 / #47525)", _expect_segments([0, 3, 5], [[0, 0, 0, 1, 1]], 3)),
    Pin("mrope_text_axis", Case((MROPE_IMAGE,)),
        "(3, B, L) mRoPE positions: only the text axis decides (an image's plateau and the jump "
        "after it stay in the sample), and the first axis is never a batch axis (verl #7137, "
        "ms-swift #8468, transformers #44911: cu_seqlens over 3x the tokens)",
        _expect_segments([0, 6, 8], [[0, 0, 0, 0, 0, 0, 1, 1]], 6)),
    Pin("mrope_two_rows", Case((torch.stack([torch.tensor([[0, 1, 0], [0, 0, 1]])] * 3),)),
        "(3, 2, L): two rows, each starting a segment", _expect_segments([0, 2, 3, 4, 6])),
    Pin("text_row_and_mrope", Case((torch.cat([torch.tensor([[[0, 1, 2, 3, 4, 5, 0, 1]]]),
                                               MROPE_IMAGE]),)),
        "(4, B, L): transformers' text row first, then the three mRoPE planes",
        _expect_segments([0, 6, 8])),
    Pin("rows_never_share_a_segment", _positions([[0, 1, 2], [0, 1, 0]]),
        "each row starts a segment; cu_seqlens runs over the flattened rows",
        _expect_segments([0, 3, 5, 6], [[0, 0, 0], [0, 0, 1]], 3)),
    Pin("no_tokens", Case((torch.zeros((2, 0), dtype=torch.int64),)),
        "rows of no tokens: no segment, cu_seqlens [0], max_seqlen 0",
        _expect_segments([0], [[], []], 0)),
    Pin("jump_without_restart",
        BadCase(_positions([[0, 1, 2, 3, 1, 2]]), ValueError, "1 after 3 is not a restart"),
        "no packer writes it, and the readers disagree: transformers' flash-attention kwargs "
        "see one segment (the minimum position only at column 0), its mask two (a step other "
        "than +1)"),
    Pin("row_not_at_start", BadCase(_positions([[1, 2, 3]]), ValueError, "row starts at 1"),
        "a row that does not begin at position_ids_start (a slice from inside a sample) has no "
        "segments the positions can tell"),
    Pin("mrope_decrease",
        BadCase(Case((torch.stack([torch.tensor([[0, 2, 1]])] * 3),)), ValueError,
                "the text axis decreases without restarting"),
        "mRoPE's text axis may stay or jump within a sample, never go back"),
    Pin("one_dimensional", BadCase(_positions([0, 1, 0]), ValueError, "1-D"),
        "(L,) positions are not (B, L): the batch axis is not guessed"),
    Pin("position_ids_list", BadCase(Case(([[0, 1]],)), TypeError, "a list"),
        "positions are a tensor"),
]

PACKED_SEGMENTS = register(OpInfo(
    op="varlen",
    function="packed_segments",
    valid=segment_cases(),
    invalid=hs.one_or_two_defects(bad_segment_cases, segment_cases(), _reference.packed_segments),
    compare=assert_identical,
    properties=[
        Property.of(prop_segments),
        Property.of(prop_text_axis_only, metamorphic=True),
    ],
    pins=SEGMENT_PINS,
    forms={"int64": lambda c: c,
           "int32": _segment_form(lambda t: t.to(torch.int32)),
           "strided view": _segment_form(lambda t: torch.stack([t, t], -1)[..., 1])},
    devices=("cpu", "cuda"),
    to_device=_tensors_on,
    example=SEGMENT_PINS[0].case,
    doc="position_ids (B, L) or mRoPE (3 | 4, B, L) → the segments of each packed row",
))

# --------------------------------------------------------------------------- unpack


@st.composite
def unpack_cases(draw) -> Case:
    """A packed row (from the reference packer) and flat logprobs in one of the three shapes."""
    prompts, responses = draw(samples())
    packed = _reference.pack_varlen(prompts, responses,
                                    pad_to_multiple=draw(st.sampled_from([1, 4])))
    count, total = packed["predict_index"].shape[0], packed["input_ids"].shape[1]
    shape = draw(st.sampled_from(["per_token", "per_position", "per_position_2d"]))
    size = count if shape == "per_token" else total
    values = torch.tensor(draw(hs.float_rows([size]))[0], dtype=torch.float32)
    values = values.to(draw(hs.float_dtypes()))
    if shape == "per_position_2d":
        values = values.reshape(1, total)
    kwargs = {}
    if draw(st.booleans()):
        kwargs["width"] = max(len(r) for r in responses) + draw(st.integers(0, 2))
    return Case((values, packed), kwargs)


@st.composite
def bad_unpack_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect each: on a call with no width but the one the defect sets, or on a call
    `valid` draws (its width kept)."""
    # the defect before the valid call: drawn after it, Hypothesis favours the first kind
    kind = draw(st.sampled_from(["not_tensor", "int_values", "wrong_size", "narrow", "width_type",
                                 "not_packed", "missing_key"]))
    good = draw(valid if valid is not None else unpack_cases())
    values, packed = good.args
    kw = dict(good.kwargs) if valid is not None else {}
    count = packed["predict_index"].shape[0]
    if kind == "not_tensor":
        return BadCase(Case((values.tolist(), packed), kw), TypeError, "flat_logprobs is a list")
    if kind == "int_values":
        return BadCase(Case((values.to(torch.int64), packed), kw), TypeError, "integer logprobs")
    if kind == "wrong_size":
        return BadCase(Case((torch.zeros(count + packed["input_ids"].shape[1] + 1), packed), kw),
                       ValueError, "no value per index nor per position")
    if kind == "narrow" and count > 0:
        width = int(packed["response_lengths"].max()) - 1
        return BadCase(Case((values, packed), kw | {"width": width}), ValueError, "width too small")
    if kind == "width_type":
        return BadCase(Case((values, packed), kw | {"width": 3.0}), TypeError, "width is a float")
    if kind == "not_packed":
        return BadCase(Case((values, packed.to_dict()), kw), TypeError, "packed is a dict")
    return BadCase(Case((values, packed.exclude("predict_index")), kw), ValueError,
                   "packed lacks predict_index")


def prop_right_aligned(case: Case, out) -> None:
    """(B, width) float32: sample k's values (flat_logprobs per token, or gathered at
    predict_index) in its last r_k columns, in order; +0.0 everywhere else."""
    values, packed = case.args
    lengths = packed["response_lengths"].tolist()
    width = case.kwargs.get("width", max(lengths))
    flat = values.reshape(-1).float()
    if values.numel() != len(packed["predict_index"]):
        flat = flat[packed["predict_index"]]
    _assert(out.dtype == torch.float32 and tuple(out.shape) == (len(lengths), width),
            f"got {tuple(out.shape)} {out.dtype}, expected ({len(lengths)}, {width}) float32")
    start = 0
    for k, r in enumerate(lengths):
        want = torch.cat([torch.zeros(width - r), flat[start:start + r]])
        _assert(torch.equal(out[k].view(torch.int32), want.view(torch.int32)),
                f"row {k}: {out[k].tolist()} != {want.tolist()} (bitwise, right-aligned)")
        start += r


UNPACK_PINS = [
    Pin("empty_response_keeps_zero_row",
        Case((torch.tensor([-1.0, -2.0, -3.0]),
              _reference.pack_varlen([[1], [2, 3], [4]], [[5, 6], [], [7]])), {}),
        "r == 0: nothing is written in that row (the `x[-0:]` slice writes the whole row); "
        "rows right-aligned",
        lambda case, out: _assert(out.tolist() == [[-1.0, -2.0], [0.0, 0.0], [0.0, -3.0]],
                                  f"{out.tolist()} != [[-1, -2], [0, 0], [0, -3]]")),
    Pin("per_position_logits_at_predict_index",
        Case((torch.arange(-7.0, 0.0), _reference.pack_varlen([[1, 2], [3]], [[4, 5], [6, 7]])),
             {}),
        "a per-position tensor is read at predict_index (the logit before the token), not at "
        "target_index",
        lambda case, out: _assert(out.tolist() == [[-6.0, -5.0], [-3.0, -2.0]],
                                  f"{out.tolist()} != [[-6, -5], [-3, -2]]")),
    Pin("flat_logprobs_size_mismatch",
        BadCase(Case((torch.zeros(5), _reference.pack_varlen([[1, 2], [3]], [[4], [5, 6]]))),
                ValueError, "5 values for 3 response tokens and 6 positions"),
        "a flat tensor that is neither per token nor per position must be rejected, not cut"),
    Pin("packed_inconsistent",
        BadCase(Case((torch.zeros(3), _reference.pack_varlen([[1, 2], [3]], [[4], [5, 6]]).set(
            "predict_index", torch.tensor([1, 4])))), ValueError,
            "2 predict_index entries for 3 response tokens"),
        "a packed batch whose predict_index does not match its response lengths is rejected"),
]

UNPACK = register(OpInfo(
    op="varlen",
    function="unpack_response_logprobs",
    valid=unpack_cases(),
    invalid=hs.one_or_two_defects(
        bad_unpack_cases, unpack_cases(), _reference.unpack_response_logprobs),
    compare=assert_identical,
    properties=[Property.of(prop_right_aligned)],
    pins=UNPACK_PINS,
    example=UNPACK_PINS[0].case,
    doc="flat per-token logprobs of a packed row → (B, width) right-aligned float32",
))

# --------------------------------------------------------------------------- unpad / repad


@st.composite
def masked_tensors(draw) -> tuple[torch.Tensor, torch.Tensor]:
    """x (B, S, ...) and a 0/1 mask (B, S) — non-contiguous (interior zeros), left- or
    right-padded, all ones or all zeros; bool or integer."""
    batch, seqlen = draw(st.integers(0, 4)), draw(st.integers(0, 8))
    shape = draw(st.sampled_from(["holes", "left", "right", "ones", "zeros"]))
    if shape == "holes":
        rows = draw(hs.mask_rows([seqlen] * batch))
    elif shape in ("ones", "zeros"):
        rows = [[int(shape == "ones")] * seqlen for _ in range(batch)]
    else:
        counts = draw(st.lists(st.integers(0, seqlen), min_size=batch, max_size=batch))
        rows = [[0] * (seqlen - n) + [1] * n if shape == "left" else [1] * n + [0] * (seqlen - n)
                for n in counts]
    mask_dtype = draw(st.sampled_from([torch.bool, torch.int64, torch.int32, torch.uint8]))
    mask = torch.tensor(rows, dtype=torch.int64).reshape(batch, seqlen).to(mask_dtype)
    trailing = draw(st.sampled_from([(), (3,), (2, 2)]))
    dtype = draw(st.sampled_from([*hs.FLOAT_DTYPES, torch.int64]))
    generator = draw(hs.generators())
    x = torch.randn((batch, seqlen, *trailing), generator=generator) * 100
    return x.to(dtype), mask


def unpad_cases() -> st.SearchStrategy[Case]:
    return masked_tensors().map(lambda xm: Case(xm))


@st.composite
def bad_unpad_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on drawn (x, mask), or on a call `valid` draws; `mask_value` and `x_1d`
    replace the whole call."""
    x, mask = draw(valid).args if valid is not None else draw(masked_tensors())
    kind = draw(st.sampled_from(["float_mask", "mask_1d", "mask_value", "shape", "x_list",
                                 "x_1d", "mask_list"]))
    if kind == "mask_list":
        return BadCase(Case((x, mask.tolist())), TypeError, "attention_mask is a list")
    if kind == "float_mask":
        return BadCase(Case((x, mask.float())), TypeError, "float mask")
    if kind == "mask_1d":
        return BadCase(Case((x, mask.reshape(-1))), ValueError, "1-D mask")
    if kind == "mask_value":
        return BadCase(Case((torch.zeros(2, 3), torch.tensor([[1, 0, 2], [1, 1, 1]]))),
                       ValueError, "mask value 2")
    if kind == "shape":
        return BadCase(Case((torch.zeros(x.shape[0] + 1, x.shape[1]), mask)), ValueError,
                       "x and mask shapes differ")
    if kind == "x_list":
        return BadCase(Case((x.tolist(), mask)), TypeError, "x is a list")
    return BadCase(Case((torch.zeros(3), torch.ones(1, 3, dtype=torch.int64))), ValueError,
                   "x is 1-D")


def prop_unpad_round_trip(case: Case, out) -> None:
    """values scattered back to `indices` give x where the mask is 1 and 0 elsewhere; indices
    are the row-major positions of the ones (int64, increasing); values keep x's dtype."""
    x, mask = case.args
    values, indices = out[0], out[1]
    _assert(indices.dtype == torch.int64 and values.dtype == x.dtype,
            f"indices {indices.dtype} (want int64), values {values.dtype} (want {x.dtype})")
    want_indices = [i for i, m in enumerate(mask.reshape(-1).tolist()) if m]
    _assert(indices.tolist() == want_indices, f"indices {indices.tolist()} != {want_indices}")
    flat = torch.zeros_like(x.reshape(-1, *x.shape[2:]))
    flat[indices] = values
    keep = mask.bool().reshape(*mask.shape, *([1] * (x.dim() - 2)))
    want = torch.where(keep, x, torch.zeros((), dtype=x.dtype))
    _assert(torch.equal(flat.reshape(x.shape), want), "repad(unpad(x)) != x * mask")


def prop_unpad_cu_seqlens(case: Case, out) -> None:
    """cu_seqlens is int32 [0, cumsum(row sums)]; max_seqlen is the largest row sum, a Python
    int (0 for an empty batch)."""
    _, mask = case.args
    sums = [int(sum(row)) for row in mask.to(torch.int64).tolist()]
    want = [0]
    for s in sums:
        want.append(want[-1] + s)
    cu, max_seqlen = out[2], out[3]
    _assert(cu.dtype == torch.int32 and cu.tolist() == want,
            f"cu_seqlens {cu.tolist()} ({cu.dtype}) != {want} (int32)")
    _assert(type(max_seqlen) is int and max_seqlen == max(sums, default=0),
            f"max_seqlen {max_seqlen!r} != {max(sums, default=0)} (a Python int)")


HOLES = Case((torch.arange(8.0).reshape(2, 4, 1), torch.tensor([[1, 0, 1, 1], [0, 1, 1, 0]])))

UNPAD_PINS = [
    Pin("non_contiguous_mask", HOLES,
        "flash-attn semantics: indices are the row-major positions of every 1, holes included "
        "(a packer that assumes left-aligned rows takes the first row-sum positions)",
        lambda case, out: _assert(out[1].tolist() == [0, 2, 3, 5, 6]
                                  and out[2].tolist() == [0, 3, 5] and out[3] == 3,
                                  f"indices {out[1].tolist()}, cu_seqlens {out[2].tolist()}, "
                                  f"max_seqlen {out[3]}")),
    Pin("all_zero_row", Case((torch.ones(3, 2, 2), torch.tensor([[1, 1], [0, 0], [0, 1]],
                                                                dtype=torch.bool))),
        "a row with no tokens repeats its cu_seqlens boundary (flash-attn keeps one entry per "
        "row, unlike pack_varlen's samples); values are taken from the right rows after it",
        lambda case, out: _assert(out[2].tolist() == [0, 2, 2, 3],
                                  f"cu_seqlens {out[2].tolist()} != [0, 2, 2, 3]")),
    Pin("mask_value_two",
        BadCase(Case((torch.zeros(2, 3, 1), torch.tensor([[1, 0, 2], [1, 1, 1]]))), ValueError,
                "flash-attn counts a 2 twice in cu_seqlens but indexes it once"),
        "a mask value other than 0/1 makes flash-attn's cu_seqlens disagree with its indices"),
    Pin("attention_mask_list",
        BadCase(Case((torch.zeros(1, 2), [[1, 0]])), TypeError, "attention_mask is a list"),
        "the mask must be a tensor"),
    Pin("devices_differ",
        BadCase(Case((torch.zeros(1, 2, device="meta"), torch.ones(1, 2, dtype=torch.int64))),
                ValueError, "x on another device than the mask (a meta tensor stands for it)"),
        "x and attention_mask on different devices: a ValueError naming both, no implicit copy"),
]

UNPAD = register(OpInfo(
    op="varlen",
    function="unpad",
    valid=unpad_cases(),
    invalid=hs.one_or_two_defects(bad_unpad_cases, unpad_cases(), _reference.unpad),
    compare=assert_identical,
    properties=[
        Property.of(prop_unpad_round_trip, name="round_trip"),
        Property.of(prop_unpad_cu_seqlens, name="cu_seqlens"),
    ],
    pins=UNPAD_PINS,
    devices=("cpu", "cuda"),
    to_device=_tensors_on,
    example=HOLES,
    doc="flash-attn unpad_input: (values, indices, cu_seqlens, max_seqlen) of the mask's ones",
))


@st.composite
def repad_cases(draw) -> Case:
    """The output of unpad, optionally with (values, indices) shuffled together: pad_input
    accepts indices in any order."""
    x, mask = draw(masked_tensors())
    values, indices, _, _ = _reference.unpad(x, mask)
    if draw(st.booleans()) and indices.numel() > 1:
        order = torch.randperm(indices.numel(), generator=draw(hs.generators()))
        values, indices = values[order], indices[order]
    return Case((values, indices, x.shape[0], x.shape[1]))


@st.composite
def bad_repad_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on a valid call (`valid`, default `repad_cases()`)."""
    values, indices, batch, seqlen = draw(valid if valid is not None else repad_cases()).args
    kind = draw(st.sampled_from(["duplicate", "outside", "float_indices", "indices_2d", "count",
                                 "negative_batch", "batch_type", "values_list", "indices_list",
                                 "values_0d"]))
    if kind == "indices_list":
        return BadCase(Case((values, indices.tolist(), batch, seqlen)), TypeError,
                       "indices a list")
    if kind == "values_0d":
        return BadCase(Case((torch.tensor(1.0), indices[:1], batch, seqlen)), ValueError,
                       "values is 0-d")
    if kind == "duplicate" and indices.numel() > 1:
        indices = indices.clone()
        indices[1] = indices[0]
        return BadCase(Case((values, indices, batch, seqlen)), ValueError, "repeated index")
    if kind == "outside" and indices.numel() > 0:
        indices = indices.clone()
        indices[-1] = batch * seqlen + draw(st.integers(0, 3))
        return BadCase(Case((values, indices, batch, seqlen)), ValueError, "index >= B*S")
    if kind == "float_indices":
        return BadCase(Case((values, indices.float(), batch, seqlen)), TypeError, "float indices")
    if kind == "indices_2d":
        return BadCase(Case((values, indices[None], batch, seqlen)), ValueError, "2-D indices")
    if kind == "count":
        return BadCase(Case((values, torch.cat([indices, torch.tensor([0])]), batch, seqlen)),
                       ValueError, "one index too many")
    if kind == "negative_batch":
        return BadCase(Case((values, indices, -1, seqlen)), ValueError, "batch < 0")
    if kind == "batch_type":
        return BadCase(Case((values, indices, float(batch), seqlen)), TypeError, "batch float")
    return BadCase(Case((values.tolist(), indices, batch, seqlen)), TypeError, "values a list")


def prop_scatter_back(case: Case, out) -> None:
    """(batch, seqlen, ...) in values' dtype: out[b, s] = values[i] where indices[i] = b*S + s,
    zero at every other position."""
    values, indices, batch, seqlen = case.args
    _assert(tuple(out.shape) == (batch, seqlen, *values.shape[1:]) and out.dtype == values.dtype,
            f"got {tuple(out.shape)} {out.dtype}")
    flat = out.reshape(batch * seqlen, *values.shape[1:])
    placed = dict(zip(indices.tolist(), range(len(indices))))
    for position in range(batch * seqlen):
        want = values[placed[position]] if position in placed else torch.zeros_like(flat[0])
        _assert(torch.equal(flat[position], want),
                f"position {position} (row {position // max(seqlen, 1)}): {flat[position]} != "
                f"{want}")


REPAD = register(OpInfo(
    op="varlen",
    function="repad",
    valid=repad_cases(),
    invalid=hs.one_or_two_defects(bad_repad_cases, repad_cases(), _reference.repad),
    compare=assert_identical,
    properties=[Property.of(prop_scatter_back)],
    pins=[Pin("duplicate_indices",
              BadCase(Case((torch.ones(2, 1), torch.tensor([1, 1]), 1, 3)), ValueError,
                      "two values for one position"),
              "pad_input silently keeps one of two values written to the same position"),
          Pin("repeat_before_outside",
              BadCase(Case((torch.ones(3), torch.tensor([1, 1, 99]), 2, 3)), ValueError,
                      "indices[1] repeats, indices[2] is outside"),
              "the first bad index is named, whichever its defect (the impl named the outside "
              "one first until 2026-11-24)"),
          Pin("indices_list", BadCase(Case((torch.ones(1), [0], 1, 1)), TypeError,
                                      "indices a list"), "indices must be a tensor"),
          Pin("float_indices", BadCase(Case((torch.ones(1), torch.tensor([0.0]), 1, 1)),
                                       TypeError, "float indices"),
              "float indices are a TypeError, never truncated"),
          Pin("values_0d", BadCase(Case((torch.tensor(1.0), torch.tensor([0]), 1, 1)),
                                   ValueError, "values is 0-d"),
              "values need a first (token) dimension"),
          Pin("unsorted_indices",
              Case((torch.tensor([[1.0], [2.0], [3.0]]), torch.tensor([5, 0, 2]), 2, 3)),
              "pad_input scatters by index, whatever the order of the indices",
              lambda case, out: _assert(out.reshape(-1).tolist() == [2, 0, 3, 0, 0, 1],
                                        f"{out.reshape(-1).tolist()}"))],
    devices=("cpu", "cuda"),
    to_device=_tensors_on,
    doc="flash-attn pad_input: scatter unpadded values back into a zero (B, S, ...) tensor",
))

# --------------------------------------------------------------------------- repad_routes


@st.composite
def token_routes(draw, count: int) -> torch.Tensor:
    """`count` routes `[count, layers, topk]` of one drawn route dtype (`batchproof.replay`'s
    sizes), each (token, layer) `topk` distinct expert ids, as a real router's top-k."""
    dtype = draw(st.sampled_from(replay.ROUTE_DTYPES))
    layers = draw(st.integers(1, replay.MAX_LAYERS))
    topk = draw(st.integers(1, replay.MAX_TOPK))
    experts = draw(st.integers(topk, replay.MAX_EXPERTS))
    scores = torch.rand((count, layers, experts), generator=draw(hs.generators()))
    return scores.argsort(dim=-1)[..., :topk].to(dtype)


@st.composite
def repad_route_cases(draw) -> Case:
    """The routes of a padded (B, S) batch unpadded by the reference's `unpad` (masks with
    holes, left- or right-padded, all ones or zeros), as repad gets them — (routes (nnz, layers,
    topk), indices, B, S), sometimes shuffled together — and, in half the examples, the router
    padding mask of the unpadded tokens (some of them uncaptured)."""
    _, mask = draw(masked_tensors())
    batch, seqlen = mask.shape
    routes = draw(token_routes(batch * seqlen))
    values, indices, _, _ = _reference.unpad(routes.reshape(batch, seqlen, *routes.shape[1:]),
                                             mask)
    if draw(st.booleans()) and indices.numel() > 1:
        order = torch.randperm(indices.numel(), generator=draw(hs.generators()))
        values, indices = values[order], indices[order]
    kwargs = {}
    if draw(st.booleans()):
        flags = torch.rand(indices.numel(), generator=draw(hs.generators())) < 0.3
        kwargs["router_padding_mask"] = flags
    return Case((values, indices, batch, seqlen), kwargs)


REPAD_ROUTE_DEFECTS = ["repad", "repad", "float", "rank", "negative", "topk_uint8",
                       "mask_dtype", "mask_length", "mask_list"]


@st.composite
def bad_repad_route_cases(draw, *, valid: st.SearchStrategy[Case] | None = None) -> BadCase:
    """One defect on a valid call (`valid`, default `repad_route_cases()`): one of `repad`'s
    (its indices, sizes, a routes argument that is no tensor: `bad_repad_cases`), or a routes
    tensor of no route dtype, rank or values, or a bad router padding mask."""
    kind = draw(st.sampled_from(REPAD_ROUTE_DEFECTS))
    good = draw(valid if valid is not None else repad_route_cases())
    (routes, indices, batch, seqlen), kwargs = good.args, dict(good.kwargs)
    if kind == "repad":
        bad = draw(bad_repad_cases(valid=st.just(Case(good.args))))
        return BadCase(bad.case.replace(**kwargs), bad.raises, bad.why)
    if kind == "float":
        return _bad((routes.float(), indices, batch, seqlen), kwargs, TypeError, "float routes")
    if kind == "rank":
        flat = routes.reshape(routes.shape[0], routes.shape[1] * routes.shape[2])
        return _bad((flat, indices, batch, seqlen), kwargs, ValueError, "routes 2-D")
    if kind == "negative" and routes.dtype != torch.uint8 and routes.numel():
        routes = routes.clone()
        routes.view(-1)[draw(st.integers(0, routes.numel() - 1))] = -1
        return _bad((routes, indices, batch, seqlen), kwargs, ValueError, "a negative id")
    if kind == "topk_uint8" or kind == "negative":
        wide = torch.zeros((routes.shape[0], 1, 257), dtype=torch.uint8)
        return _bad((wide, indices, batch, seqlen), kwargs, ValueError, "topk 257 in uint8")
    flags = torch.zeros(routes.shape[0], dtype=torch.bool)
    if kind == "mask_dtype":
        return _bad(good.args, {"router_padding_mask": flags.to(torch.int64)}, TypeError,
                    "an integer router_padding_mask")
    if kind == "mask_length":
        return _bad(good.args, {"router_padding_mask": torch.zeros(routes.shape[0] + 1,
                                                                   dtype=torch.bool)},
                    ValueError, "a router_padding_mask of another length")
    return _bad(good.args, {"router_padding_mask": flags.tolist()}, TypeError,
                "router_padding_mask a list")


def prop_routes_scatter_back(case: Case, out) -> None:
    """routed_experts (B, S, layers, topk) in the given dtype and router_padding_mask (B, S,
    bool): route i at flat slot indices[i] with the mask False there — the dummy route and True
    where the given router_padding_mask marks token i — and the dummy route with True at every
    slot no index names (never zeros)."""
    routes_in, indices, batch, seqlen = case.args
    given = case.kwargs.get("router_padding_mask")
    layers, topk = routes_in.shape[1:]
    routes, mask = out["routed_experts"].cpu(), out["router_padding_mask"].cpu()
    _assert(tuple(routes.shape) == (batch, seqlen, layers, topk)
            and routes.dtype == routes_in.dtype,
            f"routed_experts is {tuple(routes.shape)} {routes.dtype}, expected "
            f"{(batch, seqlen, layers, topk)} {routes_in.dtype}")
    _assert(tuple(mask.shape) == (batch, seqlen) and mask.dtype == torch.bool,
            f"router_padding_mask is {tuple(mask.shape)} {mask.dtype}")
    dummy = replay.dummy_slot(layers, topk, routes.dtype)
    placed = dict(zip(indices.tolist(), range(len(indices))))
    flags = [False] * len(indices) if given is None else given.tolist()
    flat, flat_mask = routes.reshape(-1, layers, topk), mask.reshape(-1).tolist()
    for slot in range(batch * seqlen):
        i = placed.get(slot)
        captured = i is not None and not flags[i]
        want = routes_in[i].cpu() if captured else dummy
        _assert(torch.equal(flat[slot], want) and flat_mask[slot] == (not captured),
                f"slot {slot} (row {slot // max(seqlen, 1)}): route {flat[slot].tolist()}, mask "
                f"{flat_mask[slot]}; expected {want.tolist()}, {not captured}")


def prop_repad_dummy_where_masked(case: Case, out) -> None:
    """Every slot whose router_padding_mask is True holds the dummy route 0 .. topk-1."""
    assert_dummy_where_masked(out["routed_experts"].cpu(), out["router_padding_mask"].cpu(),
                              "flat slot")


def prop_repad_route_count(case: Case, out) -> None:
    """Per layer the B * S slots send B * S * topk distinct (token, expert) assignments."""
    assert_route_count(out["routed_experts"].cpu(), [case.args[0].cpu()], "the repadded batch")


def _route_values(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.uint8)


REPAD_ROUTE_PINS = [
    Pin("dummy_not_zeros",
        Case((_route_values([[[3, 1]], [[2, 5]], [[4, 0]]]), torch.tensor([0, 2, 3]), 2, 2)),
        "slot 1 holds no token: the dummy route [0, 1] with the mask True, never the [0, 0] "
        "a zero-filling repad (flash-attn's pad_input on routes) leaves",
        lambda case, out: _assert(
            out["routed_experts"][..., 0, :].tolist() == [[[3, 1], [0, 1]], [[2, 5], [4, 0]]]
            and out["router_padding_mask"].tolist() == [[False, True], [False, False]],
            f"{out['routed_experts'][..., 0, :].tolist()}, "
            f"{out['router_padding_mask'].tolist()}")),
    Pin("uncaptured_token_masked",
        Case((_route_values([[[3, 1]], [[2, 5]]]), torch.tensor([1, 0]), 1, 3),
             {"router_padding_mask": torch.tensor([True, False])}),
        "token 0 (at slot 1) has no captured route: the dummy route and True there, its given "
        "route never read",
        lambda case, out: _assert(
            out["routed_experts"][0, :, 0].tolist() == [[2, 5], [0, 1], [0, 1]]
            and out["router_padding_mask"].tolist() == [[False, True, True]],
            f"{out['routed_experts'][0, :, 0].tolist()}, {out['router_padding_mask'].tolist()}")),
    Pin("route_float_dtype",
        BadCase(Case((torch.zeros(2, 1, 2), torch.tensor([0, 1]), 1, 2)), TypeError,
                "float routes"), "routes hold integer expert ids"),
    Pin("router_padding_mask_of_another_length",
        BadCase(Case((_route_values([[[0, 1]]]), torch.tensor([0]), 1, 1),
                     {"router_padding_mask": torch.tensor([False, True])}), ValueError,
                "2 mask entries for 1 token"), "one mask entry per unpadded token"),
]

REPAD_ROUTES = register(OpInfo(
    op="varlen",
    function="repad_routes",
    valid=repad_route_cases(),
    invalid=hs.one_or_two_defects(bad_repad_route_cases, repad_route_cases(),
                                  _reference.repad_routes),
    compare=assert_identical,
    properties=[
        Property.of(prop_routes_scatter_back),
        Property.of(prop_repad_dummy_where_masked, name="dummy_routes_where_masked"),
        Property.of(prop_repad_route_count, name="route_count_per_layer"),
    ],
    pins=REPAD_ROUTE_PINS,
    devices=("cpu", "cuda"),
    to_device=lambda case, device: tensors_on(case, device),
    example=REPAD_ROUTE_PINS[0].case,
    doc="repad for routes: unpadded routes back into (B, S, layers, topk), the dummy route "
        "(never zeros) and a True router_padding_mask at every slot without one",
))

# --------------------------------------------------------------------------- response_logprobs

def model_specs() -> list[ModelSpec]:
    """Every family of `batchproof.models.FAMILIES` the installed transformers has (attention,
    hybrid and recurrent), each with its attention implementations, float32, CPU. A function:
    asking whether a hybrid family exists imports transformers, which importing the registry
    must not do."""
    return specs(architectures=tuple(FAMILIES))


# packing modes per kind of family: a hybrid or recurrent family is drawn with the modes that
# keep its samples apart ("auto" scores it one sample per row; "position_ids" and "mask" refuse it
# with a RuntimeError, which the reference does not raise: tests/test_varlen.py checks that)
ATTENTION_PACKING = (None, "position_ids", "mask", "rows")  # None: the default, "auto"
HYBRID_PACKING = (None, "rows")


@st.composite
def logprob_cases(draw, *, models: list[ModelSpec] | None = None) -> ModelCase:
    """A tiny model (every family by default), then a few samples of a few tokens, then the
    packing options (the modes that keep the family's samples apart: `HYBRID_PACKING` for a
    family whose layers carry state along the row)."""
    model = draw(st.sampled_from(models if models is not None else model_specs()))
    prompts, responses = draw(samples(max_rows=MODEL_MAX_ROWS, max_len=MODEL_MAX_LEN,
                                      vocab=VOCAB))
    kwargs = {}
    if draw(st.booleans()):  # a budget that splits the batch into several micro-batches
        longest = max(len(p) + len(r) for p, r in zip(prompts, responses))
        kwargs["max_tokens_per_batch"] = max(1, longest + draw(st.integers(0, 8)))
    if draw(st.booleans()):
        kwargs["pad_to_multiple"] = draw(st.sampled_from([1, 4, 8]))
    packing = draw(st.sampled_from(ATTENTION_PACKING if model.packs else HYBRID_PACKING))
    if packing is not None:
        kwargs["packing"] = packing
    return ModelCase((prompts, responses), kwargs, model=model)


LOGPROB_DEFECTS = ["empty_prompt", "token_too_large", "negative_token", "over_budget", "packing",
                   "chunk_size", "with_grad", "not_a_model", "count", "option_type"]


@st.composite
def bad_logprob_cases(draw, *, valid: st.SearchStrategy[ModelCase] | None = None) -> BadCase:
    """One defect on drawn samples and model (no keyword argument but the defect's), or on a
    call `valid` draws (its model and keyword arguments kept; `empty_prompt` changes prompts
    and responses, `over_budget` the prompts and the budget, `not_a_model` the whole call)."""
    kind = draw(st.sampled_from(LOGPROB_DEFECTS))  # first: Hypothesis favours the first kind
    if valid is None:
        model = draw(st.sampled_from(model_specs()))
        prompts, responses = draw(samples(max_rows=MODEL_MAX_ROWS, max_len=MODEL_MAX_LEN,
                                          vocab=VOCAB))
        prompts, responses = [list(p) for p in prompts], [list(r) for r in responses]
        kw = {}
    else:
        good = draw(valid)
        model, (prompts, responses), kw = good.model, good.args, dict(good.kwargs)
    k = draw(st.integers(0, len(prompts) - 1))
    if kind == "empty_prompt":
        prompts, responses = list(prompts), list(responses)
        prompts[k], responses[k] = [], responses[k] or [5]
        return _bad((prompts, responses), kw, ValueError, f"p == 0 < r in sample {k}", model)
    if kind in ("token_too_large", "negative_token"):
        prompts = list(prompts)
        prompts[k] = prompts[k] + [VOCAB if kind == "token_too_large" else -1]
        return _bad((prompts, responses), kw, ValueError, f"prompts[{k}] outside vocab", model)
    if kind == "over_budget":
        prompts = list(prompts)
        prompts[k] = prompts[k] + [1]
        budget = len(prompts[k]) + len(responses[k]) - 1
        return _bad((prompts, responses), kw | {"max_tokens_per_batch": budget}, ValueError,
                    f"sample {k} exceeds the budget", model)
    if kind == "packing":
        return _bad((prompts, responses), kw | {"packing": "flash"}, ValueError, "packing", model)
    if kind == "chunk_size":
        return _bad((prompts, responses), kw | {"chunk_size": 0}, ValueError, "chunk_size 0",
                    model)
    if kind == "with_grad":
        return _bad((prompts, responses), kw | {"with_grad": 1}, TypeError, "with_grad int",
                    model)
    if kind == "not_a_model":
        return BadCase(Case((None, prompts, responses), kw), TypeError, "model is None")
    if kind == "option_type":
        name, value = draw(st.sampled_from([("max_tokens_per_batch", 64.0),
                                            ("pad_to_multiple", "8"), ("chunk_size", True)]))
        return _bad((prompts, responses), kw | {name: value}, TypeError, f"{name} not an int",
                    model)
    return _bad((prompts, responses[:-1] or [[1], [2]]), kw, ValueError, "counts differ", model)


def response_mask(case: Case) -> torch.Tensor:
    """(B, max r) bool: True on the last r_k columns of row k (the right-aligned layout)."""
    _, r_lens = _lengths(case)
    width = max(r_lens)
    return torch.tensor([[j >= width - r for j in range(width)] for r in r_lens],
                        dtype=torch.bool).reshape(len(r_lens), width)


def assert_response_logprobs_close(expected, actual, *, case: Case | None = None,
                                   **_context) -> dict[str, float]:
    """The registry comparator of `response_logprobs`: `assert_logprobs_close` per token under the
    response mask, with the tolerance of the model's dtype; exact zeros off the mask.

    With `case` (the drawn call) the mask and dtype come from it; without, the mask is where the
    oracle's output is non-zero (a log-probability is never exactly 0 on these models, and
    off-mask entries must be exactly 0 in both — `prop_zero_off_response` checks the oracle's
    zeros against the lengths) and the dtype is float32, the registry's models' dtype.
    """
    if case is not None and isinstance(case, ModelCase):
        mask, dtype = response_mask(case), case.model.torch_dtype
    else:
        mask, dtype = expected.detach().cpu() != 0, torch.float32
    try:
        return assert_logprobs_close(expected, actual, mask, dtype)
    except Mismatch as err:
        raise Mismatch(f"{err}\n{_logprob_picture(expected, actual, mask, dtype)}") from None


def _logprob_picture(expected, actual, mask, dtype) -> str:
    """The worst row, one character per column: `.` off the mask, `r` close, `x` beyond tol."""
    if expected.shape != actual.shape or expected.dim() != 2 or expected.numel() == 0:
        return "(no picture)"
    tol = LOGPROB_TOLERANCE[dtype][0]
    delta = (expected.detach().cpu().double() - actual.detach().cpu().double()).abs()
    delta = torch.where(mask, delta, torch.zeros((), dtype=delta.dtype))
    row = int(delta.max(dim=1).values.argmax())
    marks = ["." if not m else ("x" if d > tol else "r")
             for m, d in zip(mask[row].tolist(), delta[row].tolist())]
    return f"row {row}:  {''.join(marks)}   (. off the response, r within tolerance, x beyond)"


def prop_zero_off_response(case: Case, out) -> None:
    """(B, max r) float32; exactly +0.0 left of each row's last r_k columns; finite and <= 0
    (log-probabilities) on them."""
    p_lens, r_lens = _lengths(case)
    mask = response_mask(case)
    _assert(out.dtype == torch.float32 and tuple(out.shape) == tuple(mask.shape),
            f"got {tuple(out.shape)} {out.dtype}, expected {tuple(mask.shape)} float32")
    off = out[~mask]
    _assert(bool((off.view(torch.int32) == 0).all()),
            f"off the response the output must be exactly +0.0, got {off.tolist()}")
    on = out[mask]
    _assert(bool(torch.isfinite(on).all()) and bool((on <= 0).all()),
            f"response logprobs must be finite and <= 0, got {on.tolist()}")


def prop_samples_isolated(case: Case, out, candidate) -> None:
    """Scoring the first half and the second half of the batch separately gives the same rows
    (within the float32 tolerance): a sample's logprobs never depend on its neighbours."""
    prompts, responses = case.args
    half = len(prompts) // 2
    if half == 0:
        return
    mask = response_mask(case)
    for rows in (slice(0, half), slice(half, None)):
        part = case.replace(prompts[rows], responses[rows]).call(candidate).detach().cpu()
        width = part.shape[1]
        whole = out[rows, out.shape[1] - width:]
        try:
            assert_logprobs_close(whole, part, mask[rows, out.shape[1] - width:], torch.float32)
        except Mismatch as err:
            raise Mismatch(f"samples {rows.start}..{rows.stop or len(prompts)} scored apart "
                           f"differ from the same samples scored in the full batch (they "
                           f"attend to their neighbours): {err}") from None


# ------------------------------------------------- gradients: packed against per-sample forwards

GRADIENT_TOLERANCE = {
    # dtype: r, the largest |Δ| allowed in one parameter's gradient as a multiple of
    # max(1, max |g|) over that parameter's reference gradient (docs/equivalence.md measures it)
    torch.float32: 1e-5,
    torch.bfloat16: 5e-2,
    torch.float16: 5e-2,
}


def unique_tokens(prompts, responses, vocab: int = VOCAB):
    """The same lengths with every token a distinct id (token i of the batch, counted prompt_0,
    response_0, prompt_1, ..., becomes (37 i + 11) % vocab): the gradient of a token's row of
    the embedding matrix is then the gradient of that one input embedding. None when the batch
    has more tokens than the vocabulary."""
    total = sum(len(row) for pair in zip(prompts, responses) for row in pair)
    if total > vocab:
        return None
    ids = iter((37 * i + 11) % vocab for i in range(total))
    new_prompts, new_responses = [], []
    for prompt, response in zip(prompts, responses):
        new_prompts.append([next(ids) for _ in prompt])
        new_responses.append([next(ids) for _ in response])
    return new_prompts, new_responses


def model_gradients(fn, model, prompts, responses, kwargs) -> dict[str, torch.Tensor]:
    """d sum(fn(model, prompts, responses, **kwargs, with_grad=True)) / d parameter, for every
    parameter (zeros where the graph does not reach it, everywhere when no sample has a
    response: the output then has no graph); `model`'s gradients are reset first."""
    for parameter in model.parameters():
        parameter.grad = None
    total = fn(model, prompts, responses, **{**kwargs, "with_grad": True}).sum()
    if total.requires_grad:
        total.backward()
    return {name: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().cpu().float()
            for name, p in model.named_parameters()}


def assert_gradients_close(expected: dict, actual: dict, dtype: torch.dtype, *,
                           embedding: str = "", tokens: dict | None = None) -> dict[str, float]:
    """Every parameter's gradient within `GRADIENT_TOLERANCE[dtype]` x max(1, max |g|) of the
    reference's; the rows of the input embedding matrix (`embedding`, the parameter's name) that
    `tokens` maps to a place in the batch (`{token id: "responses[1][0]"}`) first, each named by
    that place. Returns the largest |Δ| and its ratio to the allowed |Δ|."""
    ratio = GRADIENT_TOLERANCE[dtype]
    worst = {"max_abs": 0.0, "of_tolerance": 0.0}

    def check(name: str, want: torch.Tensor, got: torch.Tensor, scale: float) -> None:
        delta = float((want - got).abs().max()) if want.numel() else 0.0
        allowed = ratio * max(1.0, scale)
        worst["max_abs"] = max(worst["max_abs"], delta)
        worst["of_tolerance"] = max(worst["of_tolerance"], delta / allowed)
        if not delta <= allowed:  # NaN fails too
            raise Mismatch(f"gradient of {name}: max |Δ| {delta:.3g} beyond the {dtype} "
                           f"tolerance {allowed:.3g} ({ratio:g} x max(1, max |g| = {scale:.3g}))")

    _assert(set(expected) == set(actual), f"parameters differ: {sorted(set(expected) ^ set(actual))}")
    if embedding and tokens:
        scale = float(expected[embedding].abs().max())
        for token, place in tokens.items():
            check(f"the input embedding of {place}", expected[embedding][token],
                  actual[embedding][token], scale)
    for name in expected:
        check(name, expected[name], actual[name], float(expected[name].abs().max()))
    return worst


def prop_gradients(case: Case, out, candidate) -> None:
    """The gradients of the summed response logprobs with respect to every parameter and every
    input embedding (token ids made distinct, so each embedding row is one position's) equal the
    per-sample dense forwards' (the oracle), within `GRADIENT_TOLERANCE` of the model's dtype:
    a packed forward that leaks between samples, or a log-softmax whose normaliser is detached,
    changes them."""
    if not isinstance(case, ModelCase):
        return
    prompts, responses = case.args
    relabelled = unique_tokens(prompts, responses)
    if relabelled is not None:
        prompts, responses = relabelled
    model = trainable_model(case.model)
    kwargs = {k: v for k, v in case.kwargs.items() if k != "with_grad"}
    expected = model_gradients(_reference.response_logprobs, model, prompts, responses, kwargs)
    actual = model_gradients(candidate, model, prompts, responses, kwargs)
    embedding = next(n for n, p in model.named_parameters()
                     if p is model.get_input_embeddings().weight)
    tokens = {} if relabelled is None else {
        token: f"{name}[{k}][{j}]" for name, rows in (("prompts", prompts),
                                                      ("responses", responses))
        for k, row in enumerate(rows) for j, token in enumerate(row)}
    assert_gradients_close(expected, actual, case.model.torch_dtype, embedding=embedding,
                           tokens=tokens)


def _model_case(prompts, responses, arch="llama", attn="eager", **kwargs) -> ModelCase:
    return ModelCase((prompts, responses), kwargs, model=ModelSpec(arch, attn))


# one pin per hybrid or recurrent family: three samples, the first two in one micro-batch, the
# second with a one-token prompt (its first response token is scored at the very position whose
# state the previous sample would leak into)
HYBRID_PROMPTS = [[5, 17, 33], [2], [40, 41, 42, 43]]
HYBRID_RESPONSES = [[7, 8, 9, 10], [11, 12, 13], [14, 15]]
HYBRID_PINS = {
    "lfm2": ("short_conv_boundaries", "sdpa",
             "LFM2's short convolution (kernel 3) reads the two tokens before each position: "
             "packed, the previous sample's last two (transformers' PyTorch path passes no "
             "boundaries to it)"),
    "qwen3_next": ("gated_delta_net_boundaries", "sdpa",
                   "Qwen3-Next's gated delta net (and its convolution) run over the packed row "
                   "as one sequence: the recurrent state flows into the next sample "
                   "(cu_seq_lens are ignored by the PyTorch kernel)"),
    "qwen3_5": ("qwen3_5_gated_delta_net_boundaries", "eager",
                "Qwen3.5's text model: the same gated delta net leak"),
    "bamba": ("bamba_mamba_boundaries", "sdpa",
              "Bamba's Mamba2 mixer scans the packed row as one sequence"),
    "nemotron_h": ("nemotron_h_mamba_boundaries", "eager",
                   "Nemotron-H's Mamba2 mixer scans the packed row as one sequence"),
    "mamba2": ("mamba2_boundaries", "eager",
               "a pure Mamba2: every layer carries its state into the next sample"),
}


CROSS_SAMPLE = _model_case([[5, 17, 33], [2, 9], [40, 41, 42, 43]],
                           [[7, 8, 9, 10], [11, 12, 13], [14, 15]])

LOGPROB_PINS = [
    Pin("cross_sample_attention", CROSS_SAMPLE,
        "packed forwards must not attend across samples: a cache object (use_cache default), an "
        "all-ones 2-D mask, non-restarted position_ids or a bool 4-D mask under eager all let "
        "them (|Δ| 0.1-0.5 on these models)"),
    Pin("cross_sample_attention_sdpa", _model_case(*CROSS_SAMPLE.args, arch="qwen3", attn="sdpa",
                                                   max_tokens_per_batch=12, pad_to_multiple=4),
        "the same under sdpa, split into micro-batches with tail pads"),
    Pin("empty_responses_and_zero_length_middle",
        _model_case([[1, 2], [], [3], [4, 5, 6]], [[], [], [7, 8], [9]], arch="qwen2"),
        "r == 0 rows are all zeros; a zero-length sample in the middle shifts nothing"),
    Pin("single_token_prompts", _model_case([[7], [8]], [[1, 2, 3], [4]], attn="sdpa"),
        "p == 1: the first response token is scored by the sample's own first logit"),
    Pin("empty_prompt_reads_previous_logit",
        BadCase(ModelCase(([[1, 2], []], [[3], [4, 5]]), {}, model=ModelSpec("llama", "sdpa")),
                ValueError, "p == 0 < r"),
        "p == 0 with r > 0 has no logit for its first response token: rejected, never scored with "
        "the previous sample's last logit"),
    Pin("sample_over_budget",
        _bad(([[1, 2], [3]], [[4], [5]]), {"max_tokens_per_batch": 2}, ValueError,
             "sample 0 has 3 tokens, budget 2", ModelSpec("llama", "eager")),
        "a sample longer than the token budget is rejected, never truncated or split"),
    Pin("with_grad_not_a_bool",
        _bad(([[1]], [[2]]), {"with_grad": 1}, TypeError, "with_grad is an int",
             ModelSpec("llama", "eager")), "with_grad must be a bool"),
    *[Pin(name, _model_case(HYBRID_PROMPTS, HYBRID_RESPONSES, arch=arch, attn=attn), why)
      for arch, (name, attn, why) in HYBRID_PINS.items()],
]

RESPONSE_LOGPROBS = register(OpInfo(
    op="varlen",
    function="response_logprobs",
    valid=logprob_cases(),
    invalid=hs.one_or_two_defects(bad_logprob_cases, logprob_cases(), _reference.response_logprobs),
    compare=assert_response_logprobs_close,
    properties=[
        Property.of(prop_zero_off_response),
        Property.of(prop_samples_isolated, metamorphic=True),
        Property.of(prop_gradients, metamorphic=True),
    ],
    pins=LOGPROB_PINS,
    forms={"lists": lambda c: c, "jagged": _jagged_form,
           "jagged with holes": lambda c: _jagged_form(c, holes=True)},
    devices=("cpu", "cuda"),
    to_device=_model_case_on,
    # the samples packed as pack_varlen packs tensors (the micro-batches' rows)
    paths=Paths(kernel=(_SAMPLES_KERNEL,), cpu=(_COPY_ROWS,), triton=_TRITON_SAMPLES),
    describe_row=describe_samples,
    example=CROSS_SAMPLE,
    doc="per-token response logprobs: packed micro-batches vs per-sample dense forwards",
    requires=("transformers",),
))
