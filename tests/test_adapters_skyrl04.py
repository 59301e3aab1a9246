"""SkyRL 0.4.0: `convert_prompts_responses_to_batch_tensors` through the adapter
`skyrl.rl_batch_0_4` (docs/frameworks-skyrl04.md).

The import patch and the choice of adapter by version are tested without SkyRL; the rest runs
where skyrl 0.4.x is installed (on Python 3.11: the wheel with `--ignore-requires-python`, as the
docs say) and skips cleanly otherwise. Removing a known divergence must make the check fail with
that divergence's shrunk example; the docs' minimal reproductions are run as written.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import sys
import typing

import pytest
import torch
from hypothesis import strategies as st

from batchproof import adapters, registry
from batchproof.adapters import skyrl as skyrl_adapters
from batchproof.adapters.runner import check_adapter, exit_code, select_adapters
from batchproof.ops.rl_batch import rl_batch_cases
from batchproof.registry import BadCase, Case

ADAPTER = "skyrl.rl_batch_0_4"
REPLAY = "skyrl.rl_batch_replay_0_4"  # the routes and support (harness/adapters/skyrl_replay.py)


def _run(adapter, checks, examples: int = 40, **kwargs):
    return check_adapter(adapter, checks=checks, max_examples=examples, replay_database=False,
                         derandomize=True, **kwargs)


# --------------------------------------------------------------------------- without SkyRL


def test_typed_dict_patch_lasts_only_for_the_import() -> None:
    saved = typing.TypedDict
    with skyrl_adapters.typed_dict_for_pydantic():
        inside = typing.TypedDict
    assert typing.TypedDict is saved
    if sys.version_info < (3, 12):
        import typing_extensions

        assert inside is typing_extensions.TypedDict
    else:
        assert inside is saved
    with pytest.raises(RuntimeError), skyrl_adapters.typed_dict_for_pydantic():
        raise RuntimeError("an import that fails")
    assert typing.TypedDict is saved


def test_each_version_has_its_adapter() -> None:
    new, old = adapters.get_adapter(ADAPTER), adapters.get_adapter("skyrl.rl_batch")
    assert new.fits("0.4.0") and new.fits("0.4.2")
    assert not new.fits("0.3.0") and not new.fits("0.5.0")
    assert old.fits("0.3.0") and not old.fits("0.4.0")
    assert new.target == old.target and new.distribution == old.distribution == "skyrl"
    # both import SkyRL under the patch, also once a known divergence is removed
    for adapter in (new, old, new.without("scalar_reward_rejected")):
        assert adapter.importing is skyrl_adapters.typed_dict_for_pydantic


# --------------------------------------------------------------------------- skyrl 0.4.x


@pytest.fixture(scope="module")
def preprocess():
    try:
        version = importlib.metadata.version("skyrl")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("skyrl is not installed")
    if not adapters.get_adapter(ADAPTER).fits(version):
        pytest.skip(f"skyrl {version} is installed; these tests are for 0.4.x")
    with skyrl_adapters.typed_dict_for_pydantic():
        return pytest.importorskip("skyrl.train.dataset.preprocess")


@pytest.fixture(scope="module")
def convert(preprocess):
    return preprocess.convert_prompts_responses_to_batch_tensors


def test_check_picks_the_0_4_adapter(preprocess) -> None:
    assert [a.name for a in select_adapters("skyrl", ["rl_batch"], None)] == [ADAPTER, REPLAY]
    with pytest.raises(ValueError, match=r"no adapter fits skyrl 0\.4.*skyrl\.rl_batch \(~=0\.3"):
        select_adapters("skyrl", None, "skyrl.rl_batch")


def test_the_0_3_adapter_does_not_fit(preprocess) -> None:
    """Given 0.4.0's function, the 0.3.0 adapter is one misfit, not a divergence per check."""
    report = _run(adapters.get_adapter("skyrl.rl_batch"), None)
    assert "unexpected keyword argument 'tokenizer'" in report.misfit, report.misfit
    assert {o.status for o in report.outcomes} == {"not run"} and not report.known
    assert report.version.startswith("0.4") and exit_code([report]) == 3


def test_known_divergences_only(preprocess) -> None:
    adapter = adapters.get_adapter(ADAPTER)
    checks = registry.get(adapter.record).check_names()
    # 20 examples, the size of the framework matrix's `batchproof check` of the same adapters
    report = _run(adapter, checks, examples=20)
    assert not report.new, [(o.check, o.detail, o.notes) for o in report.new]
    assert not report.unexplained and exit_code([report]) == 0, report.unexplained
    statuses = {o.check: o.status for o in report.outcomes}
    for check in ("equivalence", "errors", "property:shapes_and_dtypes", "property:positions",
                  "property:alignment", "property:max_seq_len_only_warns",
                  "pin:mask_from_token_not_pad"):
        assert statuses[check] == "pass", (check, statuses)
    assert statuses["pin:scalar_reward_on_last_token"] == "known"
    assert statuses["pin:loss_mask_length_mismatch"] == "known"
    known = {k["name"]: k for k in report.known}
    for entry in known.values():  # each met divergence diverged as described, every time
        assert entry["status"] in ("confirmed", "not met") and not entry["too_broad"], entry
    for name in ("scalar_reward_rejected", "pad_token_id_unchecked",
                 "per_token_value_types_unchecked", "multi_dim_row_unchecked"):
        assert known[name]["confirmed"] > 0, known[name]


@st.composite
def _loss_mask_one_too_long(draw) -> BadCase:
    """The defect of `per_token_length_unchecked` alone: one loss mask one entry too long."""
    case = draw(rl_batch_cases(layouts=("left",)))
    rows = [[1.0] * len(r) for r in case.args[1]]
    row = draw(st.integers(0, len(rows) - 1))
    rows[row].append(1.0)
    return BadCase(case.replace(loss_masks=rows), ValueError,
                   f"loss_masks[{row}] has the wrong length")


def test_without_length_divergence_fails_shrunk(preprocess) -> None:
    adapter = adapters.get_adapter(ADAPTER).without("per_token_length_unchecked")
    adapter = dataclasses.replace(adapter, invalid=_loss_mask_one_too_long())
    (errors,) = _run(adapter, ["errors"], report_multiple_bugs=False).new
    # one sample, empty response, one loss-mask entry: NumPy broadcasts it into the empty slice
    assert "accepted bad input (loss_masks[0] has the wrong length)" in errors.detail, errors
    assert errors.minimal.startswith("build_rl_batch([[]], [[]]"), errors.minimal
    assert "loss_masks=[[1.0]]" in errors.minimal, errors.minimal


def test_without_value_type_divergence_fails_shrunk(preprocess) -> None:
    """A None reward is taken as NaN: found by the adapter's extra bad inputs (from valid calls
    without the other optional arguments: the record's strategy draws loss_masks, logprobs and
    max_seq_len first, and Hypothesis does not shrink the failure through them)."""
    adapter = adapters.get_adapter(ADAPTER).without("per_token_value_types_unchecked")
    adapter = dataclasses.replace(adapter, invalid=skyrl_adapters.value_bad_cases(
        valid=rl_batch_cases(layouts=("left",), rewards=("none",), loss_masks=False,
                             logprobs=False, max_seq_len=False)))
    (errors,) = _run(adapter, ["errors"], report_multiple_bugs=False).new
    assert "accepted bad input" in errors.detail and "holds a" in errors.detail, errors.detail
    assert errors.minimal.startswith("build_rl_batch([[]], [[0]]"), errors.minimal


def test_without_scalar_reward_divergence_fails_on_value_error(preprocess) -> None:
    adapter = adapters.get_adapter(ADAPTER).without("scalar_reward_rejected")
    (equivalence,) = _run(adapter, ["equivalence"], report_multiple_bugs=False).new
    assert "ValueError" in equivalence.detail and "1D per-token reward" in equivalence.detail
    assert "rewards=[" in equivalence.minimal, equivalence.minimal


def _pins(adapter, pins: list[str]):
    return _run(adapter, [f"pin:{name}" for name in pins])


# the record's pins that met 0.4.0 for the first time (2026-11-26), and the known divergence
# each one shows
NEW_PINS = {"tensor_row_float": "token_ids_unchecked",
            "jagged_float_prompts": "token_ids_unchecked",
            "scalar_loss_mask": "scalar_row_type_error",
            "string_reward_row": "row_types_unchecked"}


def test_each_new_pin_is_its_known_divergence(preprocess) -> None:
    """Each is set aside and confirmed as the divergence it shows (the outcome names the
    divergences that describe what SkyRL did)."""
    report = _pins(adapters.get_adapter(ADAPTER), list(NEW_PINS))
    assert {o.check: (o.status, o.detail) for o in report.outcomes} == {
        f"pin:{pin}": ("known", name) for pin, name in NEW_PINS.items()}
    assert exit_code([report]) == 0


@pytest.mark.parametrize("pin,shows", [
    ("tensor_row_float", "accepted bad input (prompts[0] holds floats)"),
    ("jagged_float_prompts", "accepted bad input (float jagged prompts)"),
    ("scalar_loss_mask", "candidate raised TypeError: object of type 'float' has no len()"),
    ("string_reward_row", "candidate raised ValueError: Expected a 1D per-token reward "
                          "sequence, got shape ()"),
])
def test_without_its_divergence_a_new_pin_fails(preprocess, pin: str, shows: str) -> None:
    adapter = adapters.get_adapter(ADAPTER).without(NEW_PINS[pin])
    (new,) = _pins(adapter, [pin]).new
    assert shows in new.detail, new.detail


def test_the_new_predicates_match_exactly_their_inputs() -> None:
    """The predicates behind the new divergences, on the pins and on their neighbours that
    agree with the contract (no SkyRL needed)."""
    adapter = adapters.get_adapter(ADAPTER)
    pins = {p.name: p.case for p in registry.get(adapter.record).pins}

    def applies(name, case):
        (known,) = [k for k in adapter.known if k.name == name]
        return known.applies(adapter.call_of(case))

    for pin, name in NEW_PINS.items():
        assert applies(name, pins[pin]), pin
    bad = pins["scalar_loss_mask"].case
    assert applies("scalar_row_type_error",
                   bad.replace(loss_masks=None, logprobs=[torch.tensor(0.5)]))
    # a bool row fails len() with TypeError on both sides; a scalar reward is valid
    assert not applies("scalar_row_type_error", bad.replace(loss_masks=[True]))
    assert not applies("scalar_row_type_error", bad.replace(loss_masks=None, rewards=[1.0]))
    row = pins["string_reward_row"].case
    for value in ("1", b"1", None, True):
        assert applies("row_types_unchecked", row.replace(rewards=[value])), value
    assert applies("row_types_unchecked", row.replace(rewards=None, loss_masks=["1"]))
    # a None or bool loss-mask row fails len() with TypeError, the contract's type
    assert not applies("row_types_unchecked", row.replace(rewards=None, loss_masks=[None]))
    # an int64 row tensor is a valid row; (1, 2) rows fail NumPy's broadcast (ValueError)
    valid = Case(([torch.tensor([1, 2])], [[3]]), {"pad_token_id": 0})
    assert not applies("token_ids_unchecked", valid)
    assert not applies("multi_dim_row_unchecked", pins["tensor_row_2d"])
    taken = BadCase(Case(([torch.ones(1, 1, dtype=torch.int64)], [[3]]), {"pad_token_id": 0}),
                    ValueError, "prompts[0] is 2-D")
    assert applies("multi_dim_row_unchecked", taken)


# --------------------------------------------------------------------------- the docs' examples


def test_fixed_since_0_3(convert) -> None:
    """0.3.0 gave float32 sequences for an all-empty batch; 0.4.0 gives int64."""
    sequences, attention, response_mask, *_ = convert(0, [[]], [[]], [[]], [[]])
    assert sequences.dtype == attention.dtype == response_mask.dtype == torch.int64
    assert tuple(sequences.shape) == (1, 0) and tuple(response_mask.shape) == (1, 0)


def test_reproductions(convert) -> None:
    out = convert(0, [[1], [2]], [[3, 4], [5]], [[0.0, 1.0], [2.0]], [[1, 1], [1, 1]])
    assert out[4].tolist() == [[1.0, 1.0], [1.0, 1.0]]  # row 1: an entry on a prompt column
    assert convert(0, [[1]], [[]], [[]], [[1.0]])[4].shape == (1, 0)  # broadcast into R = 0
    with pytest.raises(ValueError, match="Expected a 1D per-token reward sequence"):
        convert(0, [[1]], [[2]], [1.5], [[1]])
    with pytest.raises(AssertionError):
        convert(0, [[1]], [[2, 3]], [[0.0, 0.0]], [[1, 1]] * 2)
    lp = convert(0, [[1], [2]], [[3, 4], [5]], [[0.0, 0.0], [0.0]], [[1, 1], [1]],
                 logprobs=[[-1.0, -2.0]])[5]
    assert lp.tolist() == [[-1.0, -2.0], [0.0, 0.0]]
    with pytest.raises(IndexError):
        convert(0, [[1]], [[2]], [[0.0]], [[1]], logprobs=[[-1.0], [-2.0]])
    assert convert(1.5, [[1], []], [[2], [3]], [[0.0], [0.0]], [[1], [1]])[0].tolist() == [
        [1, 2], [1, 3]]
    assert convert("0", [[1]], [[2]], [[0.0]], [[1]])[0].tolist() == [[1, 2]]
    with pytest.raises(OverflowError):
        convert(2**63, [[1]], [[2]], [[0.0]], [[1]])  # no row needs padding
    assert convert(None, [[]], [[]], [[]], [[]])[0].shape == (1, 0)
    sequences = convert(0, [[1.5]], [["3"]], [[0.0]], [[1]])[0]
    assert sequences.tolist() == [[1, 3]] and sequences.dtype == torch.int64
    out = convert(0, [[1]], [[2]], [[None]], [[None]], logprobs=[["0.5"]])
    assert out[3].isnan().all() and out[4].isnan().all() and out[5].tolist() == [[0.5]]
    assert convert(0, [[1]], [[2]], [[0.0]], [torch.ones(1, 1)])[4].tolist() == [[1.0]]


def test_reproductions_found_2026_11_26(convert) -> None:
    """docs/frameworks-skyrl04.md's rows for the record's newer pins, run as written."""
    # token_ids_unchecked: float / bool tensor rows cast, str rows parsed and broadcast
    assert convert(0, [torch.tensor([1.5])], [[3]], [[0.0]], [[1]])[0].tolist() == [[1, 3]]
    jagged = torch.nested.nested_tensor([torch.tensor([1.0])], layout=torch.jagged)
    assert convert(0, jagged, [[3]], [[0.0]], [[1]])[0].tolist() == [[1, 3]]
    assert convert(0, [torch.tensor([True])], [[3]], [[0.0]], [[1]])[0].tolist() == [[1, 3]]
    assert convert(0, ["12"], [[3, 4]], [[0.0, 0.0]], [[1, 1]])[0].tolist() == [[12, 12, 3, 4]]
    assert convert(0, "12", [[3], [4]], [[0.0], [0.0]], [[1], [1]])[0].tolist() == [
        [1, 3], [2, 4]]
    with pytest.raises(ValueError, match="invalid literal"):
        convert(0, ["x"], [[3]], [[0.0]], [[1]])
    # multi_dim_row_unchecked: a (1, 1) token row is taken, a (1, 2) one is NumPy's ValueError
    assert convert(0, [torch.ones(1, 1, dtype=torch.int64)], [[3]], [[0.0]], [[1]])[
        0].tolist() == [[1, 3]]
    with pytest.raises(ValueError, match="could not broadcast"):
        convert(0, [torch.ones(1, 2, dtype=torch.int64)], [[3]], [[0.0]], [[1]])
    # scalar_row_type_error
    with pytest.raises(TypeError, match="has no len"):
        convert(0, [[1]], [[2]], [[0.0]], [1.0])
    with pytest.raises(TypeError, match="has no len"):
        convert(0, [[1]], [[2]], [[0.0]], [[1]], logprobs=[0.5])
    # row_types_unchecked
    for row in ("1", b"1", None, True):
        with pytest.raises(ValueError, match="Expected a 1D per-token reward sequence"):
            convert(0, [[1]], [[2]], [row], [[1]])
    with pytest.raises(ValueError, match="could not convert string to float"):
        convert(0, [[1]], [[2]], ["x"], [[1]])
    assert convert(0, [[1]], [[2, 3]], [[0.0, 0.0]], ["12"])[4].tolist() == [[12.0, 12.0]]
    with pytest.raises(TypeError, match="has no len"):  # a None mask row: the contract's type
        convert(0, [[1]], [[2]], [[0.0]], [None])


def test_jagged_logprobs_fail_on_truthiness(convert) -> None:
    """Why the adapter gives lists and tensors only: `if logprobs:` on a jagged tensor."""
    from batchproof import blocks

    jagged = blocks.jagged([[1.0], [2.0, 3.0]], torch.float32)
    prompts, responses = blocks.jagged([[1], [2]], torch.int64), blocks.jagged(
        [[3], [4, 5]], torch.int64)
    out = convert(0, prompts, responses, jagged, jagged)  # without logprobs: fine
    assert out[0].tolist() == [[0, 1, 3], [2, 4, 5]]
    with pytest.raises(RuntimeError, match="Boolean value of Tensor"):
        convert(0, prompts, responses, jagged, jagged, logprobs=jagged)


# --------------------------------------------------------------------------- Megatron CP map


@pytest.fixture(scope="module")
def skyrl_megatron():
    pytest.importorskip("megatron.core")
    from batchproof.adapters.skyrl_megatron import MODEL_UTILS

    with skyrl_adapters.typed_dict_for_pydantic():
        try:
            import importlib

            return importlib.import_module(MODEL_UTILS)
        except ImportError as err:
            pytest.skip(f"SkyRL's Megatron model utilities do not import here: {err}")


CP_ADAPTER = "skyrl.cp_packed_indices"


@pytest.mark.parametrize("name, pin", [(CP_ADAPTER, "pin:te_1930_last_valid_token_kept"),
                                       ("skyrl.cp_rank_bshd", "pin:megatron_bshd_zigzag")])
def test_skyrl_cp_functions_agree_with_the_contract(skyrl_megatron, name: str, pin: str) -> None:
    adapter = adapters.get_adapter(name)  # every check: the matrix's `check --impl skyrl`
    checks = [c for c in registry.get(adapter.record).check_names()
              if c == "equivalence" or c.startswith("pin:")]
    report = _run(adapter, checks, examples=30)
    assert not report.new and not report.unexplained and not report.errors, report.outcomes
    statuses = {o.check: o.status for o in report.outcomes}
    assert statuses["equivalence"] == "pass" and statuses[pin] == "pass", statuses


def test_skyrl_bshd_slice_of_the_mirror_rank_fails(skyrl_megatron) -> None:
    adapter = adapters.get_adapter("skyrl.cp_rank_bshd")
    wrap = adapter.wrap

    def mirrored(tokens_on_rank):
        return lambda x, rank, size, **kw: tokens_on_rank(x, size - 1 - rank, size, **kw)

    adapter = dataclasses.replace(adapter, wrap=lambda target: wrap(mirrored(target)))
    report = _run(adapter, ["equivalence"], examples=30)
    assert report.new and "Mismatch" in report.new[0].detail, report.outcomes


def test_skyrl_cp_map_with_the_mirror_rank_fails(skyrl_megatron) -> None:
    """The check can fail: SkyRL's map with every rank read as cp - 1 - r must diverge."""
    adapter = adapters.get_adapter(CP_ADAPTER)
    wrap = adapter.wrap

    def mirrored(rank_and_local):
        def planted(*args):
            rank_of, local = rank_and_local(*args)
            return args[-1] - 1 - rank_of, local
        return planted

    adapter = dataclasses.replace(adapter, wrap=lambda target: wrap(mirrored(target)))
    report = _run(adapter, ["equivalence"], examples=30)
    assert report.new and "Mismatch" in report.new[0].detail, report.outcomes


def _packed_rows(count: int) -> list[tuple[list[int], list[int]]]:
    """(ids, cu_seqlens) of packed rows, drawn derandomized: 1 to 5 sequences of 0 to 9 tokens
    (lengths that are and are not multiples of 2·cp, empty sequences)."""
    import hypothesis

    drawn = []

    @hypothesis.settings(max_examples=count, derandomize=True, database=None, deadline=None,
                         phases=[hypothesis.Phase.generate],
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(st.lists(st.lists(st.integers(0, 49), max_size=9), min_size=1,
                               max_size=5))
    def draw(sequences):
        cu = [0]
        for sequence in sequences:
            cu.append(cu[-1] + len(sequence))
        drawn.append(([t for s in sequences for t in s], cu))

    draw()
    return drawn


def test_skyrl_gathers_cp_shares_through_a_real_process_group(skyrl_megatron,
                                                              tmp_path) -> None:
    """SkyRL 0.4.0's `allgather_cp_sharded_packed_tensor` across 2 real ranks (gloo): each rank
    gives it the per-token outputs of its share in the contract's zigzag layout
    (`reference.cp.shard`); what comes back on every rank must be the outputs of the whole
    padded stream, bit for bit (24 derandomized rows). With every rank sending its mirror
    rank's share (planted), some row must come back different."""
    import pickle

    import skyrl_ranks
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from batchproof.reference import cp as reference

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available here")
    rows = _packed_rows(24)
    out = str(tmp_path / "out")
    mp.start_processes(skyrl_ranks.rank_main, args=(2, str(tmp_path / "rendezvous"), rows, out),
                       nprocs=2, start_method="spawn", join=True)
    got = []
    for rank in range(2):
        with open(f"{out}.{rank}", "rb") as handle:
            got.append(pickle.load(handle))
    wanted = []
    for ids, cu in rows:
        padded = reference.pad_for_cp(ids, cu, cp_size=2)
        wanted.append(skyrl_ranks.per_token(padded["input_ids"][0],
                                            padded["position_ids"][0]).tolist())
    assert any(len(ids) % 4 for ids, _ in rows)  # rows that need padding
    for rank in range(2):
        assert got[rank][0] == wanted, rank
    assert any(g != w for g, w in zip(got[0][1], wanted)), (
        "mirrored shares went through the gather unnoticed")


def test_the_cp_module_registers_without_skyrl_or_megatron() -> None:
    import subprocess

    code = ("import sys; sys.modules['skyrl'] = None; sys.modules['megatron'] = None\n"
            "import batchproof.adapters.skyrl_megatron as m\n"
            "for a in (m.CP_PACKED_INDICES, m.CP_RANK_BSHD):\n"
            "    assert (a.versions, a.needs) == ('~=0.4.0', ('megatron-core',))\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- router replay


def test_replay_known_divergences_only(preprocess) -> None:
    """Routes and support through SkyRL 0.4.0: every divergence declared, each confirmed."""
    adapter = adapters.get_adapter(REPLAY)
    report = _run(adapter, registry.get(adapter.record).check_names(), examples=20)
    assert not report.new, [(o.check, o.detail) for o in report.new]
    assert exit_code([report]) == 0 and not report.not_reproduced
    statuses = {o.check: o.status for o in report.outcomes}
    for check in ("equivalence", "errors", "property:routes_on_their_tokens",
                  "property:dummy_routes_where_masked", "property:route_count_per_layer",
                  "property:support_on_response_slots", "pin:sglang_36404_stale_rows_repeated",
                  "pin:rllm_543_offset_from_longest_prompt", "pin:loss_masked_tokens_replayed"):
        assert statuses[check] == "pass", (check, statuses)
    known = {k["name"]: k for k in report.known}
    for entry in known.values():  # each met divergence diverged as described
        assert entry["status"] in ("confirmed", "not met"), entry
    for name in ("int64_routes_refused", "uncaptured_sample_refused"):
        assert known[name]["confirmed"] > 0, known[name]


@pytest.mark.parametrize("divergence", ["uncaptured_sample_refused", "int64_routes_refused"])
def test_without_a_replay_divergence_the_check_fails(preprocess, divergence: str) -> None:
    adapter = adapters.get_adapter(REPLAY).without(divergence)
    (equivalence,) = _run(adapter, ["equivalence"], report_multiple_bugs=False).new
    assert "ValueError" in equivalence.detail and "routed_experts=" in equivalence.minimal


def test_replay_reproductions(convert) -> None:
    """The smallest input of each declared replay divergence, on SkyRL itself."""
    import numpy as np

    def call(routes=None, support=None, prompts=([1],), responses=([2],)):
        return convert(0, [list(p) for p in prompts], [list(r) for r in responses],
                       [[0.0] * len(r) for r in responses], [[1] * len(r) for r in responses],
                       rollout_expert_indices=routes, rollout_sample_support=support)

    def routes(n, dtype=np.uint8, k=1):
        return np.tile(np.arange(k, dtype=dtype), (n, 1, 1))

    with pytest.raises(ValueError, match="canonical routed-expert dtype"):
        call([routes(1, np.int64)])  # int64_routes_refused
    with pytest.raises(ValueError, match="must contain routes for every trajectory"):
        call([routes(0)])  # uncaptured_sample_refused
    with pytest.raises(ValueError, match="canonical sample-support dtype"):
        call(support=[np.full((1, 1), -1, np.int16)])  # support_int32_only
    with pytest.raises(TypeError, match="must be NumPy arrays"):
        call([None])  # none_entry_type_error
    with pytest.raises(ValueError, match="canonical routed-expert dtype"):
        call([routes(1, np.float32)])  # route_dtype_refused_by_value
    mixed = call([routes(1), routes(1, np.int16)], prompts=([1], [1]), responses=([2], [2]))[6]
    assert mixed.values.dtype == torch.int16  # mixed_route_dtypes_widened
    negative = call([np.full((1, 1, 1), -1, np.int16)])[6]
    assert negative.values.flatten().tolist() == [-1, 0]  # negative_route_ids_unchecked
    support = call(support=[np.array([[-2]], np.int32)])[7]
    assert support.values.tolist() == [[-2]]  # support_ids_unchecked
    # what agrees: routes on the sample's real tokens, SkyRL's dummy past the captured prefix
    out = call([routes(1, k=2) + 3, routes(1, k=2) + 5], prompts=([1], []),
               responses=([2], [5]))
    assert out[6].values.tolist() == [[[3, 4]], [[0, 1]], [[5, 6]]]
    assert out[6].cu_seqlens.tolist() == [0, 2, 3]
    mask = convert.__globals__["make_router_padding_mask"](out[1], [1, 1])
    assert mask.tolist() == [[False, True], [True, False]]
