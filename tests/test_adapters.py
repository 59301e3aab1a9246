"""Adapters and `batchproof check`.

The mechanism is tested on a stand-in "framework" function (always runs); the SkyRL and verl
adapters run when the `frameworks` extra is installed (pip install -e '.[frameworks]') and skip
cleanly otherwise. Removing a known divergence from an adapter must make the check fail with that
divergence's shrunk example.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import strategies as st

import batchproof
from batchproof import adapters
from batchproof.adapters import Adapter, KnownDivergence
from batchproof.adapters.runner import check_adapter, exit_code, fitting, select_adapters
from batchproof.ops.balance import bad_partition_cases
from batchproof.ops.rl_batch import rl_batch_cases
from batchproof.reference.balance import karmarkar_karp
from batchproof.reference.rl_batch import build_rl_batch
from batchproof.registry import BadCase, Case


def _verl_like(values, k, *, equal_size=False):
    """The contract, except that k > n is refused with `assert`, as verl does."""
    assert len(values) >= k, "number of items < k_partitions"
    return karmarkar_karp(values, k, equal_size=equal_size)


def _k_over_n(case) -> bool:
    values, k = case.args
    return isinstance(values, list) and isinstance(k, (int, float)) and k > len(values)


STAND_IN = Adapter(
    name="stand_in.karmarkar_karp", framework="stand_in",
    record="balance.karmarkar_karp", target="tests.test_adapters:_verl_like",
    wrap=lambda fn: fn, forms=("lists",),
    known=(KnownDivergence("k_over_n_by_assert", _k_over_n, kind="errors", raises=AssertionError,
                           doc="k > n raises AssertionError, not ValueError"),),
    # one defect per input: the stand-in's k <= n assert runs first, and with a second defect
    # on the values that precedence is a divergence of its own (issue 32), not these tests' topic
    invalid=bad_partition_cases(),
)


def _statuses(report) -> dict[str, str]:
    return {o.check: o.status for o in report.outcomes}


def test_known_divergence_is_set_aside_and_counted() -> None:
    report = check_adapter(STAND_IN, _verl_like, checks=["errors", "pin:k_greater_than_n"],
                           max_examples=30)
    assert _statuses(report) == {"errors": "pass", "pin:k_greater_than_n": "known"}, report
    (known,) = report.known
    assert known["matched"] > 0 and known["confirmed"] == known["diverged"] == known["matched"]
    assert known["status"] == "confirmed" and not known["too_broad"]


def test_removing_a_known_divergence_reports_it_shrunk() -> None:
    report = check_adapter(STAND_IN.without("k_over_n_by_assert"), _verl_like,
                           checks=["errors", "pin:k_greater_than_n"], max_examples=30)
    assert _statuses(report) == {"errors": "new", "pin:k_greater_than_n": "new"}
    errors = report.outcomes[0]
    assert "AssertionError" in errors.detail
    # the smallest k > n input, as a call, with what the contract says it must raise
    assert errors.minimal.startswith("karmarkar_karp([0], 2) must raise ValueError"), errors


def test_stale_known_divergence_is_visible() -> None:
    """A known divergence whose inputs never diverge is `not reproduced`, never confirmed."""
    report = check_adapter(STAND_IN, karmarkar_karp, checks=["errors"], max_examples=30)
    (known,) = report.known
    assert known["matched"] > 0 and known["diverged"] == known["confirmed"] == 0
    assert known["status"] == "not reproduced"


# --------------------------------------------------------------------------- reporting rules


def _raises_key_error(values, k, *, equal_size=False):
    """Diverges on k > n, but not the way `k_over_n_by_assert` says (AssertionError)."""
    if isinstance(k, int) and k > len(values):
        raise KeyError(k)
    return karmarkar_karp(values, k, equal_size=equal_size)


def test_a_check_that_ran_no_example_is_not_tested() -> None:
    nothing = dataclasses.replace(STAND_IN, supports=lambda case: False)
    report = check_adapter(nothing, _verl_like, checks=["equivalence", "errors"],
                           max_examples=10)
    assert _statuses(report) == {"equivalence": "not tested", "errors": "not tested"}
    assert all(o.examples == 0 for o in report.outcomes) and len(report.untested) == 2
    assert exit_code([report]) == 0  # no divergence; the summary says NOT TESTED
    with pytest.raises(batchproof.CheckFailed, match="NOT TESTED"):
        batchproof.check(_verl_like, "balance.karmarkar_karp", adapter=nothing,
                         checks=["equivalence"], max_examples=10)


def test_a_divergence_that_shows_otherwise_is_new_not_confirmed() -> None:
    report = check_adapter(STAND_IN, _raises_key_error, checks=["errors"], max_examples=30)
    (known,) = report.known
    assert known["matched"] > 0 and known["diverged"] > 0 and known["confirmed"] == 0
    assert known["status"] == "diverged otherwise" and "KeyError" in known["otherwise"]
    assert report.unexplained and exit_code([report]) == 1


def test_a_too_broad_predicate_is_flagged() -> None:
    """A predicate that matches inputs on which the target agrees with the contract hides them
    from the search: flagged (matched > diverged), though it still confirms where it diverges."""
    broad = dataclasses.replace(STAND_IN, known=(dataclasses.replace(
        STAND_IN.known[0], name="any_k", applies=lambda case: True),))
    report = check_adapter(broad, _verl_like, checks=["errors"], max_examples=30)
    (known,) = report.known
    assert known["too_broad"] and known["matched"] > known["diverged"] > 0
    assert known["status"] == "confirmed"


def test_a_signature_misfit_is_reported_once() -> None:
    def other_version(values, k, *, equal_size=False):
        raise TypeError("karmarkar_karp() got an unexpected keyword argument 'equal_size'")

    report = check_adapter(STAND_IN, other_version, max_examples=10)
    assert "unexpected keyword argument" in report.misfit
    assert {o.status for o in report.outcomes} == {"not run"} and not report.new
    assert exit_code([report]) == 3


def test_a_known_divergence_must_say_how_it_shows() -> None:
    with pytest.raises(ValueError, match="say how it shows"):
        KnownDivergence("vague", _k_over_n, doc="something differs")


def test_without_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="no known divergence"):
        STAND_IN.without("nope")


def test_select_module_function_needs_one_record() -> None:
    (chosen,) = select_adapters("batchproof.reference.balance:balanced_partitions",
                                ["balance.balanced_partitions"], None)
    assert chosen.record == "balance.balanced_partitions" and chosen.forms is None
    with pytest.raises(ValueError, match="exactly one record"):
        select_adapters("batchproof.reference.balance:balanced_partitions", ["balance"], None)
    with pytest.raises(ValueError, match="unknown --impl"):
        select_adapters("nonsense", None, None)


def test_every_adapter_names_a_record_and_documents_its_divergences() -> None:
    from batchproof import registry

    for adapter in adapters.all_adapters():
        info = registry.get(adapter.record)
        assert set(adapter.skip) <= set(info.check_names()), adapter.name
        assert adapter.forms is None or set(adapter.forms) <= set(info.forms), adapter.name
        for known in adapter.known:
            assert known.doc and known.upstream, f"{adapter.name}: {known.name} undocumented"


def test_cli_check_on_a_module_function(capsys) -> None:
    from batchproof.cli import main

    code = main(["check", "--impl", "batchproof.reference.balance:balanced_partitions",
                 "--op", "balance.balanced_partitions"])
    assert code == 0, capsys.readouterr().out


# --------------------------------------------------------------------------- real frameworks


def _run(name: str, checks: list[str], without: tuple[str, ...] = (), examples: int = 40):
    adapter = adapters.get_adapter(name)
    if without:
        adapter = adapter.without(*without)
    return check_adapter(adapter, checks=checks, max_examples=examples, replay_database=False,
                         derandomize=True)


@pytest.fixture
def skyrl():
    """skyrl 0.3.x, the version the `skyrl.rl_batch` adapter is for (0.4.x has its own tests)."""
    adapter = adapters.get_adapter("skyrl.rl_batch")
    installed = adapter.version()
    if installed == "not installed":
        pytest.skip("skyrl is not installed")
    if not adapter.fits(installed):
        pytest.skip(f"skyrl {installed} is installed; these tests are for {adapter.versions}")
    from batchproof.adapters.skyrl import import_preprocess

    return import_preprocess()


@pytest.fixture
def verl():
    return pytest.importorskip("verl.utils.seqlen_balancing")


def test_skyrl_rl_batch_has_known_divergences_only(skyrl) -> None:
    report = _run("skyrl.rl_batch", ["equivalence", "errors", "property:alignment",
                                     "property:max_seq_len_only_warns",
                                     "pin:scalar_reward_on_last_token"])
    assert not report.new, [(o.check, o.detail, o.notes) for o in report.new]
    hits = {k["name"]: k["matched"] for k in report.known}
    assert hits["per_token_length_unchecked"] > 0 and hits["scalar_reward_rejected"] > 0


@st.composite
def _loss_mask_one_too_long(draw) -> BadCase:
    """The defect `per_token_length_unchecked` is about, alone (the record's invalid strategy
    finds it too, but shrinking its ten kinds of defect takes a minute)."""
    case = draw(rl_batch_cases(layouts=("left",)))
    rows = [[1.0] * len(r) for r in case.args[1]]
    row = draw(st.integers(0, len(rows) - 1))
    rows[row].append(1.0)
    return BadCase(case.replace(loss_masks=rows), ValueError, f"loss_masks[{row}] has the wrong "
                   "length")


def test_skyrl_without_length_check_divergence_fails_shrunk(skyrl) -> None:
    adapter = adapters.get_adapter("skyrl.rl_batch").without("per_token_length_unchecked")
    adapter = dataclasses.replace(adapter, invalid=_loss_mask_one_too_long())
    report = check_adapter(adapter, checks=["errors"], max_examples=40,
                           report_multiple_bugs=False, replay_database=False, derandomize=True)
    (errors,) = report.new
    shrunk = errors.minimal
    # shrunk to one sample with an empty response and a one-entry loss mask: either silently
    # right-aligned (accepted) or a RuntimeError from the slice, never the contract's ValueError
    assert "loss_masks[0] has the wrong length" in errors.detail, errors.detail
    assert "loss_masks=[[1.0]]" in shrunk and shrunk.startswith("build_rl_batch([[]], ["), shrunk


def test_skyrl_without_all_empty_divergence_fails_on_dtype(skyrl) -> None:
    report = _run("skyrl.rl_batch", ["equivalence"], without=("float_ids_when_all_rows_empty",))
    (equivalence,) = report.new
    assert "dtype differs: expected torch.int64, got torch.float32" in equivalence.detail
    assert equivalence.minimal.startswith("build_rl_batch([[]], [[]]"), equivalence.minimal


def test_skyrl_reads_a_bytes_loss_mask_as_its_code_point(skyrl) -> None:
    """`per_token_value_types_unchecked`: SkyRL 0.3.0's `torch.tensor(row, dtype=torch.float)`
    reads `b'1'` as the sequence (49,), broadcast into the one-token row; the contract raises
    TypeError naming the row, and the predicate matches exactly this input."""
    from batchproof.adapters.skyrl import has_unchecked_value

    class Tokenizer:
        pad_token_id = 0

    out = skyrl.convert_prompts_responses_to_batch_tensors(
        Tokenizer(), [[1]], [[2]], [[0.5]], [[b"1"]], logprobs=[[b"2"]])
    assert out[4].tolist() == [[49.0]] and out[5].tolist() == [[50.0]]
    case = Case(([[1]], [[2]]), {"pad_token_id": 0, "loss_masks": [[b"1"]]})
    adapter = adapters.get_adapter("skyrl.rl_batch")
    assert has_unchecked_value(adapter.call_of(case))
    # a str after a number is torch's TypeError, the contract's type: not set aside
    assert not has_unchecked_value(adapter.call_of(case.replace(loss_masks=[[1.0, "x"]])))
    with pytest.raises(TypeError, match=r"loss_masks\[0\]"):
        build_rl_batch([[1]], [[2]], pad_token_id=0, loss_masks=[[b"1"]])


def _skyrl_pins(adapter, pins: list[str]):
    return check_adapter(adapter, checks=[f"pin:{name}" for name in pins],
                         replay_database=False, derandomize=True)


def test_skyrl_takes_no_tensor_rows(skyrl) -> None:
    """Why `skyrl.rl_batch`'s domain leaves out tensor prompt/response rows: 0.3.0 builds each
    row by list concatenation, so even a valid int64 row tensor raises TypeError; the record's
    pins holding tensor rows are skipped as outside the domain, not run."""
    import torch

    class Tokenizer:
        pad_token_id = 0

    with pytest.raises(TypeError, match="can only concatenate list"):
        skyrl.convert_prompts_responses_to_batch_tensors(
            Tokenizer(), [torch.tensor([1])], [[2]], [[0.0]], [[1]])
    tensor_pins = ["tensor_row_2d", "tensor_row_float", "jagged_float_prompts",
                   "jagged_3d_prompts"]
    report = _skyrl_pins(adapters.get_adapter("skyrl.rl_batch"), tensor_pins)
    assert {o.check: o.detail for o in report.outcomes} == {
        f"pin:{name}": "input outside the adapter's domain" for name in tensor_pins}
    assert exit_code([report]) == 0


def test_skyrl_scalar_loss_mask_is_a_type_error(skyrl) -> None:
    """`scalar_row_type_error`: `loss_masks=[1.0]` fails SkyRL's `len(row)` (TypeError) where
    the contract raises ValueError; set aside on its pin, and a new divergence without it."""
    adapter = adapters.get_adapter("skyrl.rl_batch")
    (pin,) = _skyrl_pins(adapter, ["scalar_loss_mask"]).outcomes
    assert pin.status == "known", pin
    (new,) = _skyrl_pins(adapter.without("scalar_row_type_error"), ["scalar_loss_mask"]).new
    assert "candidate raised TypeError: object of type 'float' has no len()" in new.detail, new
    assert new.minimal.startswith("build_rl_batch([[1]], [[2]], pad_token_id=0, "
                                  "loss_masks=[1.0])"), new.minimal


@pytest.mark.parametrize("name", ["verl.karmarkar_karp", "verl.balanced_partitions",
                                  "verl.micro_batches", "verl.position_ids"])
def test_verl_has_known_divergences_only(verl, name: str) -> None:
    from batchproof import registry

    checks = registry.get(adapters.get_adapter(name).record).check_names()
    if name == "verl.position_ids":  # the rest of that batch is the reference's own
        checks = ["equivalence", "property:positions", "pin:two_segment_width_inflation"]
    report = _run(name, checks)
    assert not report.new, [(o.check, o.detail, o.notes) for o in report.new]


def test_verl_without_k_divergence_fails_shrunk(verl) -> None:
    report = _run("verl.karmarkar_karp", ["errors"], without=("k_unchecked",))
    (errors,) = report.new
    assert errors.minimal.startswith("karmarkar_karp([0], 2) must raise ValueError"), errors


def test_verl_without_values_tensor_divergence_fails_on_its_pins(verl) -> None:
    """A 2-D (one column) or complex values tensor is accepted; the negative, NaN and bool
    tensors are `values_unchecked`, as their lists are."""
    pins = ["pin:values_tensor_2d", "pin:values_tensor_complex"]
    report = _run("verl.karmarkar_karp", pins, without=("values_tensor_unchecked",))
    assert {o.check for o in report.new} == set(pins), report.outcomes
    assert all("the candidate accepted bad input" in o.detail for o in report.new)
    others = ["pin:values_tensor_bool", "pin:values_tensor_negative_int",
              "pin:values_tensor_nan_first", "pin:values_tensor_negative_float"]
    report = _run("verl.karmarkar_karp", others)
    assert set(_statuses(report).values()) == {"known"}, report.outcomes
    (values,) = [k for k in report.known if k["name"] == "values_unchecked"]
    assert values["confirmed"] == len(others), values


def test_verl_micro_batches_composition_is_verls_own_algorithm(verl) -> None:
    """`property:composition` is skipped as equivalence is: verl's micro-batches keep every
    property of the contract, but their composition is a balanced partition of workloads."""
    report = _run("verl.micro_batches", ["property:composition", "property:budget",
                                         "property:cover", "property:count"])
    statuses = _statuses(report)
    assert statuses.pop("property:composition") == "skipped"
    assert set(statuses.values()) == {"pass"}, report.outcomes
    import verl.utils.seqlen_balancing as seqlen

    batches = adapters.get_adapter("verl.micro_batches").wrap(seqlen.rearrange_micro_batches)(
        [6, 2, 2, 5, 3, 2], 10)
    assert sorted(map(sorted, batches)) == [[0, 1, 5], [2, 3, 4]]  # the contract: [1, 3, 4] ...


def _dp_cases(world: int, count: int) -> list[tuple[list[list[int]], int]]:
    """Per-rank lengths (each rank its own number of rows) and one max_tokens, drawn
    derandomized, plus a case whose ranks need different counts alone (1 and 3)."""
    import hypothesis

    drawn = []
    rows = st.lists(st.integers(1, 12), min_size=1, max_size=8)

    @hypothesis.settings(max_examples=count, derandomize=True, database=None, deadline=None,
                         phases=[hypothesis.Phase.generate],
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(per_rank=st.lists(rows, min_size=world, max_size=world),
                      slack=st.integers(0, 24))
    def draw(per_rank, slack):
        drawn.append((per_rank, max(max(r) for r in per_rank) + slack))

    draw()
    return [([[1] * 6, [12, 12, 12]], 12), *drawn]


def _verl_alone(seqlen, lengths: list[int], max_tokens: int, count: int) -> list[list[int]]:
    """verl in one process, through the `verl.micro_batches` adapter, at least `count`
    micro-batches."""
    micro_batches = adapters.get_adapter("verl.micro_batches").wrap(
        seqlen.rearrange_micro_batches)
    return micro_batches(lengths, max_tokens, min_count=count)


def _one_process(seqlen, per_rank: list[list[int]], max_tokens: int):
    """What the ranks must agree on, computed in one process: the smallest count at least
    every rank's own lower bound at which every rank's balanced partition fits max_tokens;
    each rank's micro-batches are then its own at that count. None where that count exceeds
    some rank's rows (verl raises ValueError on every rank)."""
    count = max(min(len(rows), -(-sum(rows) // max_tokens)) for rows in per_rank)
    while count <= min(len(rows) for rows in per_rank):
        alone = [_verl_alone(seqlen, rows, max_tokens, count) for rows in per_rank]
        if all(len(batches) == count for batches in alone):
            return alone
        count += 1
    return None


def _packed_rows(count: int) -> list[tuple[list[int], list[int]]]:
    """Packed rows (ids, positions restarting at every sequence), drawn derandomized: 1 to 5
    sequences of 0 to 7 tokens, so the row's length is and is not a multiple of the world."""
    import hypothesis

    drawn = []

    @hypothesis.settings(max_examples=count, derandomize=True, database=None, deadline=None,
                         phases=[hypothesis.Phase.generate],
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(st.lists(st.lists(st.integers(0, 49), max_size=7), min_size=1,
                               max_size=5).filter(lambda seqs: any(seqs)))
    def draw(seqs):
        drawn.append(([t for s in seqs for t in s], [p for s in seqs for p in range(len(s))]))

    draw()
    return drawn


def _mcore_batches(count: int) -> list[tuple[list[list[int]], list[list[bool]]]]:
    """(B, S) batches and masks, drawn derandomized: 1 to 4 rows of width 1 to 9, each row's
    real tokens one run of 0 to S at any offset (left and right padding), so that lengths are
    and are not multiples of 2·cp and some rows are empty."""
    import hypothesis

    drawn = []

    @st.composite
    def batches(draw):
        width = draw(st.integers(1, 9))
        ids, mask = [], []
        for _ in range(draw(st.integers(1, 4))):
            length = draw(st.integers(0, width))
            start = draw(st.integers(0, width - length))
            ids.append(draw(st.lists(st.integers(0, 49), min_size=width, max_size=width)))
            mask.append([start <= s < start + length for s in range(width)])
        return ids, mask

    @hypothesis.settings(max_examples=count, derandomize=True, database=None, deadline=None,
                         phases=[hypothesis.Phase.generate],
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(batches())
    def draw(batch):
        drawn.append(batch)

    draw()
    return drawn


@pytest.fixture(scope="module")
def mcore_batches():
    """The batches of the Megatron-core CP run, or None when megatron-core is not installed
    beside verl (verl's Megatron helpers need it; the other runs go on without)."""
    import importlib.util

    if importlib.util.find_spec("megatron") is None:
        return None
    return _mcore_batches(24)


@pytest.fixture(scope="module")
def verl_ranks_ran(tmp_path_factory, mcore_batches):
    """One spawn of 2 gloo ranks running verl's process-group functions on the drawn cases,
    each as it is and with its planted fault: (dp cases, rows, what each rank got per run; the
    Megatron-core runs fifth and sixth, where megatron-core is installed)."""
    import pickle

    import torch.distributed as dist
    import torch.multiprocessing as mp
    import verl_ranks

    seqlen = pytest.importorskip("verl.utils.seqlen_balancing")
    pytest.importorskip("verl.utils.ulysses")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available here")
    world = 2
    cases = [(per_rank, budget) for per_rank, budget in _dp_cases(world, 40)
             if _one_process(seqlen, per_rank, budget) is not None]
    rows = _packed_rows(30)
    runs = [("micro_batches", False, cases), ("micro_batches", True, cases),
            ("ulysses", False, rows), ("ulysses", True, rows)]
    if mcore_batches is not None:
        runs += [("mcore", False, mcore_batches), ("mcore", True, mcore_batches)]
    folder = tmp_path_factory.mktemp("verl-ranks")
    out = str(folder / "out")
    mp.start_processes(verl_ranks.rank_main,
                       args=(world, str(folder / "rendezvous"), runs, out),
                       nprocs=world, start_method="spawn", join=True)
    got = []
    for rank in range(world):
        with open(f"{out}.{rank}", "rb") as handle:
            got.append(pickle.load(handle))
    return cases, rows, got


def test_verl_micro_batches_agree_through_a_real_process_group(verl, verl_ranks_ran) -> None:
    """verl 0.9.1's `rearrange_micro_batches(dp_group=...)` across 2 real ranks (gloo): every
    rank gets the same number of micro-batches, each within max_tokens and together its rows
    once, and exactly the micro-batches one process computes for that rank at the agreed count
    (`_one_process`). The same cases with `same_micro_num_in_dp=False` planted in every rank
    must come back different (the property can fail)."""
    cases, _, got = verl_ranks_ran
    assert len(cases) >= 20
    per_case = [[got[rank][0][index] for rank in range(2)] for index in range(len(cases))]
    planted = [[got[rank][1][index] for rank in range(2)] for index in range(len(cases))]
    expected = [_one_process(verl, per_rank, budget) for per_rank, budget in cases]
    for (per_rank, budget), ranks, wanted in zip(cases, per_case, expected):
        assert len({len(batches) for batches in ranks}) == 1, (per_rank, budget, ranks)
        for rows, batches in zip(per_rank, ranks):
            assert sorted(i for b in batches for i in b) == list(range(len(rows)))
            assert all(sum(rows[i] for i in b) <= budget for b in batches), (rows, batches)
        assert ranks == wanted, (per_rank, budget, ranks, wanted)
    assert any(ranks != wanted for ranks, wanted in zip(planted, expected)), (
        "each rank keeping its own count went through the process group unnoticed")


def test_verl_ulysses_slices_and_gathers_through_a_real_process_group(verl_ranks_ran) -> None:
    """verl 0.9.1's Ulysses helpers across 2 real ranks (gloo): every rank pads the packed row
    to a multiple of the world and takes its slice (`ulysses_pad_and_slice_inputs`), computes
    per-token outputs from its ids and positions, and `gather_outputs_and_unpad` gathers them
    and drops the pad: on every rank the result must equal the outputs computed on the whole
    row in one process, bit for bit. With the positions left unsliced (verl's
    `skip_position_ids_rmpad`) planted, some row must come back different."""
    import torch
    import verl_ranks

    _, rows, got = verl_ranks_ran
    assert any(len(ids) % 2 for ids, _ in rows)  # rows verl must pad
    expected = [verl_ranks.per_token(torch.tensor([ids]), torch.tensor([pos])).tolist()
                for ids, pos in rows]
    for rank in range(2):
        for row, wanted, gathered in zip(rows, expected, got[rank][2]):
            assert gathered == wanted, (rank, row)
    assert any(g != w for g, w in zip(got[0][3], expected)), (
        "unsliced positions went through the process group unnoticed")


def test_verl_mcore_cp_slices_and_gathers_through_a_real_process_group(
        mcore_batches, verl_ranks_ran) -> None:
    """verl 0.9.1's Megatron-core CP helpers across 2 real ranks (gloo; Megatron's parallel state
    initialized with the world as one CP group): each rank takes its zigzag chunks of the ids and
    positions (`preprocess_packed_seqs`), computes per-token outputs, and
    `postprocess_packed_seqs` all-gathers them and puts them back in the (B, S) layout. On every
    rank that must equal the outputs of the whole batch in one process, bit for bit; so must the
    same through verl's THD engine (nested batch, its own positions, `postprocess_thd_engine`:
    one row per sequence). And it is the contract's layout: verl's padded boundaries are
    `pad_for_cp`'s, and `cp.unshard` of the ranks' local outputs gives the real row's outputs
    in order. With each rank slicing as its
    mirror rank (planted), some batch must come back different."""
    import torch
    import verl_ranks

    from batchproof.reference import cp as reference

    if mcore_batches is None:
        pytest.skip("megatron-core is not installed beside verl (verl's Megatron helpers need it)")
    _, _, got = verl_ranks_ran
    planted_differs = planted_thd = False
    for index, (ids, mask) in enumerate(mcore_batches):
        batch, real = torch.tensor(ids), torch.tensor(mask, dtype=torch.bool)
        positions = verl_ranks.positions_in_sequence(real)
        values = verl_ranks.per_token(batch, positions)
        wanted = torch.where(real[..., None], values, torch.zeros(())).tolist()
        per_sequence = [values[row][real[row]].tolist() for row in range(len(ids))]
        for rank in range(2):
            assert got[rank][4][index][0] == wanted, (rank, ids, mask)
            assert got[rank][4][index][3] == per_sequence, (rank, ids, mask)
        planted_differs |= any(got[rank][5][index][0] != wanted for rank in range(2))
        planted_thd |= any(got[rank][5][index][3] != per_sequence for rank in range(2))
        lengths = real.sum(-1).tolist()
        cu = [0, *torch.tensor(lengths).cumsum(0).tolist()]
        padded = reference.pad_for_cp(batch[real].tolist(), cu, cp_size=2)
        cu_padded = padded["cu_seqlens_padded"].tolist()
        assert got[0][4][index][2] == cu_padded, (ids, mask)
        width = len(got[0][4][index][1])
        local = torch.tensor([got[rank][4][index][1] for rank in range(2)]).reshape(2, width, 2)
        row = reference.unshard(local, cu, cu_padded, layout="zigzag")
        assert row.tolist() == [values[real].tolist()], (ids, mask)
    assert planted_differs and planted_thd, (
        "ranks slicing as their mirror went through the gather unnoticed")


def test_verl_position_ids_domain_is_the_valid_inputs(verl) -> None:
    """verl's function is given the reference's attention mask: an invalid input never gets
    that far, so its pins are outside the domain (not an AdapterError, not a divergence)."""
    report = _run("verl.position_ids", ["pin:count_mismatch", "pin:prompts_not_a_sequence",
                                        "pin:two_segment_width_inflation"])
    statuses = _statuses(report)
    assert statuses == {"pin:count_mismatch": "skipped", "pin:prompts_not_a_sequence": "skipped",
                        "pin:two_segment_width_inflation": "pass"}, report.outcomes


# --------------------------------------------------------------------------- verl padding utilities


@pytest.fixture
def verl_padding():
    return pytest.importorskip("verl.workers.utils.padding")


@pytest.mark.parametrize("name", ["verl.left_right_2_no_padding", "verl.no_padding_2_padding"])
def test_verl_padding_has_known_divergences_only(verl_padding, name: str) -> None:
    from batchproof import registry

    # 20 examples, the matrix's size: no_padding_2_padding's bad inputs are mostly a known
    # divergence's (empty_prompt_by_assert), so its `errors` check draws ~50 for each it keeps
    report = _run(name, registry.get(adapters.get_adapter(name).record).check_names(),
                  examples=20)
    assert not report.new, [(o.check, o.detail, o.notes) for o in report.new]
    assert {o.check: o.status for o in report.outcomes}["equivalence"] == "pass"
    met = {k["name"]: (k["matched"], k["confirmed"]) for k in report.known}
    for known in ("multi_axis_position_ids_channels_first", "mask_values_unchecked",
                  "empty_prompt_by_assert", "truncates_beyond_max_response_len"):
        if known in met:
            hits, confirmed = met[known]
            assert hits > 0 and confirmed > 0, (known, met)


def test_verl_without_ragged_channels_fails_shrunk(verl_padding) -> None:
    """Equal-length rows of (B, C, S) position_ids: verl's jagged dim is the channel axis."""
    report = _run("verl.left_right_2_no_padding", ["equivalence"],
                  without=("multi_axis_position_ids_ragged_on_channels",))
    (equivalence,) = report.new
    assert "position_ids.offsets()" in equivalence.detail, equivalence.detail
    shrunk = equivalence.minimal
    assert "TensorDict(batch_size=[1]" in shrunk and "position_ids: i64[2,0]" in shrunk, shrunk


def test_verl_without_empty_prompt_fails_shrunk(verl_padding) -> None:
    """An empty row (p = r = 0) is valid for the contract; verl asserts prompt_len > 0."""
    report = _run("verl.no_padding_2_padding", ["equivalence"],
                  without=("empty_prompt_by_assert",))
    (equivalence,) = report.new
    assert "assumes prompt_len > 0" in equivalence.detail, equivalence.detail
    shrunk = equivalence.minimal
    assert "TensorDict(batch_size=[1]" in shrunk and "prompts: i64[0]" in shrunk, shrunk


def test_verl_without_truncation_divergence_fails_shrunk(verl_padding) -> None:
    report = check_adapter(adapters.get_adapter("verl.no_padding_2_padding")
                           .without("truncates_beyond_max_response_len"),
                           checks=["errors"], max_examples=40, report_multiple_bugs=False,
                           replay_database=False, derandomize=True)
    (errors,) = report.new
    assert "accepted bad input (a response longer than R)" in errors.detail, errors.detail
    assert "more than R = 0" in errors.detail, errors.detail  # shrunk: R = 0, one response token


UNREAD_FIELD_PINS = {
    "pin:prompts_wider_than_attention", "pin:encoding_name_taken", "pin:nested_tensordict_field",
    "pin:jagged_field", "pin:max_response_length_tensor", "pin:max_response_length_str",
    "pin:max_response_length_negative", "pin:response_width_over_attention", "pin:prompts_1d"}
KEYWORD_PINS = {"pin:strict_not_a_bool", "pin:rule_name_not_str", "pin:rule_not_a_pair",
                "pin:rule_mask_not_str", "pin:rule_pad_not_a_number", "pin:ignore_dense_str",
                "pin:ignore_dense_not_names"}


def test_verl_without_unread_fields_divergence_fails_on_its_pins(verl_padding) -> None:
    """Each pin whose defect is in a field verl never reads is accepted by verl: without
    `unread_fields_unchecked` exactly those pins are new divergences."""
    checks = sorted(UNREAD_FIELD_PINS | {"pin:attention_mask_1d", "pin:no_batch_dimension"})
    report = _run("verl.left_right_2_no_padding", checks,
                  without=("unread_fields_unchecked",))
    assert {o.check for o in report.new} == UNREAD_FIELD_PINS, report.outcomes
    assert all("the candidate accepted bad input" in o.detail for o in report.new)
    statuses = _statuses(report)
    assert statuses["pin:attention_mask_1d"] == statuses["pin:no_batch_dimension"] == "known"


def test_verl_nest_domain_leaves_out_the_contracts_keywords_only(verl_padding) -> None:
    """A bad value of a keyword verl does not have is outside the domain; the same keywords
    with valid values are run."""
    checks = sorted(KEYWORD_PINS | {"pin:loss_mask_alias_and_prompts_nested",
                                    "pin:attention_mask_1d"})
    report = _run("verl.left_right_2_no_padding", checks)
    statuses = _statuses(report)
    assert {statuses[p] for p in KEYWORD_PINS} == {"skipped"}, statuses
    assert statuses["pin:loss_mask_alias_and_prompts_nested"] == "pass"  # strict=True
    assert statuses["pin:attention_mask_1d"] == "known"  # attention_mask_1d_fails


def test_verl_ragged_channels_not_claimed_where_the_layouts_coincide(verl_padding) -> None:
    """n real tokens per row = C channels, each row's (C, n) block symmetric: verl's
    channel-ragged layout holds the contract's values and offsets, so the divergence does not
    apply (it was flagged too broad there)."""
    import torch
    from tensordict import TensorDict

    from batchproof import registry
    from batchproof.adapters.runner import observe

    adapter = adapters.get_adapter("verl.left_right_2_no_padding")
    positions = torch.tensor([[[9, 0, 1, 9], [9, 1, 2, 9]]])  # real block [[0, 1], [1, 2]]
    td = TensorDict({"input_ids": torch.tensor([[0, 5, 6, 0]]),
                     "attention_mask": torch.tensor([[0, 1, 1, 0]]),
                     "position_ids": positions,
                     "response_mask": torch.tensor([[1, 0]])}, batch_size=[1])
    plain = dataclasses.replace(registry.get(adapter.record), pins=[])
    case = Case((td,), {"pad_token_id": 0})
    assert not adapter.matching(adapter.call_of(case))
    assert observe(plain, case, adapter.candidate()).what == "agreed"
    td.set("position_ids", torch.tensor([[[9, 0, 2, 9], [9, 1, 2, 9]]]))  # not symmetric
    (known,) = adapter.matching(adapter.call_of(case))
    assert known.name == "multi_axis_position_ids_ragged_on_channels"
    assert observe(plain, case, adapter.candidate()).field == "position_ids"


def test_verl_without_missing_mask_divergence_fails_on_its_pin(verl_padding) -> None:
    report = _run("verl.no_padding_2_padding", ["pin:no_attention_mask"],
                  without=("attention_mask_read_by_key",))
    (pin,) = report.new
    assert "candidate raised KeyError" in pin.detail and "attention_mask" in pin.detail, pin


def test_verl_without_strided_output_divergence_fails_shrunk(verl_padding) -> None:
    report = check_adapter(adapters.get_adapter("verl.no_padding_2_padding")
                           .without("strided_output_unchecked"),
                           checks=["errors"], max_examples=40, report_multiple_bugs=False,
                           replay_database=False, derandomize=True)
    (errors,) = report.new
    assert "accepted bad input (a strided nested output)" in errors.detail, errors.detail
    assert "nested_tensor([" in errors.minimal, errors.minimal


# --------------------------------------------------------------------------- adapters from outside


def _isolated_registry(monkeypatch) -> None:
    """Adapters registered by a test vanish with it. batchproof's own adapter modules are
    imported first: one imported for the first time into the test's copy of the registry would
    register there, vanish with it, and never register again (it is imported only once), and
    every later test of the process would miss its adapters."""
    adapters.all_adapters()
    monkeypatch.setattr(adapters, "_ADAPTERS", dict(adapters._ADAPTERS))
    monkeypatch.setattr(adapters, "_LOADED_ENTRY_POINTS", set(adapters._LOADED_ENTRY_POINTS))
    monkeypatch.setattr(adapters, "LOAD_PROBLEMS", [])


PLUGIN = '''
import batchproof
from batchproof.reference.balance import karmarkar_karp
from batchproof.reference.rl_batch import build_rl_batch

ADAPTERS = [batchproof.Adapter(
    name="plugged.karmarkar_karp", framework="plugged", record="balance.karmarkar_karp",
    target="batchproof.reference.balance:karmarkar_karp", wrap=lambda fn: fn)]
'''


def test_an_installed_package_contributes_adapters_by_entry_point(tmp_path, monkeypatch) -> None:
    _isolated_registry(monkeypatch)
    (tmp_path / "plugged_adapters.py").write_text(PLUGIN)
    info = tmp_path / "plugged-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugged\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[batchproof.adapters]\nplugged = plugged_adapters:ADAPTERS\nbroken = no_such_mod\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    names = [a.name for a in adapters.all_adapters()]
    assert "plugged.karmarkar_karp" in names and "skyrl.rl_batch" in names
    assert any("broken" in problem for problem in adapters.LOAD_PROBLEMS)
    (chosen,) = select_adapters("plugged", None, None)
    assert not check_adapter(chosen, max_examples=5, checks=["equivalence"]).new


def test_an_adapter_file_registers_adapters(tmp_path, monkeypatch) -> None:
    _isolated_registry(monkeypatch)
    (tmp_path / "theirs.py").write_text(PLUGIN)
    (added,) = adapters.load_adapter_file(str(tmp_path / "theirs.py"))
    assert added.name == "plugged.karmarkar_karp"
    (tmp_path / "empty.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match="registers no adapter"):
        adapters.load_adapter_file(str(tmp_path / "empty.py"))
    with pytest.raises(ValueError, match="no such file"):
        adapters.load_adapter_file(str(tmp_path / "missing.py"))


def test_an_isolated_registry_keeps_the_adapters_it_first_imports() -> None:
    """In a fresh process, the entry-point test (the first to list the adapters, in its own
    copy of the registry) and then a test of an adapter it imported: that adapter is still
    registered (it was not, under `-n 2`, when the copy got the first import)."""
    import subprocess
    import sys
    from pathlib import Path

    here = "tests/test_adapters.py::"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:xdist", "-p",
         "no:cacheprovider", "-q",
         f"{here}test_an_installed_package_contributes_adapters_by_entry_point",
         f"{here}test_an_adapter_whose_needs_are_missing_is_left_out_with_a_note"],
        cwd=Path(__file__).parents[1], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 passed" in done.stdout, done.stdout[-3000:]


def test_a_framework_version_picks_its_adapters(monkeypatch) -> None:
    """`--impl FRAMEWORK` runs the adapters made for the installed version only."""
    import hypothesis

    installed = hypothesis.__version__
    make = lambda name, versions: dataclasses.replace(  # noqa: E731
        STAND_IN, name=name, distribution="hypothesis", versions=versions)
    old, new = make("old", "<1"), make("new", f"=={installed}")
    assert [a.name for a in fitting([old, new])] == ["new"] and new.fits(installed)
    with pytest.raises(ValueError, match=f"no adapter fits hypothesis {installed}"):
        fitting([old])
    assert fitting([dataclasses.replace(old, distribution="no-such-dist")])  # not installed


def test_layout_and_output_names_scope_a_function() -> None:
    def left_only_dict(prompts, responses, *, layout="left", **kwargs):
        if layout != "left":
            raise NotImplementedError(layout)
        batch = build_rl_batch(prompts, responses, layout=layout, **kwargs)
        out = {("sequences" if k == "input_ids" else k): batch.get(k) for k in batch.keys()
               if not batch.is_non_tensor(k)}
        return out | {k: batch.get_non_tensor(k) for k in batch.keys() if batch.is_non_tensor(k)}

    report = batchproof.check(left_only_dict, "rl_batch.build_rl_batch", layout="left",
                              output_names={"sequences": "input_ids"}, forms=["lists"],
                              checks=["equivalence", "property:alignment"], max_examples=15)
    assert {o.status for o in report.outcomes} == {"pass"}
    with pytest.raises(batchproof.CheckFailed):
        batchproof.check(left_only_dict, "rl_batch.build_rl_batch", forms=["lists"],
                         output_names={"sequences": "input_ids"}, checks=["equivalence"],
                         max_examples=15)


# --------------------------------------------------------------------------- verl's Megatron CP slicing


@pytest.fixture
def verl_mcore():
    pytest.importorskip("megatron.core")
    return pytest.importorskip("verl.models.mcore.util")


def test_verl_mcore_adapter_registers_without_verl_and_names_its_needs() -> None:
    """Registering it imports neither verl nor Megatron; it needs megatron-core beside verl."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['verl'] = None; sys.modules['megatron'] = None\n"
            "import batchproof.adapters.verl_mcore as m\n"
            "for a in (m.CP_PACKED_SEQS, m.THD_ENGINE, m.ROUTER_REPLAY_DATA):\n"
            "    assert (a.record, a.distribution, a.needs) == ('cp.shard', 'verl', "
            "('megatron-core',))\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_adapter_whose_needs_are_missing_is_left_out_with_a_note(monkeypatch, capsys) -> None:
    """`--impl verl` without megatron-core: the Megatron adapter is named on stderr and not run;
    the others are; naming it with --adapter keeps it (its import then fails: exit 3)."""
    from batchproof.adapters import runner

    monkeypatch.setattr(Adapter, "missing_needs",
                        lambda self: list(self.needs))  # as if none were installed
    kept = runner.with_their_needs([adapters.get_adapter("verl.cp_packed_seqs"),
                                    adapters.get_adapter("verl.karmarkar_karp")])
    assert [a.name for a in kept] == ["verl.karmarkar_karp"]
    assert "verl.cp_packed_seqs not run: it needs megatron-core" in capsys.readouterr().err
    with pytest.raises(ValueError, match="needs what is not installed"):
        runner.with_their_needs([adapters.get_adapter("verl.cp_packed_seqs")])
    monkeypatch.setattr(runner, "fitting", lambda chosen: chosen)
    assert [a.name for a in select_adapters("verl", None, "verl.cp_packed_seqs")] == [
        "verl.cp_packed_seqs"]


MCORE_ADAPTERS = {"verl.cp_packed_seqs": {"no_sequences_raises"},
                  "verl.cp_thd_engine": {"no_sequences_raises",
                                         "contiguous_needs_cp_partition_mode"}}


@pytest.mark.parametrize("name", MCORE_ADAPTERS)
def test_verl_mcore_has_known_divergences_only(verl_mcore, name: str) -> None:
    """Equivalence and the pins (every check runs in the framework matrix's `batchproof check
    --impl verl`, which fails on a new divergence): no new divergence, each known one
    confirmed."""
    from batchproof import registry

    checks = [c for c in registry.get("cp.shard").check_names()
              if c == "equivalence" or c.startswith("pin:")]
    report = _run(name, checks, examples=30)
    assert not report.new, [(o.check, o.detail, o.minimal) for o in report.new]
    assert not report.unexplained and not report.errors
    statuses = {o.check: o.status for o in report.outcomes}
    assert statuses["equivalence"] == "pass", statuses
    assert statuses["pin:te_1930_last_valid_token_kept"] == "pass", statuses
    met = {k["name"]: k["status"] for k in report.known}
    assert met == dict.fromkeys(MCORE_ADAPTERS[name], "confirmed"), report.known


@pytest.mark.parametrize("name, known", [(name, known) for name, names in MCORE_ADAPTERS.items()
                                         for known in sorted(names)])
def test_verl_mcore_without_a_known_divergence_fails(verl_mcore, name: str, known: str) -> None:
    report = _run(name, ["equivalence"], without=(known,))
    assert report.new and "ValueError" in report.new[0].detail, report.outcomes


@pytest.mark.parametrize("name", MCORE_ADAPTERS)
def test_verl_mcore_sliced_as_the_mirror_rank_fails(verl_mcore, name: str) -> None:
    """The check can fail: verl's function run with the CP rank read as cp - 1 - r (a layout
    served for another rank) must diverge."""
    from megatron.core import parallel_state as mpu

    from batchproof.adapters.megatron import RankOfGroup

    def mirrored(preprocess):
        def planted(*args, **kwargs):
            group = mpu._CONTEXT_PARALLEL_GROUP
            mpu._CONTEXT_PARALLEL_GROUP = RankOfGroup(group.size(), group.size() - 1 - group.rank())
            try:
                return preprocess(*args, **kwargs)
            finally:
                mpu._CONTEXT_PARALLEL_GROUP = group
        return planted

    adapter = adapters.get_adapter(name)
    wrap = adapter.wrap
    adapter = dataclasses.replace(adapter, wrap=lambda preprocess: wrap(mirrored(preprocess)))
    report = check_adapter(adapter, checks=["equivalence"], max_examples=30,
                           replay_database=False, derandomize=True)
    assert report.new and "Mismatch" in report.new[0].detail, report.outcomes


def test_verl_router_replay_has_known_divergences_only(verl_mcore) -> None:
    """verl's router-replay hand-over (`set_router_replay_data` into Megatron's routers)
    against shard's routes: equivalence and the pins in its domain, no new divergence; its
    zero routes at the CP pads (verl #7524) confirmed; the route pin is run."""
    from batchproof import registry

    checks = [c for c in registry.get("cp.shard").check_names()
              if c == "equivalence" or c.startswith("pin:")]
    report = _run("verl.router_replay_data", checks, examples=40)
    assert not report.new, [(o.check, o.detail, o.minimal) for o in report.new]
    assert not report.unexplained and not report.errors
    statuses = {o.check: o.status for o in report.outcomes}
    assert statuses["equivalence"] == "pass", statuses
    met = {k["name"]: k["status"] for k in report.known}
    assert met["padding_routes_are_zeros"] == "confirmed", report.known


def test_verl_router_replay_without_its_known_divergence_fails(verl_mcore) -> None:
    report = _run("verl.router_replay_data", ["equivalence"], without=("padding_routes_are_zeros",))
    assert report.new and "routed_experts" in report.new[0].detail, report.outcomes


def test_verl_router_replay_of_the_mirror_rank_fails(verl_mcore) -> None:
    """The check can fail on the routes: verl's hand-over run with the CP rank read as
    cp - 1 - r (each rank replaying its mirror rank's routes) must diverge."""
    from megatron.core import parallel_state as mpu

    from batchproof.adapters.megatron import RankOfGroup

    def mirrored(set_data):
        def planted(*args, **kwargs):
            group = mpu._CONTEXT_PARALLEL_GROUP
            mpu._CONTEXT_PARALLEL_GROUP = RankOfGroup(group.size(), group.size() - 1 - group.rank())
            try:
                return set_data(*args, **kwargs)
            finally:
                mpu._CONTEXT_PARALLEL_GROUP = group
        return planted

    adapter = adapters.get_adapter("verl.router_replay_data")
    wrap = adapter.wrap
    adapter = dataclasses.replace(adapter, wrap=lambda set_data: wrap(mirrored(set_data)))
    report = check_adapter(adapter, checks=["equivalence"], max_examples=30,
                           replay_database=False, derandomize=True)
    assert report.new and "Mismatch" in report.new[0].detail, report.outcomes


def test_verl_thd_engine_positions_are_the_contracts_at_every_real_token(verl_mcore) -> None:
    """`preprocess_thd_engine` also returns each rank's position ids. At every real token they
    are the contract's (`cp.shard`'s position_ids, by `token_index`); at pads they are not
    compared by the check (docs/cp.md: the first chunk's pads run on, the second chunk's are
    0 where the contract's positions run through the pad). Zigzag, 40 derandomized rows."""
    import hypothesis

    from batchproof.adapters.verl_mcore import as_nested, megatron_cp_rank
    from batchproof.ops import cp as cp_op
    from batchproof.reference import cp as reference

    seen = {"real": 0, "pad_differs": 0}

    @hypothesis.settings(max_examples=40, derandomize=True, database=None, deadline=None,
                         phases=[hypothesis.Phase.generate])
    @hypothesis.given(st.integers(2, 4).flatmap(
        lambda cp: st.tuples(st.just(cp), cp_op.packed_rows(cp, min_sequences=1))))
    def positions_agree(drawn):
        cp_size, (ids, cu) = drawn
        padded = reference.pad_for_cp(ids, cu, cp_size=cp_size)
        want = reference.shard(padded, cp_size=cp_size)
        nested = as_nested(padded["input_ids"], cu, padded["cu_seqlens_padded"].tolist())
        for rank in range(cp_size):
            with megatron_cp_rank(cp_size, rank):
                _, _, positions = verl_mcore.preprocess_thd_engine(nested)
            real = want["token_index"][rank] >= 0
            assert positions[0][real].tolist() == want["position_ids"][rank][real].tolist()
            seen["real"] += int(real.sum())
            seen["pad_differs"] += int((positions[0][~real] != want["position_ids"][rank][~real])
                                       .sum())

    positions_agree()
    assert seen["real"] > 100 and seen["pad_differs"] > 0, seen


# --------------------------------------------------------------------------- router replay


def test_adapters_of_functions_without_routes_leave_replayed_calls_out() -> None:
    """`without_replay`: the pack_varlen adapters (transformers, TRL) and the CP adapters (verl,
    SkyRL) keep every call they had, and no call carrying routes — a routed_experts /
    sample_support / router_padding_mask argument, or a padded row with a routes field — valid
    or invalid; the predicate they wrap, alone, would have taken the replayed pack_varlen call."""
    import torch

    from batchproof.adapters import replays
    from batchproof.adapters.huggingface import needs_no_tail_pad
    from batchproof.reference import cp as cp_reference

    plain = Case(([[1, 2], [3]], [[4], [5]]), {})
    routed = plain.replace(routed_experts=[torch.zeros((3, 1, 2), dtype=torch.uint8),
                                           torch.zeros((2, 1, 2), dtype=torch.uint8)])
    bad = BadCase(plain.replace(sample_support=[None, None]), ValueError, "None entries")
    row = cp_reference.pad_for_cp([1, 2, 3], [0, 3], cp_size=2,
                                  routed_experts=torch.zeros((3, 1, 2), dtype=torch.uint8))
    padded = Case((row,), {"cp_size": 2})
    unrouted = Case((row.exclude("routed_experts", "router_padding_mask"),), {"cp_size": 2})
    collator = adapters.get_adapter("transformers.flattening_collator")
    call = collator.call_of
    assert [replays(call(c)) for c in (plain, routed, bad)] == [False, True, True]
    assert collator.in_domain(call(plain)) and needs_no_tail_pad(call(routed))
    assert not collator.in_domain(call(routed)) and not collator.in_domain(call(bad))
    for name in ("trl.padding_free", "trl.padding_free_packed"):
        trl = adapters.get_adapter(name)
        assert trl.in_domain(trl.call_of(plain)) and not trl.in_domain(trl.call_of(routed))
    for name in ("verl.cp_packed_seqs", "verl.cp_thd_engine", "skyrl.cp_packed_indices"):
        shard = adapters.get_adapter(name)
        assert replays(shard.call_of(padded)) and not replays(shard.call_of(unrouted))
        assert not shard.in_domain(shard.call_of(padded)), name


def test_rl_batch_adapters_leave_replayed_calls_out() -> None:
    """SkyRL's and TRL's batch builders take no routes: their adapters keep the calls they had
    (in each one's own layout) and leave out every call carrying routed_experts or
    sample_support, valid or invalid."""
    import torch

    routes = [torch.zeros((3, 1, 2), dtype=torch.uint8), torch.zeros((2, 1, 2), dtype=torch.uint8)]
    for name, layout in (("skyrl.rl_batch", "left"), ("skyrl.rl_batch_0_4", "left"),
                         ("trl.grpo_pad", "two_segment")):
        adapter = adapters.get_adapter(name)
        plain = Case(([[1, 2], [3]], [[4], [5]]), {"pad_token_id": 0, "layout": layout})
        routed = plain.replace(routed_experts=routes)
        bad = BadCase(plain.replace(sample_support=[None, None]), ValueError, "None entries")
        assert adapter.in_domain(adapter.call_of(plain)), name
        assert not adapter.in_domain(adapter.call_of(routed)), name
        assert not adapter.in_domain(adapter.call_of(bad)), name


def _no_routes(prompts, responses, *, pad_token_id, rewards=None, loss_masks=None,
               logprobs=None, layout="left", max_seq_len=None, device=None):
    """The contract as it was before router replay: a signature without routes."""
    from batchproof.reference.rl_batch import build_rl_batch

    return build_rl_batch(prompts, responses, pad_token_id=pad_token_id, rewards=rewards,
                          loss_masks=loss_masks, logprobs=logprobs, layout=layout,
                          max_seq_len=max_seq_len, device=device)


def _routes_dropped(prompts, responses, **kwargs):
    """Takes anything (`**kwargs`), and drops the routes: given them, it fails their checks."""
    return _no_routes(prompts, responses, **{k: v for k, v in kwargs.items()
                                            if k not in ("routed_experts", "sample_support")})


def test_a_function_whose_signature_takes_no_routes_is_given_none() -> None:
    """`within_its_signature`: a function checked against a contract that takes routes, whose
    signature names none of them (no `**kwargs`), is given no call that passes one (its route
    pins are skipped, the route properties pass on the route-free draws), where a function
    that takes `**kwargs` is given them all (and fails, dropping them)."""
    import torch

    from batchproof.adapters import identity_adapter, within_its_signature
    from batchproof.statuses import Outcome

    checks = ["pin:rllm_543_offset_from_longest_prompt", "property:routes_on_their_tokens",
              "pin:two_segment_width_inflation"]
    report = batchproof.check(_no_routes, "rl_batch.build_rl_batch", checks=checks,
                              max_examples=20)
    status = {o.check: o.status for o in report.outcomes}
    assert status == {checks[0]: Outcome.SKIPPED, checks[1]: Outcome.PASS,
                      checks[2]: Outcome.PASS}, status
    with pytest.raises(batchproof.CheckFailed, match="rllm_543"):
        batchproof.check(_routes_dropped, "rl_batch.build_rl_batch", checks=checks[:1])
    adapter = identity_adapter("rl_batch.build_rl_batch", "tests:none")
    routed = Case(([[1]], [[2]]), {"pad_token_id": 0, "routed_experts": [
        torch.zeros((2, 1, 2), dtype=torch.uint8)]})
    for function, admitted in ((_no_routes, False), (_routes_dropped, True)):
        narrowed = within_its_signature(adapter, adapter.guarded(function))
        assert narrowed.in_domain(narrowed.call_of(routed)) is admitted
        assert narrowed.in_domain(narrowed.call_of(routed.replace(routed_experts=None)))


def _lists_only(values):
    """A candidate that takes Python lists only, as docs/checking.md's collate: a tensor row
    fails it with the kind of error a user's NumPy conversion raises."""
    def candidate(prompts, responses, **kwargs):
        for rows in kwargs.values():
            if isinstance(rows, list) and any(not isinstance(r, (list, int, float))
                                              for r in rows):
                raise TypeError("a tensor row: this collate takes lists")
            if not isinstance(rows, (list, int, float, str, type(None))):
                raise TypeError("a tensor: this collate takes lists")
        return build_rl_batch(prompts, responses, **kwargs)
    return candidate


@pytest.mark.parametrize("forms", [["lists"], ["lists", "tensors", "jagged"]])
def test_a_pin_written_in_tensor_forms_is_not_given_to_a_lists_only_target(forms) -> None:
    """rl_batch's pin of signaling NaNs holds tensor rows (forms=("tensors", "jagged")): a target
    given the lists form only (`--forms lists`) is not given it, and the report says why; one
    given those forms runs it (here the lists-only candidate then fails it: the pin ran)."""
    adapter = Adapter(name="t.rl_batch", framework="t", record="rl_batch.build_rl_batch",
                      target="t:collate", wrap=lambda fn: fn, forms=tuple(forms))
    report = check_adapter(adapter, _lists_only(None), checks=["pin:signaling_nan_values"])
    (outcome,) = report.outcomes
    if forms == ["lists"]:
        assert (outcome.status, outcome.detail) == (
            "skipped", "input in forms the target is not given (tensors, jagged)")
        assert not report.new
    else:
        assert outcome.status == "new" and "this collate takes lists" in outcome.detail


# --------------------------------------------------------------------------- verl padding routes


@pytest.fixture(scope="module")
def verl_padding_utils():
    return pytest.importorskip("verl.trainer.ppo.padding_utils")


def test_verl_padding_routes_are_zeros_and_declared(verl_padding_utils) -> None:
    """verl 0.9.1's synthetic padding samples get all-zero routes (verl #7524): confirmed as
    `padding_routes_are_zeros` where topk >= 2; with topk == 1 they agree with the contract."""
    import torch

    routes = verl_padding_utils.build_padding_routed_experts(
        torch.tensor([[[2, 3]], [[3, 1]]], dtype=torch.int16), 3)
    assert routes.tolist() == [[[0, 0]]] * 3 and routes.dtype == torch.int16
    report = _run("verl.padding_routed_experts", ["equivalence",
                                                  "pin:verl_7524_padding_rows_zero_routes"])
    assert not report.new and exit_code([report]) == 0, [(o.check, o.detail) for o in report.new]
    assert _statuses(report)["equivalence"] == "pass"
    assert _statuses(report)["pin:verl_7524_padding_rows_zero_routes"] == "known"
    (known,) = report.known
    assert known["confirmed"] > 0 and known["confirmed"] == known["matched"], known


def test_verl_padding_without_its_divergence_fails_on_routed_experts(verl_padding_utils) -> None:
    report = _run("verl.padding_routed_experts", ["equivalence"],
                  without=("padding_routes_are_zeros",))
    (equivalence,) = report.new
    assert "routed_experts" in equivalence.detail, equivalence.detail
