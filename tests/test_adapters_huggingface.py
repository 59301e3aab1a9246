"""transformers' `DataCollatorWithFlattening` against `varlen.pack_varlen`
(`batchproof.adapters.huggingface`, docs/frameworks-transformers.md).

Runs where transformers is installed (`batchproof[models]`) and skips cleanly otherwise. Kept to a
few seconds: the valid-input checks at 40 derandomized examples; the errors check at fewer (most
of the contract's bad inputs are outside the collator's domain or one of its known divergences,
so each example it runs costs many draws).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchproof import adapters, registry
from batchproof.adapters import Call
from batchproof.adapters.huggingface import skips_empty_examples
from batchproof.adapters.runner import check_adapter
from batchproof.models import ModelCase, ModelSpec
from batchproof.ops.varlen import HYBRID_PROMPTS, HYBRID_RESPONSES

data_collator = pytest.importorskip("transformers.data.data_collator")

NAME = "transformers.flattening_collator"
VALID_CHECKS = ["equivalence", "property:layout", "property:predict_is_previous_token",
                "property:cu_seqlens", "pin:length_one_samples", "pin:single_token_prompts",
                "pin:pad_tail_of_zero", "pin:empty_prompt_reads_previous_logit"]


def _run(checks: list[str], *, without: tuple[str, ...] = (), max_examples: int = 40):
    adapter = adapters.get_adapter(NAME)
    if without:
        adapter = adapter.without(*without)
    return check_adapter(adapter, checks=checks, max_examples=max_examples,
                         report_multiple_bugs=False, replay_database=False, derandomize=True)


def _assert_known_only(report) -> None:
    assert not report.new, [(o.check, o.detail, o.minimal) for o in report.new]
    assert not report.unexplained, report.unexplained
    assert not report.errors, [(o.check, o.detail) for o in report.errors]


def test_flattening_collator_valid_inputs_have_known_divergences_only() -> None:
    report = _run(VALID_CHECKS)
    _assert_known_only(report)
    statuses = {o.check: o.status for o in report.outcomes}
    assert statuses["equivalence"] == "pass" and statuses["property:cu_seqlens"] == "pass"
    assert statuses["pin:empty_prompt_reads_previous_logit"] == "known", statuses
    name = ("only_empty_samples_rejected" if skips_empty_examples()
            else "empty_sample_breaks_boundaries_and_labels")
    empty = next(k for k in report.known if k["name"] == name)
    assert empty["matched"] > 0 and empty["status"] == "confirmed", empty


def test_flattening_collator_bad_inputs_have_known_divergences_only() -> None:
    report = _run(["errors"], max_examples=8)
    _assert_known_only(report)
    met = {k["name"]: k["status"] for k in report.known if k["matched"]}
    assert met.get("token_ids_unchecked") == "confirmed", met
    if not skips_empty_examples():  # 5.24 raises the contract's ValueError for an empty batch
        assert met.get("empty_batch_index_error") == "confirmed", met


def test_without_empty_sample_divergence_fails_shrunk() -> None:
    if skips_empty_examples():  # 5.24: the batch of one empty sample is refused
        report = _run(["equivalence"], without=("only_empty_samples_rejected",))
        (equivalence,) = report.new
        assert "received a batch where every example is empty" in equivalence.detail, \
            equivalence.detail
    else:
        report = _run(["equivalence"], without=("empty_sample_breaks_boundaries_and_labels",))
        (equivalence,) = report.new
        # shrunk to one empty sample: cu_seqlens [0, 0] where the contract has [0]
        assert "cu_seqlens: shape differs: expected (1,), got (2,)" in equivalence.detail, \
            equivalence.detail
    assert equivalence.minimal.startswith("pack_varlen([[]], [[]])"), equivalence.minimal


def test_empty_example_shifts_labels() -> None:
    """The minimal reproduction of the labels half of `empty_sample_breaks_boundaries_and_labels`
    (docs/frameworks-transformers.md): one label per token, except for an empty example — in
    5.23; 5.24 skips the empty example (and renumbers seq_idx)."""
    collator = data_collator.DataCollatorWithFlattening(return_flash_attn_kwargs=True)
    batch = collator([{"input_ids": [1, 2], "labels": [-100, 2]},
                      {"input_ids": [], "labels": []},
                      {"input_ids": [3, 4], "labels": [-100, 4]}])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4]]
    if skips_empty_examples():  # fixed in 5.24: the empty example is skipped
        assert batch["labels"].tolist() == [[-100, 2, -100, 4]]
        assert batch["cu_seq_lens_q"].tolist() == [0, 2, 4]
        with pytest.raises(ValueError, match="every example is empty"):
            collator([{"input_ids": [], "labels": []}])
        # ... and seq_idx numbers the examples that remain (empty_sample_renumbers_seq_idx)
        numbered = data_collator.DataCollatorWithFlattening(return_flash_attn_kwargs=True,
                                                            return_seq_idx=True)
        features = [{"input_ids": [1, 2], "labels": [-100, 2]}, {"input_ids": [], "labels": []},
                    {"input_ids": [3, 4], "labels": [-100, 4]}]
        assert numbered(features)["seq_idx"].tolist() == [[0, 0, 1, 1]]  # feature 2 reads 1
        return
    assert batch["labels"].tolist() == [[-100, 2, -100, -100, 4]]  # 5 labels for 4 tokens
    assert batch["cu_seq_lens_q"].tolist() == [0, 2, 2, 4]  # a zero-length segment


# --------------------------------------------------------------------------- packed boundaries
# (issue 28: the collator with position_ids_start, the two boundary detectors, packed forwards)

BOUNDARY_ADAPTERS = ["transformers.fa_kwargs_from_position_ids",
                     "transformers.packed_sequence_indices"]
FORWARD_ADAPTERS = ["transformers.packed_forward", "transformers.padding_free_forward"]


def _check(name: str, checks: list[str] | None = None, max_examples: int = 20):
    return check_adapter(adapters.get_adapter(name), checks=checks, max_examples=max_examples,
                         report_multiple_bugs=False, replay_database=False, derandomize=True)


def test_collator_positions_count_from_position_ids_start() -> None:
    """transformers #47525's position_ids_start: every example counts from it, and the
    contract's segments of those positions are the collator's cu_seq_lens."""
    report = _run(["property:segments_are_cu_seqlens", "property:segments_never_cross"])
    _assert_known_only(report)
    assert {o.status for o in report.outcomes} == {"pass"}, report.outcomes
    collator = data_collator.DataCollatorWithFlattening(position_ids_start=2,
                                                        return_flash_attn_kwargs=True)
    batch = collator([{"input_ids": [5, 6, 8]}, {"input_ids": [7, 9, 10]}])
    assert batch["position_ids"].tolist() == [[2, 3, 4, 2, 3, 4]]
    assert batch["cu_seq_lens_q"].tolist() == [0, 3, 6]


@pytest.mark.parametrize("name", BOUNDARY_ADAPTERS)
def test_boundary_detectors_agree_with_the_contract_on_packed_rows(name: str) -> None:
    """On rows a packer writes (2-D, samples counting up from the start) both detectors find
    the contract's segments; everything else they do is a known divergence."""
    report = _check(name)
    _assert_known_only(report)
    statuses = {o.check: o.status for o in report.outcomes}
    assert statuses["equivalence"] == "pass" and statuses["property:segments"] == "pass"
    assert statuses["pin:single_token_sample"] == "pass"
    assert statuses["pin:restart_at_position_ids_start"] == "pass"
    assert statuses["pin:jump_without_restart"] == "known"
    assert all(k["status"] == "confirmed" and not k["too_broad"] for k in report.known), \
        report.known


def test_the_two_detectors_disagree_where_the_contract_rejects() -> None:
    """The issue's example: [[0, 1, 2, 3, 1, 2]] is one segment for the flash-attention path,
    two for the mask path; the contract raises ValueError (no packer writes it)."""
    from transformers.masking_utils import find_packed_sequence_indices
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    from batchproof.reference.varlen import packed_segments

    positions = torch.tensor([[0, 1, 2, 3, 1, 2]])
    (cu_seqlens, _), _ = prepare_fa_kwargs_from_position_ids(positions)
    assert cu_seqlens.tolist() == [0, 6]
    assert find_packed_sequence_indices(positions).tolist() == [[0, 0, 0, 0, 1, 1]]
    with pytest.raises(ValueError, match="holds 1 after 3 at column 4"):
        packed_segments(positions)


def test_without_their_known_divergences_the_detectors_fail_shrunk() -> None:
    """What batchproof check found: the mRoPE planes, rows of no tokens, and unchecked positions
    (shrunk to the contract's own pins)."""
    fa = adapters.get_adapter(BOUNDARY_ADAPTERS[0]).without(
        "mrope_planes_read_as_rows", "no_tokens_raises")
    report = check_adapter(fa, checks=["equivalence", "pin:mrope_text_axis"], max_examples=20,
                           report_multiple_bugs=False, replay_database=False, derandomize=True)
    found = {o.check: o for o in report.new}
    assert "min(): Expected reduction dim" in found["equivalence"].detail
    assert "cu_seqlens" in found["pin:mrope_text_axis"].detail


def _grads_ok(report) -> None:
    statuses = {o.check: o.status for o in report.outcomes}
    assert statuses["property:gradients"] == "pass", statuses


@pytest.mark.parametrize("name", FORWARD_ADAPTERS)
def test_packed_forwards_leak_or_refuse_in_every_hybrid_family(name: str) -> None:
    """transformers' own packed forward: attention families agree with the per-sample forwards
    (values and gradients); each hybrid family is a confirmed known divergence."""
    report = _check(name, ["equivalence", "property:gradients",
                           *[f"pin:{p}" for p in ("cross_sample_attention", "short_conv_boundaries",
                                                  "gated_delta_net_boundaries",
                                                  "mamba2_boundaries")]], max_examples=10)
    _assert_known_only(report)
    _grads_ok(report)
    met = {k["name"]: k["status"] for k in report.known if k["matched"]}
    assert met.get("mamba2_state_crosses_packed_samples") == "confirmed", met
    expected = ("qwen3_next_state_crosses_packed_samples" if name.endswith("packed_forward")
                else "qwen3_next_packed_boundaries_refused")
    assert met.get(expected) == "confirmed", met


def test_the_leak_and_the_refusal_reproduce_directly() -> None:
    """docs/frameworks-transformers.md's reproductions: positions only, the second sample of a
    packed Qwen3-Next row differs from its own forward; with the collator's boundaries LFM2
    refuses (ValueError) and Mamba2 still leaks."""
    from batchproof.adapters.huggingface import packed_forward_adapter
    from batchproof.reference.varlen import response_logprobs

    collator = data_collator.DataCollatorWithFlattening
    for arch, boundaries, leaks in (("qwen3_next", False, True), ("mamba2", True, True),
                                    ("llama", True, False)):
        model = ModelSpec(arch, "eager").build()
        packed = packed_forward_adapter(collator, boundaries=boundaries)(
            model, HYBRID_PROMPTS, HYBRID_RESPONSES)
        alone = response_logprobs(model, HYBRID_PROMPTS, HYBRID_RESPONSES)
        assert torch.allclose(packed[0], alone[0], atol=1e-5)  # the first sample agrees
        assert (float((packed - alone).abs().max()) > 1e-4) == leaks, arch
    with pytest.raises(ValueError, match="can't keep packed sequences apart"):
        packed_forward_adapter(collator, boundaries=True)(
            ModelSpec("lfm2", "sdpa").build(), HYBRID_PROMPTS, HYBRID_RESPONSES)


@pytest.mark.parametrize("name", [*BOUNDARY_ADAPTERS, *FORWARD_ADAPTERS, NAME])
@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_predicates_are_total(name: str, data) -> None:
    """Every predicate of the new adapters answers on every input of the record, valid or not."""
    adapter = adapters.get_adapter(name)
    info = registry.get(adapter.record)
    case = data.draw(st.one_of(info.valid, info.invalid))
    call = adapter.call_of(case)
    adapter.in_domain(call)
    adapter.matching(call)
    if isinstance(case, ModelCase):  # the model reaches the predicates first
        assert call.arg("model") == case.model and call.arg("prompts") == case.args[0]
    assert isinstance(call, Call)
