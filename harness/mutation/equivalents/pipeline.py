"""mutmut survivors of `impl/pipeline.py` that no CPU test can kill (see the package docstring)."""

from batchproof.mutation.equivalents import NO_DEVICE, Equivalent

PIPELINE = "impl/pipeline.py"
DEFAULT_FLOAT = ("torch.zeros without a dtype gives torch's default dtype, float32: the dtype given "
                 "(the loss accumulator is then only read as float(loss); to_canonical's all-invalid "
                 "zeros only through logprob[valid], empty, and the ledger casts to float32)")
CPU_ONLY = ("CPU-equivalent: logprobs.device is the CPU on a CPU machine (the pipeline record runs on "
            "the CPU only, devices=('cpu',)), so device=None or no device creates the same tensor; "
            "only a direct to_canonical call with CUDA tensors on a GPU machine could see it")

EQUIVALENT: tuple[Equivalent, ...] = (
    Equivalent(PIPELINE, "_ledger", r"\[torch\.float32\] \* 3$", r"\[torch\.float32\] \* 4$",
               "a 9th dtype is never read: both uses zip dtypes with the 8 LEDGER_KEYS (or the 8 "
               "entries of data), and zip stops at the shorter"),
    Equivalent(PIPELINE, "_ledger", r"^torch\.zeros\(0, dtype=dtype\) for key",
               r"^torch\.zeros\(0, (dtype=None)?\) for key",
               "the empty column is cast to its ledger dtype on the next line "
               "(value.to(dtype)): an empty float32 tensor cast is the same empty tensor"),
    Equivalent(PIPELINE, "layout_and_advantages", r'loss_masks=step\.loss_masks, layout="left"\)$',
               r"^loss_masks=step\.loss_masks, \)$",
               "build_rl_batch's default layout is \"left\": dropping the keyword passes the same "
               "value"),
    Equivalent(PIPELINE, "rl_step", r"sp_size=1, pad_token_id=0,$", r"sp_size=1, pad_token_id=1,$",
               "rl_step returns only the ledger, which never reads pad_token_id's value: the pad "
               "fills only positions outside the attention mask (build_rl_batch, pad_to_multiple's "
               "padding rows), which nest_by_mask drops before the workers; the model, loss_mask and "
               "advantages never see it, and any int passes the checks (the ledger is bit-identical "
               "for pad ids 0, 1, 7; trace_rl_step, which exposes the padded batches, is tested with "
               "its default in tests/test_pipeline.py::test_defaults_match_reference)"),
    Equivalent(PIPELINE, "*",
               r"^columns, loss, micro = \[\], torch\.zeros\(\(\), dtype=torch\.float32\)",
               r"^columns, loss, micro = \[\], torch\.zeros\(\(\), (dtype=None)?\), \[\]$",
               DEFAULT_FLOAT),
    Equivalent(PIPELINE, "to_canonical", r"^return torch\.zeros\(valid\.shape, dtype=torch\.float32, ",
               r"^return torch\.zeros\(valid\.shape, (dtype=None, )?device=logprobs\.device\), valid$",
               DEFAULT_FLOAT),
    Equivalent(PIPELINE, "to_canonical", r"device=logprobs\.device", r"device=None", CPU_ONLY),
    Equivalent(PIPELINE, "to_canonical", r"device=logprobs\.device", NO_DEVICE, CPU_ONLY),
    Equivalent(PIPELINE, "to_canonical", r"\.clamp\(0, local - 1\)$", r"\.clamp\(None, local - 1\)$",
               "the lower bound never binds: W = local is the micro-batch's longest response "
               "(varlen.response_logprobs' width, to_canonical's documented precondition), so every "
               "response length r <= W and source = W - r + j >= 0 for every column j >= 0; only the "
               "upper bound (columns j >= r, masked out by valid) clamps"),
)
