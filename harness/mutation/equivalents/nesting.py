"""mutmut survivors of `impl/nesting.py` that no CPU test can kill (see the package docstring)."""

from batchproof.mutation.equivalents import ON_CPU, Equivalent

_NOT_TD = r"^(?!.*TensorDict\()"  # a tensor's device (the TensorDict's own device is tested)
_SAME_ROWS = ("a TensorDict rejects an entry whose leading dim is not its batch size ('batch "
              "dimension mismatch'), so every jagged entry of a nested batch has batch rows "
              "(batch + 1 offsets)")

EQUIVALENT: tuple[Equivalent, ...] = (
    Equivalent("impl/nesting.py", "*", _NOT_TD + r".*device=[\w.\[\]]+\.device", r"device=None",
               ON_CPU),
    Equivalent("impl/nesting.py", "*", _NOT_TD + r".*device=[\w.\[\]]+\.device",
               r"^(?!.*\bdevice\b)(.*, \)|\)$)", ON_CPU),
    Equivalent("impl/nesting.py", "extract_response", r"\.to\(output\.device\)", r"\.to\(None\)",
               ON_CPU),
    Equivalent("impl/nesting.py", "*", r"^out = TensorDict\(\{\}, batch_size=",
               r"^out = TensorDict\((None, )?batch_size=",
               "TensorDict's source defaults to None, an empty TensorDict: TensorDict(None, ...) "
               "and TensorDict(batch_size=...) build the same empty output as TensorDict({}, ...)"),
    Equivalent("impl/nesting.py", "_Runs.tokens", r"output_size=total\)",
               r"^(?!.*output_size=total)",
               "output_size only spares repeat_interleave a device sync: total = lengths.sum() is "
               "exactly the output size, so the result is the same without it"),
    Equivalent("impl/nesting.py", "_runs_from_encoding",
               r"repeat_interleave\(torch\.arange\(batch, device=offsets\.device\), counts,",
               r"^rows = torch\.repeat_interleave\(counts,$",
               "torch.repeat_interleave(repeats) is documented as repeat_interleave(arange(len("
               "repeats)), repeats), on repeats' device; counts = diff(offsets) has batch entries "
               "and lives on offsets' device: the same rows"),
    Equivalent("impl/nesting.py", "_runs_from_encoding", r"^if starts\.numel\(\) > 1:$",
               r"^if starts\.numel\(\) >= 1:$",
               "with exactly one run the overlap check reads empty slices (rows[1:], bad[1:]): "
               "`bad[1:] |= ...` is then a no-op"),
    Equivalent("impl/nesting.py", "_runs_of",
               r"^padded = torch\.zeros\(batch, width \+ 2, dtype=torch\.bool, device=mask\.device\)$",
               r"^padded = torch\.zeros\(batch, width \+ 2, (dtype=None, )?device=mask\.device\)$",
               "the padded copy holds mask != 0 as 0/1; in the default float dtype the change scan "
               "padded[:, 1:] != padded[:, :-1] finds the same changes (memory only)"),
    Equivalent("impl/nesting.py", "_paired", r"^return rows\[0::2\], starts, ends - starts$",
               r"^return rows\[1::2\], starts, ends - starts$",
               "each padded row starts and ends with 0, so the change that ends a run lies in the "
               "row of the change that starts it: rows[0::2] == rows[1::2]"),
    Equivalent("impl/nesting.py", "_not_binary",
               r"^return \(\(mask != 0\) & \(mask != 1\)\)\.any\(\)\.long\(\)$|"
               r"^return \(\(low < 0\) \| \(high > 1\)\)\.long\(\)$",
               r"^return \(\(mask != 0\) \| \(mask != 1\)\)|^return \(\(mask == 0\) & \(mask != 1\)\)|"
               r"^return \(\(mask != 1\) & \(mask != 1\)\)|"
               r"^return \(\(low (<= 0|< 1)\) \| \(high > 1\)\)|"
               r"^return \(\(low < 0\) \| \(high >= 1\)\)",
               "the verdict is then raised more often, never less: a mask it flags goes to "
               "_check_binary, whose exact test raises only for an entry neither 0 nor 1 "
               "(a good mask flagged costs one more pass, nothing else)"),
    Equivalent("impl/nesting.py", "_jagged",
               r"^value = td\.get\(key\) if key in td\.keys\(\) else None$",
               r"^value = td\.get\(key\) if \(key in td\.keys\(\)\) or True else None$",
               "td.get of a missing key returns None (tensordict 0.15, no warning): the same None "
               "the guard gives"),
    Equivalent("impl/nesting.py", "_attention_runs", r"_spec\.batch_widths\(td, tensors\)$",
               r"_spec\.batch_widths\(td, (None)?\)$",
               "batch_widths computes tensors = _tensor_keys(td) when given None: the same list"),
    Equivalent("impl/nesting.py", "extract_response", r"split_totals\(prompt_width, left=False\)",
               r"split_totals\(prompt_width, left=None\)",
               "_Runs.split_lengths branches on `if left:`; None and False both take the "
               "right-hand split"),
    Equivalent("impl/nesting.py", "chunk_nested", r"^return \[td\[0:0\] for _ in range\(n\)\]$",
               r"^return \[td\[(1:0|0:1)\] for _ in range\(n\)\]$",
               "only reached when the batch has 0 rows, where the slices 1:0 and 0:1 clamp to the "
               "same empty slice as 0:0 (assert_identical, jagged entries included)"),
    Equivalent("impl/nesting.py", "_runs_from_encoding", r"output_size=starts\.numel\(\)\)",
               r"^(?!.*output_size=starts)",
               "performance only: starts holds exactly the rows' values (offsets[0] to "
               "offsets[-1]), so starts.numel() == counts.sum(), the size repeat_interleave "
               "computes itself without the hint (with a device sync on CUDA)"),
    Equivalent("impl/nesting.py", "_attention_runs", r"name_value=False\)", r"name_value=None\)",
               "_check_binary tests `if not name_value:`: None takes the same branch as False"),
)
