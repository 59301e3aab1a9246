"""mutmut survivors of `impl/varlen.py` that no CPU test can kill (see the package docstring)."""

from batchproof.mutation.equivalents import NO_DEVICE, ON_CPU, Equivalent

P = "impl/varlen.py"
# the device argument set to None, or dropped
DROPPED = rf"^device = None$|device=None|\.to\(None\)|{NO_DEVICE}"

EQUIVALENT: tuple[Equivalent, ...] = (
    # ---------------------------------------------------------------- device (CPU-equivalent)
    Equivalent(P, "_block_causal_mask", r"device=position_ids\.device\)", DROPPED, ON_CPU),
    Equivalent(P, "_flat_values", r"predict_index\.to\(values\.device\)", DROPPED, ON_CPU),
    Equivalent(P, "_flatten", r"\.to\(device=device, dtype=torch\.int64\)",
               r"\.to\((device=None, )?dtype=torch\.int64\)", ON_CPU),
    Equivalent(P, "_packed_logprobs", r"^device = samples\.prompt_tokens\.device$",
               r"^device = None$", ON_CPU),
    Equivalent(P, "_packed_logprobs", r"dtype=torch\.float32, device=device\)",
               r"dtype=torch\.float32, (device=None)?\)", ON_CPU),
    Equivalent(P, "_right_aligned", r"device=(lengths|values)\.device\)", DROPPED, ON_CPU),
    Equivalent(P, "_row_slice", r"device = ids\.device|device=device\)", DROPPED, ON_CPU),
    Equivalent(P, "_samples", r"_flatten\(responses, \"responses\", device\)",
               r"_flatten\(responses, \"responses\", None\)", ON_CPU),
    Equivalent(P, "_with_responses", r"device = samples\.prompt_tokens\.device|\.to\(device\)",
               r"^device = None$|\.to\(None\)", ON_CPU),
    Equivalent(P, "repad", r"indices\.to\(device=values\.device, dtype=torch\.int64\)",
               r"indices\.to\((device=None, )?dtype=torch\.int64\)", ON_CPU),
    Equivalent(P, "response_logprobs", r"device = next\(model\.parameters\(\)\)\.device",
               r"^device = None$", ON_CPU),
    Equivalent(P, "response_logprobs", r"samples = _samples\(prompts, responses, device\)",
               r"samples = _samples\(prompts, responses, None\)", ON_CPU),
    Equivalent(P, "unpack_response_logprobs", r"response_lengths\.to\(values\.device\)",
               r"response_lengths\.to\(None\)", ON_CPU),
    Equivalent(P, "pack_varlen", r"_output_device\(device, prompts, responses\)",
               r"_output_device\(device, (None, responses|prompts, None)\)",
               "CPU-equivalent: with device=None the output device is that of the first tensor among "
               "prompts and responses, else the CPU; dropping one argument changes it only for "
               "tensor rows on another device (the reference cannot read meta tensors, so only "
               "CUDA can observe it: tests/test_registry.py::test_impl_on_cuda, gpu marker)"),
    # ---------------------------------------------------------------- dtypes torch infers alike
    Equivalent(P, "_cu_seqlens", r"tail = torch\.full\(.*dtype=ends\.dtype, device=device\)",
               r"tail = torch\.full\(\(1 if pad > 0 else 0,\), total, (dtype=None, )?device=device\)",
               "torch.full with a Python int fill infers int64, which is ends.dtype (a cumsum of "
               "int64 lengths); the result is cast to int32 anyway"),
    Equivalent(P, "_flatten", r"lengths = torch\.tensor\(\[part\.shape\[0\] for part in parts\], "
               r"dtype=torch\.int64\)", r"for part in parts\], (dtype=None)?\)",
               "torch.tensor of a non-empty list of Python ints infers int64; `parts` is never "
               "empty here (an empty row list is all lists and goes to _flatten_lists)"),
    Equivalent(P, "_flatten_lists", r"lengths = torch\.tensor\(list\(map\(len, rows\)\), "
               r"dtype=torch\.int64\)", r"map\(len, rows\)\), (dtype=None)?\)",
               "non-empty lists of Python ints infer int64; with no rows the float32 empty tensor "
               "is read only for its shape by _samples, which then raises (count mismatch or "
               "empty batch) exactly as with int64"),
    # ---------------------------------------------------------------- values never read
    Equivalent(P, "_owners", r"count \+ 1", r"count \+ 2",
               "one more scratch slot past `count`: index_add_ positions are <= count and only "
               "marks[:count] is returned"),
    Equivalent(P, "_ramps", r"count \+ 1", r"count \+ 2",
               "one more scratch slot past `count`: index_add_ positions are <= count and only "
               "steps[:count] is returned"),
    Equivalent(P, "_pack", r"lengths\.new_full\(\(1,\), pad\)", r"lengths\.new_full\(\(2,\), pad\)",
               "the extra tail run starts at `total`, so its jump lands in the scratch slot "
               "steps[total], which _ramps cuts off"),
    Equivalent(P, "_pack", r"^batch_size=\[\],$", r"^(batch_size=None,)?$",
               "TensorDict's default batch_size (None) is torch.Size([]), the same as []"),
    Equivalent(P, "_packed_logprobs", r"row = _pack\(scored, 1, 0\)",
               r"row = _pack\(scored, (2, 0|1, 1)\)",
               "the micro-batches read the packed row only inside [0, real tokens): its tail pad "
               "(pad_to_multiple 2) is never read, and with pad_to_multiple 1 there is no pad to "
               "fill with the pad id"),
    Equivalent(P, "pack_varlen", r"_pack\(samples, pad_to_multiple, pad_token_id, input_ids\)",
               r"_pack\(samples, pad_to_multiple, None, input_ids\)",
               "with input_ids given (the fast path wrote them), _pack never reads pad_token_id"),
    Equivalent(P, "_write_lists", r"empty = torch\.zeros\(0, dtype=torch\.int64\)|"
               r"_Samples\(empty, empty, \*host, \*host\)",
               r"^(empty = None|empty = torch\.zeros\((0|1), (dtype=(None|torch\.int64))?\)|"
               r"return _Samples\((None, empty|empty, None), \*host, \*host\), input_ids)$",
               "the fast path's flat token tensors are never read: _pack gets input_ids, so "
               "_place_tokens (their only reader) does not run"),
    Equivalent(P, "_write_lists", r"np\.fromiter\(map\(len, (prompts|responses)\), dtype=np\.int64, "
               r"count=len", r"np\.fromiter\(map\(len, (prompts|responses)\), dtype=np\.int64, \)",
               "count is only a preallocation hint for np.fromiter: same array"),
    # ---------------------------------------------------------------- same meaning
    Equivalent(P, "_token_logprobs", r"dim=-1\)|gather\(-1,|squeeze\(-1\)",
               r"dim=\+1\)|gather\(\+1,|squeeze\(\+1\)",
               "the chunk is 2-D (rows, V) and its gather result (rows, 1): axis +1 is axis -1"),
    Equivalent(P, "unpad", r"sum\(dim=-1, dtype=torch\.int32\)",
               r"sum\(dim=\+1, dtype=torch\.int32\)|sum\(dim=-1, (dtype=None)?\)",
               "the mask is 2-D (dim +1 is -1); row sums in int64 instead of int32 give the same "
               "cu_seqlens (cumsum with dtype=int32) and the same int max_seqlen"),
    Equivalent(P, "response_logprobs", r"^chunk_size=1024,$", r"^chunk_size=1025,$",
               "the default chunk size only groups rows of the row-wise log-softmax: the same "
               "values, a different peak memory"),
    Equivalent("impl/varlen.py", "_place_tokens", r"torch\.empty\(total, dtype=torch\.int64, "
               r"device=device\)", r"torch\.empty\(total, dtype=torch\.int64, (device=None)?\)",
               ON_CPU),
    Equivalent("impl/varlen.py", "_pack", r"_place_tokens\(samples, offsets, target_index, real,",
               r"_place_tokens\(samples, offsets, target_index, None,",
               "`input_ids[None:] = pad` writes the pad over the whole row instead of the tail "
               "only; the token copies (or scatters) that follow overwrite the real positions: "
               "the same tensor, one more pass"),
    Equivalent(P, "_check_repad_args", r"torch\.sort\(indices, stable=True\)",
               r"torch\.sort\(indices, (stable=(None|False))?\)",
               "CPU-equivalent: torch's CPU sort keeps equal values in their order whether asked "
               "or not, so the repeat found is the same; on CUDA an unstable sort may put a later "
               "occurrence first and name the first one (not checked here: no GPU)"),
)
