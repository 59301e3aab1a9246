"""The conversion code of `batchproof.adapters.verl_mcore` on stand-ins of verl's and
Megatron-core's functions (issue 39: the killers of `mutate --mutmut --harness
adapters/verl_mcore`).

Neither verl nor Megatron is installed here: what the adapters import of them (Megatron's
parallel state, `TopKRouter`, verl's `RouterReplay` and `router_replay_utils`) are small fake
modules put in `sys.modules` for a test, and the functions they wrap are the liveness stand-ins
(`tests/liveness_stand_ins.py`), which slice as verl does with the contract's own shard. Asserted:
what the module docstring promises — the parallel state each rank sees and gets back, verl's
inputs built from the padded row's real tokens, every compared field verl's own output, the
domains and the known-divergence predicates on exactly the calls they name.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch
from hypothesis import given, settings
from liveness_stand_ins import (
    PackedSeqParams,
    RouterReplay,
    stand_in_cp_rank,
    stand_in_moe_layers,
    verl_preprocess_packed_seqs,
    verl_preprocess_thd_engine,
    verl_set_router_replay_data,
)
from tensordict import TensorDict

from batchproof.adapters import Call, verl_mcore
from batchproof.adapters.verl_mcore import (
    CP_PACKED_SEQS,
    THD_ENGINE,
    a_rank_holds_a_pad,
    as_nested,
    as_verl_batch,
    contiguous_split,
    no_sequences,
    padded_as_verl_pads,
    real_indices,
    replay_data_adapter,
    replay_padded_cases,
    replay_targets,
    replayed_as_verl_pads,
    sharding_with,
    verl_padded_cases,
    verl_padded_row,
    verl_step,
)
from batchproof.reference import cp as contract
from batchproof.registry import BadCase, Case

# --------------------------------------------------------------------------- fake modules


def _module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


@pytest.fixture
def mpu(monkeypatch) -> types.ModuleType:
    """A fake `megatron.core.parallel_state` (and no process group: `default_group` recorded)."""
    state = _module("megatron.core.parallel_state", _CONTEXT_PARALLEL_GROUP="cp before",
                    _MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE="tp before",
                    _TENSOR_MODEL_PARALLEL_GROUP="tp group before",
                    _DATA_PARALLEL_GROUP=None, groups=[])

    def set_tp(size: int) -> None:
        state._MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE = size

    state.set_tensor_model_parallel_world_size = set_tp
    monkeypatch.setitem(sys.modules, "megatron", _module("megatron"))
    monkeypatch.setitem(sys.modules, "megatron.core", _module("megatron.core",
                                                               parallel_state=state))
    monkeypatch.setitem(sys.modules, "megatron.core.parallel_state", state)
    monkeypatch.setattr(verl_mcore, "default_group", lambda: state.groups.append(True))
    return state


@pytest.fixture
def verl_replay(monkeypatch) -> types.ModuleType:
    """Fake `verl.utils.megatron.router_replay_utils` and `router_replay_patch`."""
    utils = _module("verl.utils.megatron.router_replay_utils", device_name="cuda")
    patch = _module("verl.utils.megatron.router_replay_patch", RouterReplay=RouterReplay)
    package = _module("verl.utils.megatron", router_replay_utils=utils,
                      router_replay_patch=patch)
    for name, module in (("verl", _module("verl")), ("verl.utils", _module("verl.utils")),
                         ("verl.utils.megatron", package), (utils.__name__, utils),
                         (patch.__name__, patch)):
        monkeypatch.setitem(sys.modules, name, module)
    return utils


def _sizes(group) -> tuple[int, int]:
    return group.size(), group.rank()


# --------------------------------------------------------------------------- parallel state


def test_each_rank_sees_its_cp_group_and_tp_1_then_the_state_is_back(mpu) -> None:
    with verl_mcore.megatron_cp_rank(4, 3):
        assert _sizes(mpu._CONTEXT_PARALLEL_GROUP) == (4, 3)
        assert mpu._MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE == 1
        assert mpu.groups == [True]
    assert mpu._CONTEXT_PARALLEL_GROUP == "cp before"
    assert mpu._MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE == "tp before"


def test_the_state_is_back_after_an_exception(mpu) -> None:
    with pytest.raises(KeyError), verl_mcore.megatron_cp_rank(2, 0):
        raise KeyError
    assert mpu._CONTEXT_PARALLEL_GROUP == "cp before"
    assert mpu._MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE == "tp before"


@pytest.mark.parametrize("data_parallel", [None, "dp before"])
def test_the_replay_rank_adds_tp_and_dp_groups_and_the_cpu(mpu, verl_replay,
                                                           data_parallel) -> None:
    mpu._DATA_PARALLEL_GROUP = data_parallel
    with pytest.raises(KeyError), verl_mcore.replay_rank(2, 1):
        assert _sizes(mpu._CONTEXT_PARALLEL_GROUP) == (2, 1)
        assert _sizes(mpu._TENSOR_MODEL_PARALLEL_GROUP) == (1, 0)
        dp = mpu._DATA_PARALLEL_GROUP
        assert dp == data_parallel if data_parallel else _sizes(dp) == (1, 0)
        assert verl_replay.device_name == "cpu"
        raise KeyError
    assert (mpu._TENSOR_MODEL_PARALLEL_GROUP, mpu._DATA_PARALLEL_GROUP) == (
        "tp group before", data_parallel)
    assert verl_replay.device_name == "cuda" and mpu._CONTEXT_PARALLEL_GROUP == "cp before"


# --------------------------------------------------------------------------- verl's inputs


def test_verl_batch_holds_each_sequences_real_values_right_padded() -> None:
    field = torch.tensor([[[1, 1], [2, 2], [3, 3], [9, 9], [4, 4], [9, 9]]], dtype=torch.int16)
    batch, mask = as_verl_batch(field, [0, 3, 4], [0, 4, 6])
    assert batch.dtype == torch.int16 and mask.dtype == torch.bool
    assert batch[..., 0].tolist() == [[1, 2, 3], [4, 0, 0]]
    assert torch.equal(batch[..., 1], batch[..., 0])
    assert mask.tolist() == [[True, True, True], [True, False, False]]


def test_no_sequences_are_an_empty_verl_batch() -> None:
    batch, mask = as_verl_batch(torch.zeros(1, 0, 3), [0], [0])
    assert batch.shape == (0, 0, 3) and mask.shape == (0, 0)


def test_the_nested_batch_holds_the_real_values_with_offsets_cu() -> None:
    field = torch.tensor([[1.0, 2.0, 3.0, 0.0, 4.0, 0.0]])
    nested = as_nested(field, [0, 3, 4], [0, 4, 6])
    assert nested.is_nested and nested.offsets().tolist() == [0, 3, 4]
    assert nested.values().tolist() == [1.0, 2.0, 3.0, 4.0]


def test_no_sequences_are_an_empty_nested_batch() -> None:
    nested = as_nested(torch.zeros(1, 0, 2), [0], [0])
    assert nested.offsets().tolist() == [0] and nested.values().shape == (0, 2)


def test_the_real_indices_count_from_one() -> None:
    assert real_indices([0, 2, 5]).tolist() == [[1, 2, 3, 4, 5]]
    assert real_indices([0, 2, 5]).dtype == torch.int64


def test_the_packed_slicer_hands_verl_the_batch_and_mask_and_reads_its_answer() -> None:
    seen = []

    def preprocess(batch, mask):
        seen.append((batch, mask))
        return torch.arange(6).reshape(1, 3, 2), PackedSeqParams(torch.tensor([0, 8]))

    field = torch.tensor([[5, 6, 0, 0]])
    local, boundaries = verl_mcore.packed_seqs_slicer(preprocess, "zigzag")(field, [0, 2],
                                                                            [0, 4])
    assert local.tolist() == [[0, 1], [2, 3], [4, 5]] and boundaries.tolist() == [0, 8]
    (batch, mask), = seen
    assert batch.tolist() == [[5, 6]] and mask.tolist() == [[True, True]]


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_the_thd_slicer_hands_verl_the_nested_batch_and_layout(layout: str) -> None:
    seen = []

    def preprocess(nested, cp_layout):
        seen.append((nested, cp_layout))
        return torch.arange(3).reshape(1, 3), PackedSeqParams(torch.tensor([0, 4])), "positions"

    local, boundaries = verl_mcore.thd_engine_slicer(preprocess, layout)(
        torch.tensor([[5, 6, 0, 0]]), [0, 2], [0, 4])
    assert local.tolist() == [0, 1, 2] and boundaries.tolist() == [0, 4]
    (nested, cp_layout), = seen
    assert cp_layout == layout and nested.values().tolist() == [5, 6]


# --------------------------------------------------------------------------- cp.shard


def _row(cp_size: int = 2, layout: str = "zigzag") -> TensorDict:
    ids, cu = [11, 12, 13, 14, 15, 16, 17], [0, 3, 7]
    if layout == "zigzag":
        td = contract.pad_for_cp(ids, cu, cp_size=cp_size, loss_mask=[1.0, 0.5, 0.0, 1.0, 1.0,
                                                                       0.25, 1.0])
    else:
        td = verl_padded_row(ids, cu, verl_step(cp_size, layout))
    td["position_ids"] = torch.arange(td["input_ids"].shape[1]).reshape(1, -1) + 1
    return td


def shard_adapter(preprocess):
    """`verl.cp_packed_seqs`' wrap, built here (the module's is built at import)."""
    return sharding_with(verl_mcore.packed_seqs_slicer, local_boundaries=True)(preprocess)


def thd_engine_adapter(preprocess):
    """`verl.cp_thd_engine`'s wrap, built here."""
    return sharding_with(verl_mcore.thd_engine_slicer, local_boundaries=False)(preprocess)


def test_the_registered_wraps_are_the_sharding_ones(ranks) -> None:
    for adapter, build in ((CP_PACKED_SEQS, shard_adapter), (THD_ENGINE, thd_engine_adapter)):
        fake = verl_preprocess_packed_seqs if build is shard_adapter else (
            verl_preprocess_thd_engine)
        out, want = adapter.wrap(fake)(_row(2), cp_size=2), build(fake)(_row(2), cp_size=2)
        assert set(out.keys()) == set(want.keys())
        assert all(torch.equal(out[key], want[key]) for key in out.keys())


@pytest.fixture
def ranks(monkeypatch) -> None:
    monkeypatch.setattr(verl_mcore, "megatron_cp_rank", stand_in_cp_rank)


@pytest.mark.parametrize("cp_size", [1, 2, 3])
@pytest.mark.parametrize("cp_rank", [None, 0])
def test_packed_seqs_is_verls_slice_of_every_field(ranks, cp_size: int, cp_rank) -> None:
    out = shard_adapter(verl_preprocess_packed_seqs)(_row(cp_size), cp_size=cp_size,
                                                     cp_rank=cp_rank)
    want = contract.shard(_row(cp_size), cp_size=cp_size, cp_rank=cp_rank)
    assert out.batch_size == torch.Size([cp_size if cp_rank is None else 1])
    assert set(out.keys()) == {"input_ids", "loss_mask", "token_index", "cu_seqlens_padded"}
    for key in out.keys():
        assert torch.equal(out[key], want[key]) and out[key].dtype == want[key].dtype, key


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_the_thd_engine_is_verls_slice_of_every_field(ranks, layout: str) -> None:
    out = thd_engine_adapter(verl_preprocess_thd_engine)(_row(2, layout), cp_size=2,
                                                         layout=layout)
    want = contract.shard(_row(2, layout), cp_size=2, layout=layout)
    assert out.batch_size == torch.Size([2])
    fields = {"input_ids", "token_index"} | ({"loss_mask"} if layout == "zigzag" else set())
    assert set(out.keys()) == fields  # labels and position_ids not compared
    for key in out.keys():
        assert torch.equal(out[key], want[key]), key


def test_the_thd_engine_is_handed_the_contracts_default_layout(ranks) -> None:
    layouts = []

    def preprocess(nested, cp_layout):
        layouts.append(cp_layout)
        return verl_preprocess_thd_engine(nested, cp_layout=cp_layout)

    thd_engine_adapter(preprocess)(_row(2), cp_size=2, cp_rank=0)
    assert set(layouts) == {"zigzag"}


def test_every_field_and_the_boundaries_are_verls_own(ranks) -> None:
    """A verl answering +10 on every rank's share and boundaries 2·cp is read as it is."""
    def preprocess(batch, mask):
        local, params = verl_preprocess_packed_seqs(batch, mask)
        return local + 10, PackedSeqParams(params.cu_seqlens_q_padded * 0 + 8)

    out = shard_adapter(preprocess)(_row(2), cp_size=2)
    want = contract.shard(_row(2), cp_size=2)
    assert torch.equal(out["input_ids"], want["input_ids"] + 10)
    assert torch.equal(out["token_index"], want["token_index"] + 10)
    assert out["cu_seqlens_padded"].unique().tolist() == [4]  # 8 // cp


# --------------------------------------------------------------------------- domains


def _call(padded, valid: bool = True, **kwargs) -> Call:
    case = Case((padded,), kwargs)
    return Call.of(case if valid else BadCase(case, ValueError), contract.shard)


def test_verls_step_is_2cp_for_zigzag_and_cp_for_contiguous() -> None:
    assert [verl_step(c, "zigzag") for c in (1, 2, 3)] == [1, 4, 6]
    assert [verl_step(c, "contiguous") for c in (1, 2, 3)] == [1, 2, 3]


def test_verls_padded_row_pads_each_span_to_the_step_with_zeros() -> None:
    row = verl_padded_row([1, 2, 3, 4, 5], [0, 2, 5], 3)
    assert row["input_ids"].tolist() == [[1, 2, 0, 3, 4, 5]]
    assert row["cu_seqlens_padded"].tolist() == [0, 3, 6]
    assert row["cu_seqlens"].tolist() == [0, 2, 5]
    assert row["cu_seqlens"].dtype == row["cu_seqlens_padded"].dtype == torch.int32
    assert row["input_ids"].dtype == torch.int64
    assert row.batch_size == torch.Size([])


def _wide_last_span(**fields) -> TensorDict:
    """A valid zigzag row for cp 2 whose last sequence (4 tokens) is padded to 8, not 4."""
    row = TensorDict({"input_ids": torch.tensor([[1, 2, 3, 0, 4, 5, 6, 7, 0, 0, 0, 0]]),
                      "cu_seqlens": torch.tensor([0, 3, 7], dtype=torch.int32),
                      "cu_seqlens_padded": torch.tensor([0, 4, 12], dtype=torch.int32),
                      **fields})
    assert contract.shard(row, cp_size=2) is not None  # the contract's: valid
    return row


def test_verls_padding_is_the_domain() -> None:
    zigzag, both = padded_as_verl_pads(("zigzag",)), padded_as_verl_pads(("zigzag", "contiguous"))
    assert zigzag.__name__ == "padded_as_verl_pads_zigzag"
    assert both.__qualname__ == "padded_as_verl_pads_zigzag_contiguous"
    assert zigzag(_call(_row(2), cp_size=2)) and zigzag(_call(_row(2), cp_size=2, layout="zigzag"))
    assert not zigzag(_call(_row(2, "contiguous"), cp_size=2, layout="contiguous"))
    assert both(_call(_row(2, "contiguous"), cp_size=2, layout="contiguous"))
    assert both(_call(_row(3), cp_size=3))
    assert not both(_call(_row(2), valid=False, cp_size=2))
    assert not both(_call(_row(2)["input_ids"], cp_size=2))
    assert not both(_call(_row(3), cp_size=2))  # padded for 3: spans of 6, not 4
    assert not both(_call(_wide_last_span(), cp_size=2))
    contiguous = verl_padded_row(list(range(1, 8)), [0, 2, 7], 2)  # spans 2 and 6
    assert both(_call(contiguous, cp_size=2, layout="contiguous"))
    assert not both(_call(contiguous, cp_size=2))  # zigzag needs spans of 4


def test_a_nonzero_pad_in_a_compared_field_is_outside_the_domain() -> None:
    supports = padded_as_verl_pads(("zigzag",))
    for key in ("input_ids", "loss_mask"):
        row = _row(2)
        row[key][0, 3] = 1  # the one pad (3 and 4 tokens in spans of 4)
        assert not supports(_call(row, cp_size=2)), key
    last = contract.pad_for_cp([1, 2, 3, 4, 5, 6], [0, 3, 6], cp_size=2)
    assert supports(_call(last, cp_size=2))
    last["input_ids"][0, 7] = 1  # the last sequence's pad
    assert not supports(_call(last, cp_size=2))
    row = _row(2)
    row["position_ids"][0, 3] = 5  # not compared: its pads are not verl's to fill
    assert supports(_call(row, cp_size=2))


def test_the_adapters_drop_the_replayed_rows() -> None:
    row = contract.pad_for_cp([1, 2], [0, 2], cp_size=2,
                              routed_experts=torch.zeros(2, 1, 2, dtype=torch.int64))
    for adapter in (CP_PACKED_SEQS, THD_ENGINE):
        assert not adapter.supports(_call(row, cp_size=2))
        assert adapter.supports(_call(_row(2), cp_size=2))


@settings(max_examples=30, deadline=None)
@given(case=verl_padded_cases(("zigzag", "contiguous")))
def test_every_drawn_row_is_in_the_thd_domain(case: Case) -> None:
    assert THD_ENGINE.supports(Call.of(case, contract.shard))


@settings(max_examples=30, deadline=None)
@given(case=verl_padded_cases())
def test_every_drawn_zigzag_row_is_in_the_packed_domain(case: Case) -> None:
    call = Call.of(case, contract.shard)
    assert CP_PACKED_SEQS.supports(call) and call.arg("layout") == "zigzag"


def test_no_sequences() -> None:
    empty = contract.pad_for_cp([], [0], cp_size=2)
    assert no_sequences(_call(empty, cp_size=2))
    assert not no_sequences(_call(empty, valid=False, cp_size=2))
    assert not no_sequences(_call(_row(2), cp_size=2))
    assert not no_sequences(_call(torch.zeros(1), cp_size=2))


def test_contiguous_split() -> None:
    row = _row(2, "contiguous")
    assert contiguous_split(_call(row, cp_size=2, layout="contiguous"))
    assert not contiguous_split(_call(row, cp_size=1, layout="contiguous"))
    assert not contiguous_split(_call(row, cp_size=2))
    assert not contiguous_split(_call(row, valid=False, cp_size=2, layout="contiguous"))
    assert not contiguous_split(_call(row, cp_size="2", layout="contiguous"))


# --------------------------------------------------------------------------- router replay


def _replayed(cp_size: int = 2, topk: int = 2, dtype=torch.int32) -> TensorDict:
    routes = torch.arange(7 * 3 * topk).reshape(7, 3, topk).to(dtype) % 5
    return contract.pad_for_cp([11, 12, 13, 14, 15, 16, 17], [0, 3, 7], cp_size=cp_size,
                               routed_experts=routes)


def test_the_moe_layers_are_routers_numbered_from_one_with_a_replay(monkeypatch,
                                                                     verl_replay) -> None:
    class TopKRouter(torch.nn.Module):
        def __init__(self) -> None:
            raise AssertionError("the router's own __init__ builds weights")

    router_module = _module("megatron.core.transformer.moe.router", TopKRouter=TopKRouter)
    monkeypatch.setitem(sys.modules, router_module.__name__, router_module)
    for name in ("megatron", "megatron.core", "megatron.core.transformer",
                 "megatron.core.transformer.moe"):
        monkeypatch.setitem(sys.modules, name, _module(name))
    monkeypatch.setattr(RouterReplay, "router_instances", [])
    decoder = verl_mcore.moe_layers(3)
    assert [router.layer_number for router in decoder.routers] == [1, 2, 3]
    assert all(isinstance(router, TopKRouter) for router in decoder.routers)
    replays = [router.router_replay for router in decoder.routers]
    assert all(isinstance(r, RouterReplay) for r in replays)
    assert RouterReplay.router_instances == replays and len(set(map(id, replays))) == 3
    assert isinstance(decoder, torch.nn.Module)


@pytest.fixture
def layers(monkeypatch, verl_replay) -> None:
    monkeypatch.setattr(verl_mcore, "moe_layers", stand_in_moe_layers)
    monkeypatch.setattr(RouterReplay, "router_instances", [])


def test_the_targets_are_the_layers_replays_in_order_and_then_unlisted(layers) -> None:
    seen = []

    def hand_over(batch, mask, config, model):
        seen.append((batch, mask, config))
        for number, router in enumerate(model.routers):
            router.router_replay.target_topk_idx = torch.full((2,), number)

    targets = replay_targets(hand_over)("batch", "mask", "config", 3)
    assert [t.tolist() for t in targets] == [[0, 0], [1, 1], [2, 2]]
    assert seen == [("batch", "mask", "config")] and RouterReplay.router_instances == []


def test_the_replays_are_unlisted_when_verl_raises(layers) -> None:
    def hand_over(batch, mask, config, model):
        raise KeyError

    with pytest.raises(KeyError):
        replay_targets(hand_over)("batch", "mask", "config", 2)
    assert RouterReplay.router_instances == []


@pytest.fixture
def replay_ranks(monkeypatch, layers) -> None:
    monkeypatch.setattr(verl_mcore, "replay_rank", stand_in_cp_rank)


@pytest.mark.parametrize("cp_size, cp_rank", [(1, None), (2, None), (2, 1), (3, None)])
@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8])
def test_the_replayed_routes_are_verls_targets(replay_ranks, cp_size, cp_rank, dtype) -> None:
    adapter = replay_data_adapter(replay_targets(verl_set_router_replay_data))
    out = adapter(_replayed(cp_size, dtype=dtype), cp_size=cp_size, cp_rank=cp_rank)
    want = contract.shard(_replayed(cp_size, dtype=dtype), cp_size=cp_size, cp_rank=cp_rank)
    assert set(out.keys()) == {"routed_experts"}
    assert out.batch_size == torch.Size([cp_size if cp_rank is None else 1])
    assert out["routed_experts"].dtype == dtype
    assert torch.equal(out["routed_experts"], torch.where(
        want["token_index"][..., None, None] < 0, 0, want["routed_experts"]))


def test_verl_is_handed_the_real_routes_and_a_config_of_their_layers(replay_ranks) -> None:
    seen = []

    def targets(batch, mask, config, layers):
        seen.append((batch, mask, config, layers))
        return [torch.zeros(4, 2, dtype=torch.int64)] * layers

    replay_data_adapter(targets)(_replayed(2), cp_size=2, cp_rank=0)
    (batch, mask, config, layers), = seen
    assert layers == 3 and vars(config) == {"fp8": None, "num_layers": 3, "moe_layer_freq": 1}
    want, _ = as_verl_batch(_replayed(2)["routed_experts"], [0, 3, 7], [0, 4, 8])
    assert torch.equal(batch, want) and mask.sum() == 7


def _routed(cp_size: int, topk: int = 2) -> Call:
    return _call(_replayed(cp_size, topk), cp_size=cp_size)


def test_replay_is_supported_on_verl_padded_zigzag_rows_with_routes() -> None:
    assert replayed_as_verl_pads(_routed(2)) and replayed_as_verl_pads(_routed(1))
    assert replayed_as_verl_pads(_call(_replayed(2), cp_size=2, layout="zigzag"))
    assert not replayed_as_verl_pads(_call(_replayed(2), cp_size=2, layout="contiguous"))
    assert not replayed_as_verl_pads(_call(_replayed(2), valid=False, cp_size=2))
    assert not replayed_as_verl_pads(_call(_row(2), cp_size=2))  # no routes
    assert not replayed_as_verl_pads(_call(torch.zeros(1), cp_size=2))
    assert not replayed_as_verl_pads(_call(_replayed(3), cp_size=2))  # padded for another cp
    wide = _wide_last_span(routed_experts=torch.zeros(1, 12, 1, 2, dtype=torch.int64))
    assert not replayed_as_verl_pads(_call(wide, cp_size=2))


def test_a_rank_holds_a_pad() -> None:
    assert a_rank_holds_a_pad(_routed(2))  # 3 and 7 tokens in spans of 4 and 8
    assert not a_rank_holds_a_pad(_routed(2, topk=1))  # the zero route is the dummy one
    assert not a_rank_holds_a_pad(_routed(1))  # cp = 1: no pads
    assert not a_rank_holds_a_pad(_call(_replayed(2), valid=False, cp_size=2))
    assert not a_rank_holds_a_pad(_call(_row(2), cp_size=2))
    assert not a_rank_holds_a_pad(_call(torch.zeros(1), cp_size=2))
    row = _replayed(2)
    holders = [r for r in (0, 1) if a_rank_holds_a_pad(_call(row, cp_size=2, cp_rank=r))]
    want = contract.shard(row, cp_size=2)["token_index"]
    assert holders == [r for r in (0, 1) if bool((want[r] < 0).any())]


def test_a_rank_without_a_pad() -> None:
    row = contract.pad_for_cp(list(range(1, 9)), [0, 4, 8], cp_size=2,
                              routed_experts=torch.zeros(8, 1, 2, dtype=torch.int64))
    assert not a_rank_holds_a_pad(_call(row, cp_size=2))
    row = contract.pad_for_cp(list(range(1, 8)), [0, 4, 7], cp_size=2,
                              routed_experts=torch.zeros(7, 1, 2, dtype=torch.int64))
    want = contract.shard(row, cp_size=2)["token_index"]
    for rank in (0, 1):
        assert a_rank_holds_a_pad(_call(row, cp_size=2, cp_rank=rank)) is bool(
            (want[rank] < 0).any())


@settings(max_examples=30, deadline=None)
@given(case=replay_padded_cases())
def test_every_drawn_replay_row_is_in_the_replay_domain(case: Case) -> None:
    assert replayed_as_verl_pads(Call.of(case, contract.shard))
