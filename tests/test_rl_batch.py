"""`rl_batch` tests beyond the registry's generic checks: which internal path the impl takes.

The impl has fast paths with a strict fallback (a fast path that declines hands the input to the
general path, which reproduces the reference's behaviour). Equivalence alone cannot tell a fast
path that silently declines from one that works: these tests pin that the fast paths run and are
exact on their own (mutmut showed mutants that disabled them surviving the generic checks).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from hypothesis import given

from batchproof import blocks as hs
from batchproof.compare import assert_identical
from batchproof.impl import _cpu, kernels
from batchproof.impl import rl_batch as impl
from batchproof.impl._sync import Verdicts
from batchproof.impl.kernels import rl_batch as rl_batch_kernel
from batchproof.ops.rl_batch import rl_batch_cases
from batchproof.reference import rl_batch as reference
from batchproof.registry import Case

PER_TOKEN = {"rewards": "rewards", "loss_masks": "loss_mask", "logprobs": "rollout_logprobs"}


def _all_lists(case: Case) -> bool:
    return all(isinstance(row, list) for name in PER_TOKEN
               for row in (case.kwargs.get(name) or []))


@given(case=rl_batch_cases().filter(_all_lists))
def test_list_fast_path_runs_and_is_exact(case: Case) -> None:
    """Plain lists on the CPU: `_write_lists` packs tokens and values in place, exactly."""
    prompts, responses = case.args
    expected = reference.build_rl_batch(*case.args, **case.kwargs)
    args = {key: case.kwargs.get(name) for name, key in PER_TOKEN.items()}
    written = impl._write_lists(prompts, responses, args, case.kwargs["pad_token_id"],
                                case.kwargs.get("layout", "left"), torch.device("cpu"))
    assert written is not None, "the list fast path declined a plain-list batch"
    for key in ["input_ids"] + [key for name, key in PER_TOKEN.items() if name in case.kwargs
                                and case.kwargs[name] is not None]:
        got, want = written[key], expected[key]
        assert got.dtype == want.dtype and torch.equal(got, want), key
    assert written["p_len"].tolist() == [len(p) for p in prompts]
    assert written["r_len"].tolist() == [len(r) for r in responses]


def test_list_fast_path_declines_what_it_cannot_write() -> None:
    device = torch.device("cpu")
    args = dict.fromkeys(PER_TOKEN.values())
    assert impl._write_lists([[1]], [[2]], args, 0, "left", torch.device("meta")) is None
    assert impl._write_lists([torch.tensor([1])], [[2]], args, 0, "left", device) is None
    assert impl._write_lists([[1], [2]], [[2]], args, 0, "left", device) is None
    assert impl._write_lists([[1.5]], [[2]], args, 0, "left", device) is None
    scalars = args | {"rewards": [1.0]}
    assert impl._write_lists([[1]], [[2]], scalars, 0, "left", device) is None


@given(case=rl_batch_cases())
def test_flatten_fast_paths_do_not_fall_back(case: Case) -> None:
    """`_flatten_tokens` / `_flatten_values` convert valid lists without the row-by-row path."""
    prompts, responses = case.args
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(impl._spec, "_token_list", _no_fallback)
        lengths, flat = impl._flatten_tokens(prompts, "prompts", torch.device("cpu"))
        assert lengths.dtype == torch.int64 and flat.dtype == torch.int64
        assert lengths.tolist() == [len(p) for p in prompts]
        assert flat.tolist() == [t for p in prompts for t in p]
        r_len = torch.tensor([len(r) for r in responses], dtype=torch.int64)
        rows = case.kwargs.get("logprobs")
        if rows is not None:
            patch.setattr(impl._spec, "_per_token_values", _no_fallback)
            with Verdicts() as verdicts:
                values = impl._flatten_values(rows, "logprobs", r_len, torch.device("cpu"),
                                              verdicts)
            want = torch.tensor([v for row in rows for v in row], dtype=torch.float32)
            assert values.flat.dtype == torch.float32
            assert torch.equal(values.flat.view(torch.int32), want.view(torch.int32))


def _no_fallback(*args, **kwargs):
    raise AssertionError("valid lists took the row-by-row fallback")


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "torch"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8])
@pytest.mark.parametrize("form", ["tensors", "jagged"])
def test_narrow_integer_token_tensors_become_int64(dtype: torch.dtype, form: str,
                                                   kernel: bool, monkeypatch) -> None:
    prompts, responses = [[1, 2, 3], [4]], [[5], [6, 7]]
    expected = reference.build_rl_batch(prompts, responses, pad_token_id=0)
    if form == "tensors":
        args = (hs.tensor_rows(prompts, dtype), hs.tensor_rows(responses, dtype))
    else:
        args = (hs.jagged(prompts, dtype), hs.jagged(responses, dtype))
    monkeypatch.setattr(kernels, "ENABLED", kernel)
    actual = impl.build_rl_batch(*args, pad_token_id=0)
    for key in ("input_ids", "attention_mask", "position_ids", "response_mask"):
        assert actual[key].dtype == torch.int64 and torch.equal(actual[key], expected[key]), key


FAST_PATH_CASES = [
    Case(([[1, -2], (3,)], [(-4, 5), [6]]), {"pad_token_id": 0, "device": "cpu"}),
    Case(([[1], [2, 3]], [[4, 5, 6], []]),
         {"pad_token_id": 7, "layout": "two_segment", "rewards": [[0.5, -0.0, 2.0], []],
          "loss_masks": [[1, 0, 1], []], "logprobs": [[-1.0, -2.0, -3.0], []]}),
    Case(([[-(2**63)], [2**63 - 1]], [[0], [1, 2]]), {"pad_token_id": -1}),
]


@pytest.mark.parametrize("case", FAST_PATH_CASES, ids=["tuples_negative_ids", "two_segment",
                                                       "int64_extremes"])
def test_build_uses_the_list_fast_path(case: Case) -> None:
    """`build_rl_batch` on plain lists (tuples, negative and extreme ids, an explicit CPU device)
    never reaches the general flattening path, and equals the reference."""
    expected = reference.build_rl_batch(*case.args, **case.kwargs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(impl, "_flatten_tokens", _no_fallback)
        patch.setattr(impl, "_flatten_values", _no_fallback)
        actual = impl.build_rl_batch(*case.args, **case.kwargs)
    for key in expected.keys():
        if not expected.is_non_tensor(key):
            assert actual[key].dtype == expected[key].dtype, key
            assert torch.equal(actual[key], expected[key]), key


def test_general_path_keeps_negative_ids_without_fallback() -> None:
    rows = [[-5, 3], [], [2**63 - 1]]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(impl._spec, "_token_list", _no_fallback)
        lengths, flat = impl._flatten_tokens(rows, "prompts", torch.device("cpu"))
    assert lengths.tolist() == [2, 0, 1] and flat.tolist() == [-5, 3, 2**63 - 1]


def test_a_string_batch_is_named_as_the_argument() -> None:
    for fn in (reference.build_rl_batch, impl.build_rl_batch):
        with pytest.raises(TypeError, match="prompts must be a sequence of token sequences"):
            fn("abc", [[1], [2], [3]], pad_token_id=0)


def _to_jagged(case: Case) -> Case:
    prompts, responses = case.args
    kwargs = dict(case.kwargs)
    for name in PER_TOKEN:
        rows = kwargs.get(name)
        if rows is not None and all(isinstance(row, list) for row in rows):
            kwargs[name] = hs.jagged(rows, torch.float32)
    return Case((hs.jagged(prompts, torch.int64), hs.jagged(responses, torch.int64)), kwargs)


@pytest.mark.parametrize("placement", ["kernel", "cpu_row_copies", "generic", "triton"])
@given(case=rl_batch_cases(value_dtypes=hs.FLOAT_DTYPES, routed_experts=None,
                           sample_support=None))
def test_every_placement_equals_the_reference(case: Case, placement: str) -> None:
    """Jagged inputs: the compiled CPU kernel, the torch CPU row copies, the device-generic
    masked scatter and the Triton kernels (what CUDA runs, forced here on the CPU; Triton under
    its interpreter) each equal the reference, bit for bit, router-replay outputs included
    (placed beside each of them). Each run fails if another placement ran instead."""
    expected = reference.build_rl_batch(*case.args, **case.kwargs)
    jagged = _to_jagged(case)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "ENABLED", placement == "kernel")
        patch.setattr(_cpu, "FAST_PATHS", placement in ("kernel", "cpu_row_copies"))
        patch.setattr(kernels, "TRITON_ON_CPU", placement == "triton")
        if placement == "triton" and importlib.util.find_spec("triton") is None:
            pytest.skip("triton is not installed: pip install 'batchproof[triton]'")
        if placement in ("kernel", "triton"):
            if kernels.numba is None and placement == "kernel":
                pytest.skip("numba is not installed: the kernel cannot run")
            if not _has_scalar_rewards(jagged):  # scalar rewards always take the torch path
                for name in ("_place_tokens", "_left_masks", "_two_segment_masks"):
                    patch.setattr(impl, name, _no_fallback)
            if placement == "triton":
                patch.setattr(rl_batch_kernel, "write_rows", _no_fallback)
        else:
            patch.setattr(rl_batch_kernel, "write_rows", _no_fallback)
            patch.setattr(impl, "_copy_rows_cpu" if placement == "generic"
                          else "_place_tokens_generic", _no_fallback)
        actual = impl.build_rl_batch(*jagged.args, **jagged.kwargs)
    assert_identical(expected, actual)


def _has_scalar_rewards(case: Case) -> bool:
    rewards = case.kwargs.get("rewards")
    return isinstance(rewards, list) and any(isinstance(row, (int, float)) for row in rewards)


def _build_rows(rows: tuple) -> list:
    prompts, responses = (hs.jagged(r, torch.int64) for r in rows)
    return impl.build_rl_batch(prompts, responses, pad_token_id=0)["input_ids"].tolist()


def _build_in_child(rows: tuple, out) -> None:
    out.put(_build_rows(rows))


def test_kernels_run_again_in_a_forked_child() -> None:
    """A process that ran a kernel and then forks (DataLoader workers, Ray, mutmut) can run one
    in the child: GNU OpenMP would abort it ("fork() called from a process already using GNU
    OpenMP"), Numba's own workqueue layer does not."""
    import multiprocessing

    if kernels.numba is None or "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs numba and fork()")
    rows = ([[1, 2], [3]], [[4], [5, 6]])
    assert _build_rows(rows) == [[1, 2, 4], [3, 5, 6]]  # the kernel runs here first
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_build_in_child, args=(rows, out))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert out.get(timeout=10) == [[1, 2, 4], [3, 5, 6]]


def test_an_unloadable_threading_layer_falls_back_to_torch(monkeypatch) -> None:
    """If Numba's threading layer cannot start, the ops take their torch paths."""
    def no_layer() -> None:
        raise ValueError("No threading layer could be loaded.")

    monkeypatch.setattr(kernels, "_launchable", None)
    monkeypatch.setattr(kernels, "use_threads", no_layer)
    monkeypatch.setattr(rl_batch_kernel, "write_rows", _no_fallback)
    assert not kernels.available()
    jagged = _to_jagged(Case(([[1, 2], [3]], [[4], [5, 6]]), {"pad_token_id": 0}))
    assert_identical(reference.build_rl_batch([[1, 2], [3]], [[4], [5, 6]], pad_token_id=0),
                     impl.build_rl_batch(*jagged.args, **jagged.kwargs))


def test_pad_ids_beyond_int64_are_a_value_error_naming_the_argument() -> None:
    """Even when no row needs padding (the reference used to accept 2**63 then, and to raise
    a ValueError about "long long" otherwise, while the impl raised RuntimeError)."""
    for pad in (2**63, -2**63 - 1):
        for fn in (reference.build_rl_batch, impl.build_rl_batch):
            with pytest.raises(ValueError, match="pad_token_id must fit int64"):
                fn([[1]], [[2]], pad_token_id=pad)
    for pad in (2**63 - 1, -2**63):  # the bounds themselves are valid
        assert_identical(reference.build_rl_batch([[1], []], [[2], [3]], pad_token_id=pad),
                         impl.build_rl_batch([[1], []], [[2], [3]], pad_token_id=pad))


# --------------------------------------------------------------------------- two defects


def _lengths_checked_first(prompts, responses, **kwargs):
    """The contract, except that per-token row lengths are validated before anything else: the
    same exception type as the reference on every input with one defect."""
    from batchproof.reference.rl_batch import build_rl_batch

    for name in ("rewards", "loss_masks", "logprobs"):
        rows = kwargs.get(name)
        if isinstance(rows, list) and isinstance(responses, list) and len(rows) == len(responses):
            for i, (row, response) in enumerate(zip(rows, responses)):
                if isinstance(row, list) and isinstance(response, list) \
                        and len(row) != len(response):
                    raise ValueError(f"{name}[{i}] has {len(row)} values")
    return build_rl_batch(prompts, responses, **kwargs)


def test_invalid_inputs_with_two_defects_follow_the_references_first_error() -> None:
    """The errors check draws calls with two defects on different arguments (issue 32); a
    validation order other than the reference's passes every one-defect input and fails
    here."""
    from two_defects import assert_first_error_decides

    from batchproof.ops.rl_batch import bad_rl_batch_cases

    assert_first_error_decides("rl_batch.build_rl_batch", bad_rl_batch_cases(),
                               _lengths_checked_first)


def _zeros(*shape, dtype=torch.uint8) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype)


# (kwargs with two bad router-replay or per-token arguments, the reference's first error)
REPLAY_ORDER = [
    ({"rewards": [[0.5, 0.5], [0.5]], "routed_experts": [_zeros(1, 1, 2).float()] * 2},
     "rewards[0] has 2 entries"),
    ({"sample_support": [_zeros(1, 2).float()] * 2,
      "routed_experts": [_zeros(4, 1, 2), _zeros(0, 1, 2)]},
     "routed_experts[0] has 4 routes for 3 tokens"),
    ({"routed_experts": [_zeros(1, 1, 2, dtype=torch.int16) - 1] * 2,
      "sample_support": [_zeros(1, dtype=torch.int32)] * 2},
     "sample_support[0] must be [response tokens, top_k]"),
    ({"routed_experts": [_zeros(1, 1, 2, dtype=torch.int16) - 1] * 2,
      "sample_support": [_zeros(1, 2, dtype=torch.int32) - 2] * 2},
     "routed_experts[0] holds a negative expert id"),
    ({"routed_experts": [_zeros(1, 1, 2, dtype=torch.int32), _zeros(3, 1, 2, dtype=torch.int32)],
      "sample_support": [_zeros(1, 2, dtype=torch.int32) - 2] * 2},
     "routed_experts[1] has 3 routes for 2 tokens"),
]


@pytest.mark.parametrize("form", ["lists", "jagged"])
@pytest.mark.parametrize("kwargs, first", REPLAY_ORDER, ids=range(len(REPLAY_ORDER)))
def test_two_bad_replay_arguments_raise_the_references_first_error(kwargs, first,
                                                                   form: str) -> None:
    """The contract's order, in the reference and the impl alike, with the reference's very
    message: the per-token values, then the routes' structure (their counts against the
    tokens included), the support's structure, the routes' values, the support's values.
    (Explicit pairs: most pairs the record's invalid strategy draws raise ValueError both, and
    a wrong order showed there only after some 400 derandomized examples.)"""
    rows = ([[1, 2], [3]], [[4], [5]])
    if form == "jagged":
        rows = tuple(hs.jagged(r, torch.int64) for r in rows)
    for build in (reference.build_rl_batch, impl.build_rl_batch):
        with pytest.raises((TypeError, ValueError)) as raised:
            build(*rows, pad_token_id=0, **kwargs)
        assert str(raised.value).startswith(first), (build.__module__, raised.value)


# --------------------------------------------------------------------------- router replay


ROUTES = [torch.tensor([[[5, 6]], [[7, 8]]], dtype=torch.uint8),
          torch.tensor([[[1, 2]], [[3, 4]], [[9, 10]]], dtype=torch.uint8)]


@pytest.mark.parametrize("layout", ["left", "two_segment"])
def test_routes_are_placed_by_one_torch_pass_beside_the_token_paths(layout: str,
                                                                     monkeypatch) -> None:
    """Every token path (the list packing, the compiled kernel, the torch composition) hands
    its outputs to `_replay_outputs`, which adds the three router-replay outputs and nothing
    else; without routes it is never called (the no-routes paths run as before)."""
    calls = []
    original = impl._replay_outputs

    def counted(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append(sorted(out))
        return out

    monkeypatch.setattr(impl, "_replay_outputs", counted)
    rows = ([[1, 2], [3]], [[4], [5, 6]])
    support = [torch.tensor([[7, -1]], dtype=torch.int16),
               torch.tensor([[8, 9], [5, -1]], dtype=torch.int16)]
    forms = [rows, tuple(hs.jagged(r, torch.int64) for r in rows)]
    for args in forms:
        for rewards in (None, [1.0, 2.0]):  # scalar rewards: the torch composition
            kwargs = {"pad_token_id": 0, "layout": layout, "rewards": rewards}
            before = len(calls)
            plain = impl.build_rl_batch(*args, **kwargs)
            assert len(calls) == before, "routes placed although none were given"
            got = impl.build_rl_batch(*args, **kwargs, routed_experts=ROUTES,
                                      sample_support=support)
            assert calls[-1] == ["routed_experts", "router_padding_mask", "sample_support"]
            assert_identical(plain, got.exclude("routed_experts", "router_padding_mask",
                                                "sample_support"))
            assert_identical(reference.build_rl_batch(*rows, **kwargs, routed_experts=ROUTES,
                                                      sample_support=support), got)


def test_read_only_numpy_routes_are_copied_not_shared() -> None:
    """Decoded wire routes arrive as read-only NumPy arrays: laid out without a warning (torch
    would warn about sharing non-writable memory), the arrays left as they were."""
    import warnings

    import numpy as np

    arrays = [r.numpy().copy() for r in ROUTES]
    for array in arrays:
        array.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = impl.build_rl_batch([[1, 2], [3]], [[4], [5, 6]], pad_token_id=0,
                                  routed_experts=arrays)
    assert got["routed_experts"].dtype == torch.uint8
    assert got["routed_experts"][..., 0, :].tolist() == [[[5, 6], [7, 8], [0, 1]],
                                                         [[1, 2], [3, 4], [9, 10]]]
    assert all(not a.flags.writeable and np.array_equal(a, r.numpy())
               for a, r in zip(arrays, ROUTES))
