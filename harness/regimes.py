"""Regimes: what a record's strategy promises to draw, and how often a run's budget draws it.

A strategy's docstring (and docs/<op>.md) advertise the shapes that broke real code:
anti-correlated prompt/response lengths, empty prompts, a tail pad longer than every sample,
a loss-mask total past 2**24 ... A change that narrows a strategy makes every check pass more
easily, so nothing else notices it. Here each advertised regime is a named predicate on a drawn
input, and `coverage` counts how many of a profile's examples reach it:

    REGIMES["rl_batch.build_rl_batch"]["anti_correlated"](case) -> bool
    coverage("rl_batch.build_rl_batch") -> {"anti_correlated": 16, ...}   # of 240 draws

`coverage` draws BUDGETS (4) `ci` budgets, 240 examples. Derandomized draws are not the same on every
run: Hypothesis mixes constants from the modules loaded so far into what it draws, so one 60-draw
sample depends on which tests ran before it in the worker (a CI run drew no anti-correlated batch
where a fresh process drew four). What is stable is the rate: `tests/test_regimes.py` fails when
a regime is drawn fewer than MIN_HITS times in those 240, i.e. when a `ci` run of its record would
not reach it about once; `batchproof list regimes` prints the table (docs/harness.md, "Regimes").
Predicates read the input through `batchproof.calls.Call` (arguments by their contract names).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from tensordict import TensorDictBase

from batchproof import registry
from batchproof.profiles import draws_independent_of_loaded_modules
from batchproof.registry import Case

Regime = Callable[[Any], bool]

BUDGETS = 4  # coverage draws this many `ci` budgets: a rate, not one seed's sample
MIN_HITS = 2  # fewer hits than this in BUDGETS budgets: the regime is no longer drawn


# --------------------------------------------------------------------------- reading inputs


def _pairs(call, prompts: str = "prompts", responses: str = "responses") -> list[tuple[int, int]]:
    p, r = call.lengths(prompts) or [], call.lengths(responses) or []
    return list(zip(p, r))


def _tokens(call, *names: str) -> list[int]:
    out: list[int] = []
    for name in names:
        for row in call.rows(name) or []:
            values = call.values(row)
            out += [v for v in values or [] if isinstance(v, int)]
    return out


def length_regimes(prompts: str = "prompts", responses: str = "responses",
                   pad: str | None = "pad_token_id", without: tuple[str, ...] = ()
                   ) -> dict[str, Regime]:
    """The shapes `blocks.length_pairs` promises (and the pad id among the tokens), less
    `without` (shapes the record's contract rules out)."""
    def pairs(call):
        return _pairs(call, prompts, responses)

    def anti_correlated(call) -> bool:
        found = pairs(call)
        return len(found) >= 3 and found[-1][0] - found[0][0] >= 2 \
            and found[0][1] - found[-1][1] >= 2

    def all_equal(call) -> bool:
        found = pairs(call)
        return len(found) >= 2 and len(set(found)) == 1 and found[0] != (0, 0)

    regimes = {
        "anti_correlated": anti_correlated,
        "all_equal": all_equal,
        "every_prompt_empty": lambda c: bool(pairs(c)) and all(p == 0 for p, _ in pairs(c))
        and any(r for _, r in pairs(c)),
        "every_response_empty": lambda c: bool(pairs(c)) and all(r == 0 for _, r in pairs(c))
        and any(p for p, _ in pairs(c)),
        "empty_row_among_others": lambda c: (0, 0) in pairs(c)
        and any(p + r for p, r in pairs(c)),
        "single_sample": lambda c: len(pairs(c)) == 1,
        "one_long_row": lambda c: _one_long(pairs(c)),
    }
    if pad is not None:
        regimes["pad_id_among_tokens"] = lambda c: c.arg(pad) in _tokens(c, prompts, responses)
    return {name: regime for name, regime in regimes.items() if name not in without}


def _one_long(pairs: list[tuple[int, int]]) -> bool:
    """One row at least twice as long as every other (and 8 tokens or more)."""
    totals = sorted((p + r for p, r in pairs), reverse=True)
    return len(totals) >= 3 and totals[0] >= 8 and totals[0] >= 2 * totals[1]


# --------------------------------------------------------------------------- per record


def _rl_batch() -> dict[str, Regime]:
    def width(call) -> int:
        return max((p + r for p, r in _pairs(call)), default=0)

    def rewards(kind: str) -> Regime:
        def drawn(call) -> bool:
            rows = call.rows("rewards")
            if rows is None:
                return False
            scalars = [not isinstance(v, (list, torch.Tensor)) for v in rows]
            return {"scalar": all(scalars), "per_token": not any(scalars),
                    "mixed": any(scalars) and not all(scalars)}[kind] and bool(rows)
        return drawn

    def weights(call) -> bool:
        return any(v not in (0, 1) for row in call.rows("loss_masks") or []
                   for v in call.values(row) or [])

    return {**length_regimes(),
            "two_segment": lambda c: c.arg("layout") == "two_segment",
            "rewards_scalar": rewards("scalar"), "rewards_per_token": rewards("per_token"),
            "rewards_mixed": rewards("mixed"),
            "loss_mask_weights": weights, "logprobs": lambda c: c.arg("logprobs") is not None,
            "max_seq_len_below_width": lambda c: c.arg("max_seq_len") is not None
            and c.arg("max_seq_len") < width(c),
            "max_seq_len_equal_to_width": lambda c: c.arg("max_seq_len") == width(c) > 0,
            **replay_regimes(lambda c: [p + r for p, r in _pairs(c)])}


def _pack_varlen() -> dict[str, Regime]:
    def tail(call) -> int | None:
        multiple = call.arg("pad_to_multiple")
        total = sum(p + r for p, r in _pairs(call))
        return None if multiple is None else -total % multiple

    def longest(call) -> int:
        return max((p + r for p, r in _pairs(call)), default=0)

    # a sample needs a prompt (the token before each response token predicts it)
    return {**length_regimes(without=("every_prompt_empty",)),
            "tail_pad_short": lambda c: tail(c) is not None and 1 <= tail(c) <= 3
            and tail(c) <= longest(c),
            "tail_pad_longer_than_every_sample": lambda c: (tail(c) or 0) > longest(c),
            "pad_to_multiple_absent": lambda c: "pad_to_multiple" not in c.kwargs,
            "pad_token_id_nonzero": lambda c: c.arg("pad_token_id") not in (0, None),
            "empty_response": lambda c: any(r == 0 for _, r in _pairs(c)),
            **replay_regimes(lambda c: [p + r for p, r in _pairs(c)])}


def _route_entries(call) -> list:
    routes = call.arg("routed_experts")
    if isinstance(routes, torch.Tensor) and routes.is_nested:
        return list(routes.unbind())
    return list(routes) if isinstance(routes, (list, tuple)) else []


def replay_regimes(tokens: Callable[[Any], list[int]]) -> dict[str, Regime]:
    """The router-replay inputs a record draws (`batchproof.replay`): routes given, captured
    for part of a sample's tokens (the rest gets the dummy route), in the narrowest dtype, and
    sample support; `tokens(call)` is each sample's token count."""
    def partly_captured(call) -> bool:
        counts = tokens(call)
        return any(entry.shape[0] < n for entry, n in zip(_route_entries(call), counts)
                   if entry is not None)

    return {"routed_experts": lambda c: c.arg("routed_experts") is not None,
            "routes_partly_captured": partly_captured,
            "routes_uint8": lambda c: any(getattr(e, "dtype", None) in (torch.uint8, np.uint8)
                                          for e in _route_entries(c)),
            "sample_support": lambda c: c.arg("sample_support") is not None}


def _collate_sft() -> dict[str, Regime]:
    def magnitude(kind: str) -> Regime:
        def drawn(call) -> bool:
            if call.arg("normalize") is not True:
                return False
            values = [v for ex in call.rows("examples") or [] if isinstance(ex, Mapping)
                      for v in call.values(ex.get("loss_mask")) or []]
            if kind == "infinities":
                return math.inf in values and -math.inf in values
            if not values or not all(math.isfinite(v) for v in values):
                return False
            total = math.fsum(values)
            if kind == "past_2_24":
                return total > 2**24 and total % 2 == 1
            if kind == "beyond_float32":
                return total > torch.finfo(torch.float32).max
            return any(abs(v) >= 2**53 for v in values)  # cancellation
        return drawn

    return {"normalize": lambda c: c.arg("normalize") is True,
            "total_odd_past_2_24": magnitude("past_2_24"),
            "total_beyond_float32": magnitude("beyond_float32"),
            "cancellation_2_53": magnitude("cancellation"),
            "plus_and_minus_inf": magnitude("infinities")}


def _pack_sft() -> dict[str, Regime]:
    from batchproof.reference import sft as oracle

    def config(call) -> tuple[int, int, int, bool, str]:
        """The parallel sizes (None read as 1), fp8 and its recipe (the contract's defaults)."""
        return (call.arg("dp_size") or 1, call.arg("tp_size") or 1, call.arg("cp_size") or 1,
                bool(call.arg("fp8")), call.arg("fp8_recipe"))

    def align(call) -> int:
        _, tp, cp, fp8, recipe = config(call)
        return oracle.align_size(tp, cp, fp8=fp8, fp8_recipe=recipe)

    def lengths(call) -> list[int]:
        return [len(ex["input_ids"]) for ex in call.rows("examples") or []
                if isinstance(ex, Mapping)]

    def every_slot_filled(call) -> bool:
        found, step = lengths(call), align(call)
        return step > 1 and bool(found) and all(n % step == 0 for n in found)

    return {"dp_above_1": lambda c: config(c)[0] > 1, "tp_above_1": lambda c: config(c)[1] > 1,
            "cp_above_1": lambda c: config(c)[2] > 1, "fp8": lambda c: config(c)[3],
            "every_slot_filled": every_slot_filled,
            "capacity_exact": lambda c: bool(found := lengths(c))
            and c.arg("capacity") == max(found)}


def _micro_batches() -> dict[str, Regime]:
    def group_sums(call) -> list:
        lengths = call.values(call.arg("lengths")) or []
        size = call.arg("group_size") or 1
        return [sum(lengths[i:i + size]) for i in range(0, len(lengths), size)]

    def split_in(call, counts: range) -> bool:
        """A budget just above total / count for a count in `counts` (a balanced split at the
        lower bound is tight)."""
        sums = group_sums(call)
        budget = call.arg("max_tokens")
        return bool(sums) and isinstance(budget, int) and any(
            budget <= -(-sum(sums) // n) + 2 and budget >= max(sums) for n in counts)

    return {"budget_is_the_largest_group": lambda c: bool(group_sums(c))
            and c.arg("max_tokens") == max(group_sums(c)),
            "budget_just_above_total_over_count": lambda c: split_in(c, range(2, 5)),
            "min_count": lambda c: c.arg("min_count") is not None,
            "count_multiple": lambda c: c.arg("count_multiple") is not None,
            "groups": lambda c: (c.arg("group_size") or 1) > 1}


def _karmarkar_karp() -> dict[str, Regime]:
    def n(call) -> int:
        return len(call.rows("values") or [])

    return {"equal_size": lambda c: c.arg("equal_size") is True,
            "k_equals_n": lambda c: c.arg("k") == n(c) > 1, "k_is_1": lambda c: c.arg("k") == 1,
            "ties": lambda c: len(set(map(float, c.values(c.arg("values")) or []))) < n(c)}


def _pad_to_multiple() -> dict[str, Regime]:
    def rows(call) -> int:
        td = call.arg("td")
        return td.batch_size[0] if isinstance(td, TensorDictBase) and td.batch_size else 0

    def multiple(call) -> int:
        value = call.arg("multiple")
        return value if isinstance(value, int) and value > 0 else 0

    def layout(call):
        td = call.arg("td")
        given = call.kwargs.get("layout")
        if given is None and isinstance(td, TensorDictBase) and "layout" in td.keys():
            given = td.get_non_tensor("layout")
        return given

    return {"pads_rows": lambda c: multiple(c) > 0 and rows(c) % multiple(c) != 0,
            "no_padding_needed": lambda c: multiple(c) > 0 and rows(c) % multiple(c) == 0,
            "two_segment": lambda c: layout(c) == "two_segment",
            "odd_min_length": lambda c: isinstance(c.kwargs.get("min_length"), int)
            and c.kwargs["min_length"] % 2 == 1}


def _required_multiple() -> dict[str, Regime]:
    return {"critic_only": lambda c: c.arg("actor_updates") is False
            and c.arg("mini_batch_size") is not None,
            "actor_with_samples": lambda c: c.arg("actor_updates") is not False
            and c.arg("mini_batch_size") is not None and (c.arg("n") or 1) >= 2,
            "dp_above_1": lambda c: isinstance(c.arg("dp_size"), int) and c.arg("dp_size") > 1}


def _pad_for_cp() -> dict[str, Regime]:
    """cp.pad_for_cp's router replay: routes per token, some marked uncaptured, uint8 ones."""
    def routes(call):
        value = call.arg("routed_experts")
        return value if isinstance(value, torch.Tensor) else None

    return {"routed_experts": lambda c: routes(c) is not None,
            "router_padding_mask": lambda c: isinstance(c.arg("router_padding_mask"),
                                                        torch.Tensor),
            "routes_uint8": lambda c: routes(c) is not None and routes(c).dtype == torch.uint8}


REGIMES: dict[str, dict[str, Regime]] = {}
_BUILDERS = {
    "rl_batch.build_rl_batch": _rl_batch,
    "varlen.pack_varlen": _pack_varlen,
    "sft.collate_sft": _collate_sft,
    "sft.pack_sft": _pack_sft,
    "balance.micro_batches": _micro_batches,
    "balance.karmarkar_karp": _karmarkar_karp,
    "trainer.pad_to_multiple": _pad_to_multiple,
    "trainer.required_multiple": _required_multiple,
    "cp.pad_for_cp": _pad_for_cp,
}


def regimes(record: str) -> dict[str, Regime]:
    """The regimes the record's valid strategy promises ({} for a record without any)."""
    if record not in REGIMES and record in _BUILDERS:
        REGIMES[record] = _BUILDERS[record]()
    return REGIMES.get(record, {})


def records() -> list[str]:
    return list(_BUILDERS)


def default_examples() -> int:
    """How many draws `coverage` takes by default: BUDGETS `ci` budgets."""
    from batchproof.profiles import PROFILES

    return BUDGETS * PROFILES["ci"].max_examples


def coverage(record: str, examples: int | None = None,
             strategy: st.SearchStrategy | None = None) -> dict[str, int]:
    """How many of `examples` derandomized draws of the record's valid strategy (or `strategy`)
    reach each regime (default: `default_examples()`, four `ci` budgets)."""
    from batchproof.calls import Call

    info = registry.get(record)
    budget = examples or default_examples()
    counts = dict.fromkeys(regimes(record), 0)

    def count(case: Case) -> None:
        call = Call.of(case, info.reference)
        for name, regime in regimes(record).items():
            if regime(call):
                counts[name] += 1

    search = settings(max_examples=budget, derandomize=True, database=None, deadline=None,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    with draws_independent_of_loaded_modules():
        search(given(strategy if strategy is not None else info.valid)(count))()
    return counts


def uncovered(record: str, **options: Any) -> list[str]:
    """The regimes drawn fewer than MIN_HITS times."""
    return [name for name, hits in coverage(record, **options).items() if hits < MIN_HITS]
