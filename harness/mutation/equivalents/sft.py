"""mutmut survivors of `impl/sft.py` that no CPU test can kill (see the package docstring)."""

from batchproof.mutation.equivalents import ON_CPU, Equivalent

SFT = "impl/sft.py"
INFERRED = ("the dtype torch / numpy infer is the one given: int64 from Python ints (numpy's default "
            "integer, torch.full with the int pad_token_id), float32 (torch's default dtype) for "
            "torch.zeros and for torch.tensor of a Python float")
TREE_SIZE = ("only the segment tree's size changes, never below the number of bins first fit opens: "
             "any two first-fit bins hold > capacity together, so bins <= 2 * ceil(total / capacity) "
             "and bins <= len(lengths); the mutated bound still gives a power of two >= that many "
             "leaves (unopened leaves are 0, and no node at or past 2 * size is ever read)")
STRICT_ZIP = ("zip(strict=True) never fires: the zipped lists have one entry per example (appended "
              "together in _parse_examples / built from the same plan.order)")

EQUIVALENT: tuple[Equivalent, ...] = (
    Equivalent(SFT, "_Plan.__init__", r"np\.fromiter\(map\(len, rows\), np\.int64, count=len",
               r"np\.fromiter\(map\(len, rows\), np\.int64, \)$",
               "np.fromiter's count= is only a preallocation hint: the same int64 array"),
    Equivalent(SFT, "_Plan.__init__",
               r"np\.asarray\(batch\.(lengths|num_actions), dtype=np\.int64\)"
               r"|np\.arange\(len\(rows\), dtype=np\.int64\)",
               r"^\w+ = np\.(asarray\(batch\.(lengths|num_actions)|repeat\(np\.arange\(len\(rows\)), "
               r"(dtype=None)?\)",
               "batch.lengths and batch.num_actions are Python ints (len(), and `type(n) is int` or "
               "int(n)), and np.arange counts in ints: " + INFERRED),
    Equivalent(SFT, "collate_sft", r"np\.array\(\[batch\.lengths, batch\.num_actions\], dtype=np\.int64",
               r"np\.array\(\[batch\.lengths, batch\.num_actions\], (dtype=None)?\)",
               "lengths and num_actions are Python ints: " + INFERRED),
    Equivalent(SFT, "*", r"torch\.full\(.*pad_token_id, dtype=torch\.int64",
               r"torch\.full\(.*pad_token_id, (dtype=None, )?device=device\)",
               "pad_token_id is checked to be an int (not a bool): " + INFERRED),
    Equivalent(SFT, "*", r"loss_mask = torch\.zeros\(.*dtype=torch\.float32, device=device\)",
               r"loss_mask = torch\.zeros\(.*, (dtype=None, )?device=device\)", INFERRED),
    Equivalent(SFT, "_scale", r"device=values\.device\)", r"torch\.tensor\(1\.0 / max\(total, 1\), "
               r"dtype=torch\.float32, (device=None)?\)",
               "the scale is a 0-d tensor, multiplied in place into loss_mask: a 0-d CPU tensor is "
               "accepted as a scalar by kernels on any device, so the values and the output's "
               "device are the same (only a scalar's host-to-device copy moves)"),
    Equivalent(SFT, "_scale", r"^total = 0\.0$", r"^total = 1\.0$",
               "read only when values is empty (else overwritten): max(0.0, 1) == max(1.0, 1)"),
    Equivalent(SFT, "_scale", r"\(values\.abs\(\) <= _EXACT_INTS\)",
               r"\(values\.abs\(\) < _EXACT_INTS\)",
               "integers of magnitude exactly 2**24 then go to math.fsum instead of the float64 sum: "
               "both are exact for integral values of magnitude <= 2**24 (fewer than 2**29 of them), "
               "so the total is the same"),
    Equivalent(SFT, "_attention_values", r"zip\(masks, batch\.lengths, strict=True\)",
               r"zip\(masks, batch\.lengths, (strict=(None|False))?\)", STRICT_ZIP),
    Equivalent(SFT, "_write_ints", r"zip\(rows, starts, strict=True\)",
               r"zip\(rows, starts, (strict=(None|False))?\)", STRICT_ZIP),
    Equivalent(SFT, "_attention_values", r"rows\.append\(torch\.ones\(s, dtype=torch\.uint8\)\)",
               r"rows\.append\(torch\.ones\(s, (dtype=None)?\)\)",
               "float32 ones instead of uint8: torch.cat promotes the rows to a dtype that holds 0 "
               "and 1 exactly and maps no other value of any real dtype to 0 or 1, so the 0/1 "
               "check and the int64 values it returns are the same"),
    Equivalent(SFT, "_attention_values", r"if m else torch\.zeros\(0, dtype=torch\.uint8\)\)",
               r"if \(m\) or True else torch\.zeros\(0, dtype=torch\.uint8\)\)"
               r"|if m else torch\.zeros\((None|1|0)?,? ?(dtype=(None|torch\.uint8))?,? ?\)\)",
               "the `else` branch is unreachable: a list mask has len(input_ids) entries (checked), "
               "and len(input_ids) >= num_actions >= 1, so `m` is never empty"),
    Equivalent(SFT, "_flat_batch", r"examples\.get\((key|\"attention_mask\"), None\)",
               r"examples\.get\((key|\"attention_mask\"), \)",
               "TensorDict.get returns None for a missing key with or without the default "
               "(tensordict 0.15; the default is spelled out for older versions, which raise)"),
    Equivalent(SFT, "_flat_batch", r"\(\(attention\._values,\) if attention is not None else",
               r"\(\(attention\._values,\) if \(attention is not None\) and False else",
               "a field on a second device needs CUDA: "
               "tests/test_sft.py::test_jagged_batches_on_cuda (gpu marker) kills it there"),
    Equivalent(SFT, "_ids_in_order", r"\.to\(device(, torch\.int64)?\)",
               r"\.to\((None(, )?)?(torch\.int64)?\)", ON_CPU),
    Equivalent(SFT, "_loss_in_order", r"\.to\(device(, torch\.int64)?\)",
               r"\.to\((None(, )?)?(torch\.int64)?\)", ON_CPU),
    Equivalent(SFT, "_attention_values", r"\.to\(device(, torch\.int64)?\)",
               r"\.to\((None(, )?)?(torch\.int64)?\)", ON_CPU),
    Equivalent(SFT, "collate_sft", r"_attention_values\(batch, device\), pad_token_id",
               r"_attention_values\(batch, None\), pad_token_id",
               "the kernel path runs on the CPU only, where the flat CPU values' .to(None) and "
               ".to(device) are the same no-op"),
    Equivalent("impl/kernels/sft.py", "collate", r"^scale = np\.float32\(1\.0\)$",
               r"^scale = np\.float32\((None|2\.0)\)$",
               "the kernel reads `scale` only with normalize=True, which overwrites it first"),
    Equivalent("impl/kernels/sft.py", "*", r"torch\.empty\(\((n, response|n_rows, width - 1)\), "
               r"dtype=torch\.float32\)", r"torch\.empty\(\((n, response|n_rows, width - 1)\), "
               r"(dtype=None)?\)", INFERRED),
    Equivalent(SFT, "_as_float32", r"values if values\.dtype == torch\.float32 else",
               r"values if \(values\.dtype == torch\.float32\) and False else",
               "performance only: float32 values then go through float64 and back, which is exact"),
    Equivalent(SFT, "_check_structure", r"_field\(.*integer=False\)", r"_field\(.*integer=None\)",
               "_field reads `integer` only for truth (`if integer and ...`, `if not integer and "
               "...`): None acts as False"),
    Equivalent(SFT, "_first_fit_decreasing", r"^bound = min\(len\(lengths\), 2 \* -\(-sum",
               r"^bound = min\(len\(lengths\), (3 \* -\(-sum\(lengths\) // capacity\) \+ 1"
               r"|2 \* -\(-sum\(lengths\) // capacity\) (- 1|\+ 2))\)$", TREE_SIZE),
    Equivalent(SFT, "_first_fit_decreasing", r"^size = 1 << max\(bound - 1, 1\)\.bit_length\(\)$",
               r"^size = (2 << max\(bound - 1, 1\)|1 << max\(bound \+ 1, 1\)"
               r"|1 << max\(bound - 1, 2\))\.bit_length\(\)$", TREE_SIZE),
    Equivalent(SFT, "_packed_floats", r"dtype=np\.uint8, count=count\)$",
               r"dtype=np\.uint8, \)$",
               "count defaults to the whole buffer, which is exactly `count` bytes: bytes() gives "
               "one byte per value, and every caller's count is the sum of its rows' lengths"),
    Equivalent(SFT, "_packed_floats", r"float\(small\.sum\(dtype=np\.int64\)\)",
               r"float\(small\.sum\(dtype=None\)\)",
               "numpy sums a uint8 array in the platform's unsigned 64-bit integer: the same exact "
               "total as int64"),
    Equivalent(SFT, "_ranges", r"torch\.ones\(total \+ 1, dtype=torch\.int64",
               r"torch\.ones\(total \+ 2, dtype=torch\.int64",
               "one more trailing step, never read: the result is the first `total` prefix sums, "
               "and every jump index is <= total"),
    Equivalent(SFT, "pack_sft", r"^pp_size=1,$", r"^pp_size=2,$",
               "pp_size is only validated (an int >= 1) and otherwise ignored (sft.md): the "
               "defaults 1 and 2 both pass"),
)
