"""`nesting` behaviour the generic registry checks do not cover: the rules table against the
spec, the coverage warning, the payload of a verl-shaped batch, the `show` drawing, CUDA.

The equivalence, error-parity, property and pin checks of every `nesting` record run in
tests/test_registry.py; the bug zoo in tests/test_zoo.py.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import itertools
import pickle
import warnings
from collections.abc import Callable
from types import ModuleType

import pytest
import torch
from hypothesis import given
from tensordict import TensorDict

import batchproof.impl.nesting as impl
import batchproof.reference.nesting as reference
from batchproof import placements
from batchproof.compare import assert_identical
from batchproof.impl import kernels
from batchproof.ops import nesting as ops

pytestmark = pytest.mark.filterwarnings("error::UserWarning")


def _spec_table() -> dict:
    return {name: (mask, reference.PAD_TOKEN_ID if pad == ops.PAD else pad)
            for name, (mask, pad) in ops.SPEC_RULES.items()}


def test_default_rules_are_the_spec_table() -> None:
    assert dict(reference.DEFAULT_RULES) == _spec_table()
    assert impl.DEFAULT_RULES is reference.DEFAULT_RULES


def test_pad_token_sentinel_survives_copy_and_pickle() -> None:
    sentinel = reference.PAD_TOKEN_ID
    assert copy.deepcopy(sentinel) is sentinel
    assert pickle.loads(pickle.dumps(sentinel)) is sentinel
    assert repr(sentinel) == "PAD_TOKEN_ID"


@pytest.mark.parametrize("module", [reference, impl], ids=["reference", "impl"])
def test_dense_field_is_reported(module) -> None:
    td = ops.example_batch()
    td[ops.EXTRA_DENSE] = torch.zeros(td["input_ids"].shape)
    with pytest.warns(UserWarning, match=rf"{ops.EXTRA_DENSE} \(3, 8\) torch.float32 96 bytes"):
        module.nest_by_mask(td, pad_token_id=0)
    with pytest.raises(module.DenseFieldError, match=ops.EXTRA_DENSE):
        module.nest_by_mask(td, pad_token_id=0, strict=True)
    assert issubclass(module.DenseFieldError, RuntimeError)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module.nest_by_mask(td, pad_token_id=0, strict=True, ignore_dense=[ops.EXTRA_DENSE])


@pytest.mark.parametrize("module", [reference, impl], ids=["reference", "impl"])
def test_rule_none_keeps_a_field_dense_and_masks_win(module) -> None:
    td = ops.example_batch()
    nested = module.nest_by_mask(td, pad_token_id=0, rules={"loss_mask": None},
                                 ignore_dense=["loss_mask"])
    assert not nested["loss_mask"].is_nested
    # verl's registration: responses by response_mask, which then is a mask, not a field
    verl = module.nest_by_mask(td, pad_token_id=0, rules={"responses": ("response_mask", 0)})
    assert "response_mask" not in verl.keys() and "response_mask_offsets" in verl.keys()
    assert verl["responses"][0].tolist() == [13, 15, 16]  # the tool token 14 is dropped
    assert_identical(module.unnest_by_mask(verl)["response_mask"], td["response_mask"])


def test_chunks_unnest_and_concatenate_back() -> None:
    nested = impl.nest_by_mask(ops.chunk_width_batch(), pad_token_id=0)
    pieces = [impl.unnest_by_mask(c) for c in impl.chunk_nested(nested, 3)]
    whole = impl.unnest_by_mask(nested)
    for key in ("input_ids", "responses", "attention_mask", "loss_mask"):
        assert_identical(whole[key], torch.cat([p[key] for p in pieces]))
    widths = {impl.pad_to_response_width(c, "responses")["responses"].shape[1]
              for c in impl.chunk_nested(nested, 3)}
    assert widths == {12}


def test_verl_shaped_batch_reaches_the_ceiling() -> None:
    """32 rows at verl's widths (P = 2048, R = 14336) and ~8% fill."""
    generator = torch.Generator().manual_seed(0)
    prompts, responses = ops.verl_like_lengths(32, 2048, 14336, 0.08, generator)
    dense = ops.synthetic_verl_batch(prompts, responses, max_prompt=2048, max_response=14336,
                                     generator=generator)
    nested = impl.nest_by_mask(dense, pad_token_id=0, strict=True)
    report = impl.payload_report(dense, nested)
    assert report.efficiency >= 0.99, report
    assert report.compression > 9 and report.wire_bytes_nested < report.wire_bytes_dense / 9
    assert_identical(impl.unnest_by_mask(nested), ops.masked_input(
        ops.Case((dense,), {"pad_token_id": 0})))


def test_show_draws_dense_and_nested_rows() -> None:
    lines = ops.draw(ops.example_batch())
    assert lines[0].startswith("dense batch: B=3, P=3, R=4, S=8")
    assert "row 0  .pp|rtrr." in lines[1]
    assert any("attention runs (start, length) [(1, 6)]" in line for line in lines)
    assert ops.picture(ops.example_batch())["response"][0] == "rtrr."


@pytest.mark.gpu
def test_impl_on_cuda_matches_cpu() -> None:
    generator = torch.Generator().manual_seed(1)
    prompts, responses = ops.verl_like_lengths(16, 256, 2048, 0.1, generator)
    dense = ops.synthetic_verl_batch(prompts, responses, max_prompt=256, max_response=2048,
                                     generator=generator)
    cpu = impl.nest_by_mask(dense, pad_token_id=0)
    cuda = impl.nest_by_mask(dense.to("cuda"), pad_token_id=0)
    assert_identical(cpu, cuda, allow_device=True)
    assert_identical(impl.unnest_by_mask(cpu), impl.unnest_by_mask(cuda), allow_device=True)
    output = torch.randn(int(dense["attention_mask"].sum()), generator=generator)
    assert_identical(impl.extract_response(cpu, output),
                     impl.extract_response(cuda, output.cuda()), allow_device=True)


# --------------------------------------------------------------------------- mutation kills


def _raised(call: Callable[[], object]) -> Exception:
    """The exception `call` raises (AssertionError when it raises none)."""
    try:
        call()
    except Exception as error:  # noqa: BLE001 - any exception is the result under test
        return error
    raise AssertionError("no exception raised")


def _same_error(call: Callable[[ModuleType], object]) -> None:
    """impl raises the reference's exception type and message."""
    expected, actual = _raised(lambda: call(reference)), _raised(lambda: call(impl))
    assert (type(actual), str(actual)) == (type(expected), str(expected))


def _nested_example() -> TensorDict:
    return reference.nest_by_mask(ops.example_batch(), pad_token_id=0)


def _with_runs(nested: TensorDict, mask: str, rows: list[list[tuple[int, int]]]) -> TensorDict:
    """A copy of `nested` whose `mask` encoding holds the (start, length) runs `rows`."""
    offsets = torch.tensor([0, *itertools.accumulate(len(row) for row in rows)])
    out = nested.clone()
    for key, part in zip(reference.rle_keys(mask), (0, 1)):
        values = torch.tensor([run[part] for row in rows for run in row], dtype=torch.int64)
        out[key] = torch.nested.nested_tensor_from_jagged(values, offsets=offsets.clone())
    return out


def _longer_row(nested: TensorDict, key: str) -> TensorDict:
    """A copy of `nested` whose jagged `key` holds one value too many in its last row."""
    value, out = nested[key], nested.clone()
    out[key] = torch.nested.nested_tensor_from_jagged(
        torch.cat([value.values(), value.values()[:1]]),
        offsets=torch.cat([value.offsets()[:-1], value.offsets()[-1:] + 1]))
    return out


def _mask_with(value: float, dtype: torch.dtype) -> TensorDict:
    td = ops.example_batch()
    attention = td["attention_mask"].to(dtype)
    attention[1, 1] = value
    td["attention_mask"] = attention
    return td


def _prompts_only() -> TensorDict:
    """P known (the width of prompts), R unknown: no responses, response_mask or max length."""
    td = ops.example_batch()
    return td.select("input_ids", "attention_mask", "prompts")


def _responses_only() -> TensorDict:
    """responses nested by response_mask: the nested batch has no attention_mask encoding."""
    td = ops.example_batch()
    return reference.nest_by_mask(td.select("responses", "response_mask"), pad_token_id=0,
                                  rules={"responses": ("response_mask", 0)})


def _strided_output() -> torch.Tensor:
    """A nested tensor of the strided (not jagged) layout, rows of 6 and 4 tokens."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the strided layout is a prototype
        return torch.nested.nested_tensor([torch.zeros(6), torch.zeros(4), torch.zeros(0)])


_INVALID_RUNS = {  # attention_mask is 8 wide; rows 0 and 1 hold (1, 6) and (0, 4)
    "beyond_width": [[(5, 4)], [(0, 4)], []],
    "zero_length": [[(1, 6)], [(0, 0)], []],
    "negative_start": [[(-1, 2)], [(0, 4)], []],
    "two_runs_overlap": [[(1, 3), (3, 3)], [], []],
    "overlap_after_a_row": [[(1, 6)], [(0, 3), (1, 2)], []],
    "empty_second_run": [[(1, 6)], [(0, 4), (6, 0)], []],
}


@pytest.mark.parametrize("rows", _INVALID_RUNS.values(), ids=_INVALID_RUNS.keys())
def test_invalid_run_encodings_raise_the_reference_message(rows: list) -> None:
    """Every invalid run (outside the width, empty, overlapping the previous run of its row)
    raises the reference's message naming the mask and the first bad row."""
    nested = _with_runs(_nested_example(), "attention_mask", rows)
    _same_error(lambda module: module.unnest_by_mask(nested))
    _same_error(lambda module: module.extract_response(nested, torch.zeros(10)))


def test_adjacent_runs_are_valid() -> None:
    """Runs that touch (start == end of the previous run of the row) are valid, also when an
    earlier row's run ends further right: unnest and extract read them as the reference does."""
    nested = _with_runs(_nested_example(), "attention_mask", [[(1, 3), (4, 3)], [(0, 2), (2, 2)], []])
    assert_identical(reference.unnest_by_mask(nested), impl.unnest_by_mask(nested))
    output = torch.arange(10.0)
    assert_identical(reference.extract_response(nested, output),
                     impl.extract_response(nested, output))


_BAD_CALLS: dict[str, Callable[[ModuleType], object]] = {
    "extract_not_a_td": lambda m: m.extract_response([1], torch.zeros(1)),
    "extract_no_attention_mask": lambda m: m.extract_response(
        ops.example_batch().exclude("attention_mask"), torch.zeros(1)),
    "extract_no_attention_encoding": lambda m: m.extract_response(_responses_only(), torch.zeros(1)),
    "extract_r_unknown": lambda m: m.extract_response(_prompts_only(), torch.zeros(6)),
    "extract_strided_output": lambda m: m.extract_response(ops.example_batch(), _strided_output()),
    "nest_float_mask_half": lambda m: m.nest_by_mask(_mask_with(0.5, torch.float32),
                                                      pad_token_id=0),
    "nest_int_mask_two": lambda m: m.nest_by_mask(_mask_with(2, torch.int64), pad_token_id=0),
    "pad_r_unknown": lambda m: m.pad_to_response_width(
        reference.nest_by_mask(_prompts_only(), pad_token_id=0)),
    "pad_not_a_field": lambda m: m.pad_to_response_width(_nested_example(),
                                                          "attention_mask_offsets"),
    "pad_row_too_long": lambda m: m.pad_to_response_width(
        _longer_row(_nested_example(), "responses"), "responses"),
    "pad_field_name_not_str": lambda m: m.pad_to_response_width(_nested_example(), 3),
    "payload_dense_not_a_td": lambda m: m.payload_report([1], _nested_example()),
    "unnest_no_encoding": lambda m: m.unnest_by_mask(
        _nested_example().exclude("attention_mask_lengths")),
}


@pytest.mark.parametrize("call", _BAD_CALLS.values(), ids=_BAD_CALLS.keys())
def test_bad_input_raises_the_reference_message(call: Callable[[ModuleType], object]) -> None:
    """Each invalid-input branch raises the reference's exception type and exact message."""
    _same_error(call)


def _mask_without_ones(value: float, dtype: torch.dtype) -> TensorDict:
    """The example batch with an attention mask of zeros and `value` only (no entry is 1)."""
    td = ops.example_batch()
    td["attention_mask"] = td["attention_mask"].to(dtype) * value
    return td


_MASKS_WITHOUT_ONES = {
    "float_zeros_and_twos": lambda m: m.nest_by_mask(_mask_without_ones(2.0, torch.float32),
                                                      pad_token_id=0),
    "int_zeros_and_minus_ones": lambda m: m.nest_by_mask(_mask_without_ones(-1, torch.int64),
                                                          pad_token_id=0),
    "extract_int_zeros_and_twos": lambda m: m.extract_response(
        _mask_without_ones(2, torch.int64), torch.zeros(6)),
}


@pytest.mark.parametrize("placement", ["cpu", "generic"])
@pytest.mark.parametrize("call", _MASKS_WITHOUT_ONES.values(), ids=_MASKS_WITHOUT_ONES.keys())
def test_a_mask_without_ones_is_rejected_on_each_path(call, placement: str) -> None:
    """The 0/1 verdict (`_not_binary`) finds a bad value with no 1 beside it, on the CPU's path
    and on the path CUDA runs (`generic`), and the error is the reference's."""
    with placements.placed(placement):
        _same_error(call)


_NAMED_ERRORS: dict[str, tuple[Callable[[ModuleType], object], str]] = {
    # the reference's messages differ here (see the xfail test below): the shared part
    "dense_extract_bad_mask": (lambda m: m.extract_response(_mask_with(2, torch.int64),
                                                            torch.zeros(6)),
                               r"^mask 'attention_mask' row 1 "),
    "output_too_many_rows": (lambda m: m.extract_response(
        ops.example_batch(), torch.nested.nested_tensor_from_jagged(
            torch.zeros(10), offsets=torch.tensor([0, 6, 10, 10, 10]))),
        r"^output must .*ragged on dim 1"),
    "output_ragged_on_dim_2": (lambda m: m.extract_response(
        ops.example_batch(), torch.nested.nested_tensor_from_jagged(
            torch.zeros(10, 2), offsets=torch.tensor([0, 6, 10, 10])).transpose(1, 2)),
        r"^output must .*ragged on dim 1"),
    "encoding_rows_differ": (lambda m: m.unnest_by_mask(_nested_example().set(
        "attention_mask_lengths", torch.nested.nested_tensor_from_jagged(
            torch.tensor([6, 4]), offsets=torch.tensor([0, 2, 2, 2])))),
        r"^'attention_mask_offsets' and 'attention_mask_lengths' (have different rows|differ)"),
    "field_not_jagged": (lambda m: m.unnest_by_mask(_nested_example().set(
        "input_ids", torch.zeros(3, 6, dtype=torch.int64))),
        r"^field 'input_ids' of the nested batch is not a .*jagged tensor$"),
}


@pytest.mark.parametrize("module", [reference, impl], ids=["reference", "impl"])
@pytest.mark.parametrize("case", _NAMED_ERRORS.values(), ids=_NAMED_ERRORS.keys())
def test_bad_input_error_names_the_argument(module: ModuleType, case: tuple) -> None:
    """Bad masks, outputs, encodings and fields raise a ValueError naming what is wrong."""
    call, pattern = case
    with pytest.raises(ValueError, match=pattern):
        call(module)


@pytest.mark.parametrize("case", _NAMED_ERRORS.values(), ids=_NAMED_ERRORS.keys())
def test_named_errors_equal_the_reference_messages(case: tuple) -> None:
    """impl promises the reference's exact messages; these five branches word them differently."""
    _same_error(case[0])


def test_unnest_keeps_field_dtypes() -> None:
    """Fields come back in their own dtype (int32 ids, float64 floats), not the pad's."""
    td = ops.example_batch()
    td["input_ids"] = td["input_ids"].to(torch.int32)
    td["old_log_probs"] = td["old_log_probs"].to(torch.float64)
    nested = reference.nest_by_mask(td, pad_token_id=0)
    assert_identical(reference.unnest_by_mask(nested), impl.unnest_by_mask(nested))


def test_extract_response_keeps_dtype_and_reads_jagged_holes() -> None:
    """The result has the output's dtype; a jagged output with holes (lengths) is read through
    its lengths, as the reference does."""
    td = ops.example_batch()
    flat = torch.arange(10, dtype=torch.float64) / 3
    assert_identical(reference.extract_response(td, flat), impl.extract_response(td, flat))
    holey = torch.nested.nested_tensor_from_jagged(
        torch.arange(14.0), offsets=torch.tensor([0, 7, 12, 14]), lengths=torch.tensor([6, 4, 0]))
    assert_identical(reference.extract_response(td, holey), impl.extract_response(td, holey))


def test_pad_to_response_width_by_response_mask_and_trailing_dims() -> None:
    """Fields nested by response_mask (verl's registration) are response-axis fields; trailing
    feature dims are kept."""
    td = ops.example_batch()
    td["old_log_probs"] = torch.arange(30.0).reshape(3, 5, 2)
    for nested, names in ((reference.nest_by_mask(td, pad_token_id=0), ("old_log_probs",)),
                          (reference.nest_by_mask(td, pad_token_id=0,
                                                  rules={"responses": ("response_mask", 0)}),
                           ("responses", "old_log_probs"))):
        assert_identical(reference.pad_to_response_width(nested, *names),
                         impl.pad_to_response_width(nested, *names))


def _payload_cases() -> list[tuple[TensorDict, TensorDict]]:
    td = ops.example_batch()
    extra = td.clone()
    extra[ops.EXTRA_DENSE] = torch.ones(3, 8)
    quiet = {"pad_token_id": 0, "ignore_dense": [ops.EXTRA_DENSE, "loss_mask", "attention_mask"]}
    no_attention = td.select("responses", "response_mask", "attention_mask")
    return [
        (td, reference.nest_by_mask(td, pad_token_id=0)),
        (td, reference.nest_by_mask(td, rules={"loss_mask": None}, **quiet)),
        (extra, reference.nest_by_mask(extra, **quiet)),
        (no_attention, reference.nest_by_mask(no_attention, rules={"responses": ("response_mask", 0)},
                                              **quiet)),
    ]


def test_payload_report_matches_the_reference() -> None:
    """Byte counts equal the reference's, as ints: a default-rule field kept dense, an unruled
    (B, S) field and a dense mask no field was nested by are counted as the reference counts
    them."""
    for dense, nested in _payload_cases():
        expected, actual = reference.payload_report(dense, nested), impl.payload_report(dense, nested)
        assert actual == expected
        assert [type(v) for v in dataclasses.astuple(actual)] == [
            type(v) for v in dataclasses.astuple(expected)]


def test_unnest_keeps_entries_added_after_nesting() -> None:
    """An entry set on the nested batch after nesting is carried into the dense batch."""
    nested = _nested_example()
    nested["seq_score"] = torch.tensor([0.5, 1.5, 2.5])
    expected, actual = reference.unnest_by_mask(nested), impl.unnest_by_mask(nested)
    assert "seq_score" in actual.keys()
    assert_identical(expected, actual)


def test_chunk_nested_of_an_empty_batch() -> None:
    """An empty nested batch splits into n empty chunks (not none), as the reference does."""
    empty = _nested_example()[0:0]
    expected, actual = reference.chunk_nested(empty, 3), impl.chunk_nested(empty, 3)
    assert len(actual) == 3
    assert_identical(expected, actual)


def test_outputs_keep_the_batch_device() -> None:
    """A batch on an explicit device gives nested, dense and padded TensorDicts on it."""
    td = ops.example_batch().to("cpu")
    nested = impl.nest_by_mask(td, pad_token_id=0)
    for module in (reference, impl):
        outputs = (module.nest_by_mask(td, pad_token_id=0), module.unnest_by_mask(nested),
                   module.pad_to_response_width(nested, "responses"))
        assert [out.device for out in outputs] == [torch.device("cpu")] * 3


def _offsets_past_zero(nested: TensorDict, *keys: str) -> TensorDict:
    """A copy of `nested` whose jagged `keys` read their rows from a buffer with one leading value
    no row holds: offsets start at 1 (contiguous jagged tensors: lengths() is None)."""
    out = nested.clone()
    for key in keys:
        value = nested[key]
        out[key] = torch.nested.nested_tensor_from_jagged(
            torch.cat([value.values()[:1], value.values()]), offsets=value.offsets() + 1)
    return out


@pytest.mark.parametrize("keys", [("attention_mask_offsets", "attention_mask_lengths"),
                                  ("input_ids",), ("responses",)], ids=["encoding", "field", "pad"])
def test_jagged_entries_whose_offsets_start_past_zero(keys: tuple[str, ...]) -> None:
    """A jagged entry whose offsets start past 0 is read from its offsets, as the reference
    reads it (the reference accepts it as a contiguous jagged tensor)."""
    nested = _offsets_past_zero(_nested_example(), *keys)
    assert_identical(reference.unnest_by_mask(nested), impl.unnest_by_mask(nested))
    assert_identical(reference.pad_to_response_width(nested, "responses"),
                     impl.pad_to_response_width(nested, "responses"))


@given(case=ops.nest_cases())
def test_the_triton_run_copy_nests_and_unnests_like_the_reference(case) -> None:
    """The Triton kernel CUDA runs (a copy per run of ones), under Triton's interpreter on the
    CPU: nest_by_mask and its inverse equal the reference, and the kernel did the copying."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed: pip install 'batchproof[triton]'")
    from batchproof.impl.kernels import triton_nesting

    calls = []
    copy_runs = triton_nesting.copy_runs
    expected = case.call(reference.nest_by_mask)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "TRITON_ON_CPU", True)
        patch.setattr(triton_nesting, "copy_runs",
                      lambda *args: calls.append(args) or copy_runs(*args))
        nested = case.call(impl.nest_by_mask)
        assert_identical(expected, nested)
        assert_identical(reference.unnest_by_mask(expected), impl.unnest_by_mask(nested))
    fields = [k for k in expected.keys() if getattr(expected.get(k), "is_nested", False)
              and not k.endswith(("_offsets", "_lengths"))]
    assert calls or not fields


# --------------------------------------------------------------------------- dtype axes


def test_extract_response_is_checked_in_every_floating_dtype() -> None:
    """The model output is drawn in float16, bfloat16, float32 and float64 (issue 32): a result
    that ignores the output's dtype, invisible while every draw was float32, fails."""
    from hypothesis import settings

    from batchproof import registry
    from batchproof.checks import run_check
    from batchproof.reference import nesting as reference

    def always_float32(td, output):
        return reference.extract_response(td, output).to(torch.float32)

    info = registry.get("nesting.extract_response")
    search = settings(max_examples=40, derandomize=True, database=None, deadline=None)
    with pytest.raises(AssertionError, match="dtype"):
        run_check(info, "equivalence", always_float32, settings=search)


def test_a_mask_value_only_a_float_mask_holds_is_drawn_and_rejected() -> None:
    """`not_binary` bad inputs hold a fraction or NaN in a floating mask, not only 2 or -1."""
    from hypothesis import HealthCheck, Phase, given, settings

    from batchproof.ops.nesting import bad_nest_cases

    seen: set[str] = set()

    def record(bad) -> None:
        mask = bad.case.args[0]["attention_mask"] if bad.why.startswith("mask row") else None
        if mask is not None and mask.is_floating_point():
            odd = mask[(mask != 0) & (mask != 1)]
            seen.update("nan" if v != v else "fraction" for v in odd.tolist())

    settings(max_examples=300, derandomize=True, database=None, phases=[Phase.generate],
             suppress_health_check=list(HealthCheck))(given(bad_nest_cases())(record))()
    assert seen == {"nan", "fraction"}


# --------------------------------------------------------------------------- two defects


def _batch_first(td, **kwargs):
    """nest_by_mask validating the batch (a valid pad_token_id, no other option) before its
    keyword options."""
    from batchproof.ops.nesting import nest_quietly

    nest_quietly(td, pad_token_id=0)
    return nest_quietly(td, **kwargs)


def _n_first(td, n):
    """chunk_nested checking n before the batch."""
    from batchproof.reference import nesting as ref

    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError("n must be an int")
    if n < 1:
        raise ValueError("n must be >= 1")
    return ref.chunk_nested(td, n)


@pytest.mark.parametrize("name, bad, candidate", [
    ("nesting.nest_by_mask", "bad_nest_cases", _batch_first),
    ("nesting.chunk_nested", "bad_chunk_cases", _n_first),
], ids=lambda v: v.split(".")[-1] if isinstance(v, str) and "." in v else "")
def test_invalid_inputs_with_two_defects_follow_the_references_first_error(
        name, bad, candidate) -> None:
    """The invalid inputs of the records with two or more arguments include two defects on
    different ones (issue 32): a validation order other than the reference's passes every
    one-defect input and fails. (unnest_by_mask takes one argument, payload_report's defects
    are all on nested_td, pad_to_response_width's field names are variadic: one defect.)"""
    from two_defects import assert_first_error_decides

    from batchproof.ops import nesting as records

    assert_first_error_decides(name, getattr(records, bad)(), candidate)
