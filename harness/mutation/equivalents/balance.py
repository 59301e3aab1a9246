"""mutmut survivors of `impl/balance.py` that no CPU test can kill (see the package docstring)."""

from batchproof.mutation.equivalents import NO_DEVICE, ON_CPU, Equivalent

_P = "impl/balance.py"
_RESTORE_DEVICE = ("CPU-equivalent: the permutation tensors are built on the default device (the "
                   "CPU) instead of rows.device; on CPU that is where the rows are, so the same "
                   "checks and the same gathered rows (not checked on CUDA here: no GPU)")
_HEAD_IS_FIRST = ("a set tuple's first_index (field 2) and head (field 3) are always equal: "
                  "(v, 1, i, i, i) for one item, (0, 0, -1, -1, -1) when empty, and _merge copies "
                  "both from the same set, so reading one for the other changes no value")

EQUIVALENT: tuple[Equivalent, ...] = (
    Equivalent(_P, "pad_for_sequence_parallel", r"device=\w+\.device", r"device=None", ON_CPU),
    Equivalent(_P, "pad_for_sequence_parallel", r"device=\w+\.device", NO_DEVICE, ON_CPU),
    Equivalent(_P, "restore_order", r"device = rows\.device if rows\.device is not None",
               r"^device = (None|rows\.device if \(rows\.device is not None\) (and False|or True) "
               r"else|rows\.device if rows\.device is None else)", _RESTORE_DEVICE),
    Equivalent(_P, "restore_order", r"int\(perm\.max\(\)\) >= n", r"int\(perm\.max\(\)\) > n",
               "max(perm) == n still raises the same ValueError: bincount(perm, minlength=n) then "
               "has n + 1 bins for n indices, so some bin is 0 and the next check fails"),
    Equivalent(_P, "restore_order", r"torch\.bincount\(perm, minlength=n\)",
               r"torch\.bincount\(perm, \)",
               "with every index in [0, n) (checked just before), bincount has max+1 <= n bins; "
               "all of them equal to 1 means max+1 == n indices, each once: the same verdict as "
               "with minlength=n"),
    Equivalent(_P, "_entry", r"-top\[1\], -top\[2\], sets", r"-top\[1\], -top\[3\], sets",
               _HEAD_IS_FIRST),
    Equivalent(_P, "_merge", r"b\[1\], b\[2\], b\[3\], b\[4\]", r"b\[1\], b\[3\], b\[3\], b\[4\]",
               _HEAD_IS_FIRST),
    Equivalent(_P, "_merge", r"a\[1\] \+ b\[1\], a\[2\], a\[3\], b\[4\]",
               r"a\[1\] \+ b\[1\], a\[3\], a\[3\], b\[4\]", _HEAD_IS_FIRST),
    Equivalent(_P, "karmarkar_karp", r"^following = \[-1\] \* n", r"^following = \[(\+1|-2)\] \* n",
               "the initial following[i] is only ever read for a set's tail, by _read_items after "
               "its last item, and that value is discarded (every other entry is overwritten by "
               "_merge before it is read)"),
    Equivalent(_P, "micro_batches", r"count = -\(-max\(-\(-total // max_tokens\)",
               r"count = -\(-max\((\+\(-total|-\(\+total) // max_tokens\), min_count or 1\)",
               "performance only: the first count becomes min_count (or 1) rounded up to the "
               "step; every multiple of the step below ceil(total / max_tokens) holds more than "
               "count * max_tokens tokens, so its balanced attempt never fits and the loop reaches "
               "the original first count (or stops at len(fallback), as the original does)"),
    Equivalent(_P, "micro_batches", r"min_count or 1\) // step", r"min_count or 2\) // step",
               "differs only without min_count, with step 1 and total <= max_tokens: first-fit "
               "then makes one bin, so `count < len(fallback)` is false for count 1 and 2 alike "
               "and the fallback is returned (with step >= 2 both round up to step)"),
    Equivalent(_P, "pad_for_sequence_parallel", r"^length = input_ids\.shape\[-1\]$",
               r"^length = input_ids\.shape\[\+1\]$",
               "_check_packed requires input_ids of shape (1, N): dimension 1 is the last one"),
    Equivalent(_P, "pad_for_sequence_parallel", r"packed\.clone\(recurse=False\)",
               r"packed\.clone\(recurse=None\)",
               "tensordict reads `recurse` only by truth value (`if recurse` / `if not recurse` in "
               "every _clone): None is a shallow clone like False"),
    Equivalent(_P, "_values", r"if all\(type\(v\) is int for v in values\)",
               r"if all\(type\(None\) is int for v in values\)",
               "performance only: the int-list fast path is skipped, and the row-by-row path "
               "returns the same ints and raises the same first-negative error"),
    Equivalent(_P, "_lengths", r"if not all\(type\(v\) is int for v in lengths\)",
               r"if not all\(type\(None\) is int for v in lengths\)",
               "performance only: every list takes the row-by-row path, which returns the same "
               "ints and raises the same first-bad-length error as the fast path"),
)
