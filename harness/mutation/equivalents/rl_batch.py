"""mutmut survivors of `impl/rl_batch.py` that no CPU test can kill (see the package docstring)."""

from batchproof.mutation.equivalents import NO_DEVICE, ON_CPU, Equivalent

EQUIVALENT: tuple[Equivalent, ...] = (
    Equivalent("impl/rl_batch.py", "*", r"device=|\.to\(device", r"device=None|\.to\(None\)",
               ON_CPU),
    Equivalent("impl/rl_batch.py", "*", r"device=", NO_DEVICE, ON_CPU),
    Equivalent("impl/rl_batch.py", "build_rl_batch", r"_output_device\(|, device[,)]",
               r"_output_device\(\w*,? ?None|, None[,)]", ON_CPU),
    Equivalent("impl/rl_batch.py", "_flatten_values", r", device, allow_scalar",
               r", None, allow_scalar", ON_CPU),
    Equivalent("impl/rl_batch.py", "_flatten_mixed", r"else 0\.0 for row", r"else 1\.0 for row",
               "the filler value of non-scalar rows is never read: torch.where keeps `dense` "
               "there (is_scalar is False)"),
    Equivalent("impl/rl_batch.py", "*", r"np\.fromiter\(|count=", r"np\.fromiter\(None|count=None",
               "numpy fast path: fromiter(None) raises TypeError, which falls back to the row-by-row "
               "path (same values, same errors); count= is only a preallocation hint"),
    Equivalent("impl/rl_batch.py", "*", r"(torch\.tensor\(\[|torch\.tensor\(list\(|torch\.full\().*"
               r"dtype=torch\.int64", r"^(?!.*dtype=torch\.int64)",
               "torch infers int64 from Python ints (torch.tensor of int lists, torch.full with "
               "an int fill value): the explicit dtype only documents it"),
    Equivalent("impl/rl_batch.py", "*", r"np\.fromiter\(map\(len|count=int\(lengths",
               r"np\.fromiter\(map\(len, \w+\), (dtype=None|dtype=np\.int64, \))|^\s*\)$",
               "row lengths read as float64 (dtype=None) compare equal to the int64 lengths they are "
               "checked against; count= is only a preallocation hint"),
    Equivalent("impl/rl_batch.py", "_write_lists", r"np\.zeros_like\(r_len\)",
               r"np\.zeros_like\(None\)",
               "np.zeros_like(None) is the 0-d object array 0: the same zero start offsets"),
    Equivalent("impl/rl_batch.py", "_flatten_tokens", r"if kinds and not any",
               r"if kinds or not any",
               "a mix of tensor and list rows then takes the array('q') path, which reads 0-d "
               "tensors through __index__: same values, same errors as the row-by-row path"),
    Equivalent("impl/rl_batch.py", "_flatten_values", r"^kinds = set", r"^kinds = None$",
               "skips only the numpy fast path: _flatten_mixed gives the same values and the same "
               "errors, slower (a performance mutant; benchmarks/bench_rl_batch.py sees it)"),
    Equivalent("impl/rl_batch.py", "_left_masks", r"\*\*int64\)",
               r"torch\.(arange\(width|tensor\(\[0, 1\]), \)",
               "torch infers int64 from Python ints (tensor([0, 1]), arange(width)), and the "
               "dropped device is the default one, the target on CPU; " + ON_CPU),
    Equivalent("impl/rl_batch.py", "_two_segment_masks",
               r"_response_rows\(r_len, max_response, False, one\)",
               r"_response_rows\(r_len, max_response, None, one\)",
               "_response_rows tests `if right_aligned:`: None takes the same branch as False"),
    Equivalent("impl/kernels/rl_batch.py", "write_rows", r"^modes\.append\(0\)$",
               r"^modes\.append\(1\)$",
               "an output that is not built gets zero-size stand-ins ((0,) values, (0, 0) rows): "
               "with mode COPY instead of 0 the kernel slices them to nothing and writes nothing"),
)
