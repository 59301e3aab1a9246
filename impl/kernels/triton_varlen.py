"""pack_varlen's per-token outputs as one Triton kernel: each sample's tokens written once, on
the device.

    sample i at packed offset o_i (prompt p_i, response r_i, n_i = p_i + r_i):
        input_ids[o_i + c]      prompt_i then response_i            c in [0, n_i)
        position_ids[o_i + c]   c
    its response tokens k, from flat response index f_i on:
        target_index[f_i + k]   o_i + p_i + k
        predict_index[f_i + k]  o_i + p_i + k - 1
        sample_index[f_i + k]   i

One program per (sample, block of its columns). The tail pad (from `real` to `total`: the pad
id, positions 0 1 ... as its own segment) is two small torch fills of that range only. Compiled
on CUDA; on CPU tensors under Triton's interpreter (see `triton_rl_batch`).
"""

import torch

from batchproof.impl import kernels

try:
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # the torch path runs instead
    triton = None



if triton is not None:  # the kernel (its annotations need triton.language)

    def _samples(ids_ptr, positions_ptr, target_ptr, predict_ptr, owner_ptr, p_flat_ptr,
                 p_off_ptr, r_flat_ptr, r_off_ptr, offsets_ptr, BLOCK: tl.constexpr):
        i = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        p0 = tl.load(p_off_ptr + i)
        p = tl.load(p_off_ptr + i + 1) - p0
        r0 = tl.load(r_off_ptr + i)
        r = tl.load(r_off_ptr + i + 1) - r0
        o = tl.load(offsets_ptr + i)
        in_prompt = cols < p
        in_response = (cols >= p) & (cols < p + r)
        tokens = tl.where(in_prompt, tl.load(p_flat_ptr + p0 + cols, mask=in_prompt, other=0),
                          tl.load(r_flat_ptr + r0 + cols - p, mask=in_response, other=0))
        tl.store(ids_ptr + o + cols, tokens, mask=in_prompt | in_response)
        tl.store(positions_ptr + o + cols, cols.to(tl.int64), mask=in_prompt | in_response)
        k = cols - p
        tl.store(target_ptr + r0 + k, (o + cols).to(tl.int64), mask=in_response)
        tl.store(predict_ptr + r0 + k, (o + cols - 1).to(tl.int64), mask=in_response)
        tl.store(owner_ptr + r0 + k, (cols * 0 + i).to(tl.int64), mask=in_response)

    _KERNEL = triton.jit(_samples), InterpretedFunction(_samples)


def write_samples(p_flat, p_len, r_flat, r_len, total: int, pad_token_id: int,
                  longest: int, n_responses: int, real: int):
    """input_ids, position_ids (total,) and target_index, predict_index, sample_index (one per
    response token), int64 on the inputs' device, as `kernels.varlen.write_samples` writes them
    on the CPU. `longest`: the longest sample (p + r), `n_responses`: the response tokens,
    `real`: the samples' tokens (all known on the host already)."""
    device, batch = p_flat.device, p_len.numel()
    block = kernels.triton_block(device)
    ids = torch.empty(total, dtype=torch.int64, device=device)
    positions = torch.empty(total, dtype=torch.int64, device=device)
    per_response = [torch.empty(n_responses, dtype=torch.int64, device=device) for _ in range(3)]
    p_off, r_off = kernels.device_offsets(p_len), kernels.device_offsets(r_len)
    offsets = kernels.device_offsets(p_len + r_len)
    if longest:
        kernels.triton_launch(
            _KERNEL, device, (batch, triton.cdiv(longest, block)), ids, positions,
            *per_response, p_flat.contiguous(), p_off, r_flat.contiguous(), r_off, offsets,
            BLOCK=block)
    ids[real:] = pad_token_id  # the tail pad: its own segment, positions from 0
    torch.arange(total - real, out=positions[real:])
    return ids, positions, *per_response
