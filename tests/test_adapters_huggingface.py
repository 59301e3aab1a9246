"""transformers' `DataCollatorWithFlattening` against `varlen.pack_varlen`
(`batchproof.adapters.huggingface`, docs/frameworks-transformers.md).

Runs where transformers is installed (`batchproof[models]`) and skips cleanly otherwise. Kept to a
few seconds: the valid-input checks at 40 derandomized examples; the errors check at fewer (most
of the contract's bad inputs are outside the collator's domain or one of its known divergences,
so each example it runs costs many draws).
"""

from __future__ import annotations

import pytest

from batchproof import adapters
from batchproof.adapters.huggingface import skips_empty_examples
from batchproof.adapters.runner import check_adapter

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
