"""mutmut survivors of `impl/trainer.py` that no CPU test can kill (see the package docstring)."""

from batchproof.mutation.equivalents import NO_DEVICE, ON_CPU, Equivalent

EQUIVALENT: tuple[Equivalent, ...] = (
    # tensors made on (or moved to) `device` / `value.device`: dropped or None
    Equivalent("impl/trainer.py", "*", r"device=(device|value\.device)\b",
               r"device=None\b", ON_CPU),
    Equivalent("impl/trainer.py", "*", r"device=(device|value\.device)\b", NO_DEVICE, ON_CPU),
    Equivalent("impl/trainer.py", "broadcast_stepwise_advantages",
               r"^device = response_mask\.device$|^(ids|values) = _(traj_ids|scalars)\(.*, device\)$",
               r"^device = None$|^(ids|values) = _(traj_ids|scalars)\(.*, None\)$", ON_CPU),
    Equivalent("impl/trainer.py", "pad_to_multiple",
               r"^mask = _mask_row\(width, start, min_length, value\.device\)$|^device = _device\(td\)$",
               r"^mask = _mask_row\(width, start, min_length, None\)$|^device = None$", ON_CPU),
    Equivalent("impl/trainer.py", "_mask_row", r"\)\.to\(torch\.int64\)$", r"\)\.to\(None\)$",
               "Tensor.to(None) keeps the bool comparison result; its only reader, _token_row, "
               "uses it through `mask == 1`, `.to(field dtype)` and cumsum (bool sums to int64): "
               "the same padding row values and dtypes"),
    Equivalent("impl/trainer.py", "pad_to_multiple",
               r"^out = TensorDict\(\{\}, batch_size=\[batch \+ count\], device=td\.device\)$",
               r"^out = TensorDict\((None, )?batch_size=\[batch \+ count\], device=td\.device\)$",
               "TensorDict's source defaults to None, which builds the same empty TensorDict as {}"),
    Equivalent("impl/trainer.py", "pad_to_multiple",
               r"torch\.cat\(\[value, extra\], dim=0\)", r"torch\.cat\(\[value, extra\], \)",
               "torch.cat concatenates along dim 0 by default"),
)
