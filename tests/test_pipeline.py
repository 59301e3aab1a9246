"""`pipeline` tests beyond the generic registry checks (tests/test_registry.py, tests/test_zoo.py):
the example's literal ledger shape, the trace's stages, and `harness show`'s drawing."""

from __future__ import annotations

import torch

from harness import registry
from harness.ops.pipeline import BASE, EXAMPLE, step_case
from impl import pipeline as impl
from reference import pipeline as reference


def test_example_ledger() -> None:
    """10 response tokens (9 real + 1 of the padding row), padding row 5, rank and micro-batch
    of every entry equal in both chains."""
    expected = EXAMPLE.call(reference.rl_step)
    actual = EXAMPLE.call(impl.rl_step)
    assert expected.batch_size[0] == 10
    assert actual["sample"][actual["is_padding"]].tolist() == [5]
    assert torch.equal(expected["rank"], actual["rank"])
    assert torch.equal(expected["micro_batch"], actual["micro_batch"])


def test_trace_stages() -> None:
    trace = EXAMPLE.call(impl.trace_rl_step)
    assert list(trace) == ["left", "two_segment", "padded", "ranks", "dispatch",
                           "micro_batches", "ledger"]
    assert trace["left"].get_non_tensor("layout") == "left"
    assert trace["two_segment"].get_non_tensor("layout") == "two_segment"
    assert trace["padded"].batch_size[0] == 6
    assert sorted(r for rows in trace["ranks"] for r in rows) == list(range(6))


def test_reference_trace_matches() -> None:
    ref = EXAMPLE.call(reference.trace_rl_step)
    ours = EXAMPLE.call(impl.trace_rl_step)
    assert ref["ranks"] == ours["ranks"]
    assert ref["micro_batches"] == ours["micro_batches"]


def test_no_padding_without_multiple() -> None:
    out = step_case(*BASE, dp_size=1, max_tokens=20).call(impl.rl_step)
    assert not bool(out["is_padding"].any())


def test_show_draws_every_stage() -> None:
    info = registry.get("pipeline.rl_step")
    lines = info.show(info.example, info.example.call(info.reference))
    text = "\n".join(lines)
    for stage in ("layout='left'", "two-segment", "pad_to_multiple", "balanced_partitions",
                  "rank 0", "ledger"):
        assert stage in text
