"""build_rl_batch as two Triton kernels: every output byte written once, on the device.

One program per (row, block of columns); nothing is read back to the host. The sequence kernel
writes input_ids, attention_mask and position_ids; the response kernel writes response_mask and
the per-token value tensors (loss_mask, rewards, rollout_logprobs):

    row i, sequence columns:   [pad ... pad | prompt_i | response_i | pad ...]
                                 0 ..  s_i-1   s_i ..     .. e_i-1    e_i ..
    attention_mask             0            1                          0
    position_ids               0            0, 1, ..., n_i - 1         n_i - 1 (0 if n_i = 0)

    row i, response columns:   [0 ... 0 | values of response_i | 0 ...]   from column a_i

Float values are copied as their 32-bit patterns (int32 views), so -0.0, NaN payloads and
subnormals come through bit for bit, as the reference's float32 rounding left them.

On CUDA the kernels are compiled (`triton.jit`); on CPU tensors they run under Triton's
interpreter (`InterpretedFunction`, the machinery behind TRITON_INTERPRET=1, without setting the
variable for the whole process): slow, for checking the kernel code on machines without a GPU.
The caller (`batchproof.impl.rl_batch`) decides when they apply (`kernels.triton_applies`).
"""

import torch

from batchproof.impl import kernels

try:
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # the torch path runs instead
    triton = None

COPY, ONES, MASK = 1, 2, 3  # what a response tensor gets (a constexpr of the response kernel)


if triton is not None:  # the kernels (their annotations need triton.language)

    def _sequence_rows(ids_ptr, attention_ptr, positions_ptr, p_flat_ptr, p_off_ptr, r_flat_ptr,
                       r_off_ptr, start_ptr, width, total, first, pad, BLOCK: tl.constexpr,
                       CHUNKS: tl.constexpr, TAIL: tl.constexpr):
        """input_ids, attention_mask, position_ids. A program writes BLOCK columns of one row
        (grid (B, cdiv(W, BLOCK))), or with CHUNKS the aligned flat chunk
        [(first + k) * BLOCK, ... + BLOCK) of the (B * W) outputs, so its stores are 16 bytes
        wide whatever W (only the TAIL chunk, the last and partial one, masks them)."""
        if CHUNKS:
            flat = (first + tl.program_id(0)).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            at = tl.minimum(flat, total - 1) if TAIL else flat  # past the end: not stored
            row = at // width
            cols = at - row * width
            inside = flat < total if TAIL else None
        else:
            row = tl.program_id(0)
            cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
            flat = row * width + cols
            inside = cols < width
        p0 = tl.load(p_off_ptr + row)
        p = tl.load(p_off_ptr + row + 1) - p0
        r0 = tl.load(r_off_ptr + row)
        r = tl.load(r_off_ptr + row + 1) - r0
        s = tl.load(start_ptr + row)
        n = p + r
        in_prompt = (cols >= s) & (cols < s + p)
        in_response = (cols >= s + p) & (cols < s + n)
        tokens = tl.where(in_prompt, tl.load(p_flat_ptr + p0 + cols - s, mask=in_prompt, other=0),
                          tl.load(r_flat_ptr + r0 + cols - s - p, mask=in_response, other=0))
        real = in_prompt | in_response
        last = tl.maximum(n - 1, 0)
        positions = tl.where(cols < s, 0, tl.where(real, cols - s, last))
        tl.store(ids_ptr + flat, tl.where(real, tokens, pad), mask=inside)
        tl.store(attention_ptr + flat, real.to(tl.int64), mask=inside)
        tl.store(positions_ptr + flat, positions.to(tl.int64), mask=inside)

    def _response_rows(out_ptr, flat_ptr, r_off_ptr, r_start_ptr, width, MODE: tl.constexpr,
                       BLOCK: tl.constexpr):
        """One (B, R) response tensor: the response mask (MODE 3, int64 0/1), copied values
        (MODE 1) or 1.0 (MODE 2) on the response columns, as int32 bit patterns."""
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        r0 = tl.load(r_off_ptr + row)
        r = tl.load(r_off_ptr + row + 1) - r0
        a = tl.load(r_start_ptr + row)
        on = (cols >= a) & (cols < a + r)
        if MODE == 3:
            written = on.to(tl.int64)
        elif MODE == 2:
            written = tl.where(on, 0x3F800000, 0)  # float32 1.0
        else:
            written = tl.where(on, tl.load(flat_ptr + r0 + cols - a, mask=on, other=0), 0)
        tl.store(out_ptr + row * width + cols, written, mask=cols < width)

    _SEQUENCE_ROWS = triton.jit(_sequence_rows), InterpretedFunction(_sequence_rows)
    _RESPONSE_ROWS = triton.jit(_response_rows), InterpretedFunction(_response_rows)


def write_rows(p_flat, p_len, r_flat, r_len, start, r_start, width: int, max_response: int,
               pad_token_id: int, values: dict, ones: str) -> dict[str, torch.Tensor]:
    """All outputs, on the inputs' device, as `kernels.rl_batch.write_rows` writes them on the
    CPU. `values`: name -> flat float32 values, or None: not built, except for the name `ones`,
    which then gets a 1.0 on each response column (the default loss mask)."""
    device, batch = p_flat.device, p_len.numel()
    block = kernels.triton_block(device)
    out = {name: torch.empty((batch, width), dtype=torch.int64, device=device)
           for name in ("input_ids", "attention_mask", "position_ids")}
    out["response_mask"] = torch.empty((batch, max_response), dtype=torch.int64, device=device)
    r_off = kernels.device_offsets(r_len)
    sequence = (out["input_ids"], out["attention_mask"], out["position_ids"],
                p_flat.contiguous(), kernels.device_offsets(p_len), r_flat.contiguous(), r_off,
                start.contiguous(), width, batch * width)
    if width and kernels.TRITON_FLAT_ROWS:  # aligned chunks: the full ones, then the tail
        full, rest = divmod(batch * width, block)
        for count, first, tail in ((full, 0, False), (1 if rest else 0, full, True)):
            if count:
                kernels.triton_launch(_SEQUENCE_ROWS, device, (count,), *sequence, first,
                                      pad_token_id, BLOCK=block, CHUNKS=True, TAIL=tail)
    elif width:
        kernels.triton_launch(_SEQUENCE_ROWS, device, (batch, triton.cdiv(width, block)),
                              *sequence, 0, pad_token_id, BLOCK=block, CHUNKS=False, TAIL=False)
    tensors = [(out["response_mask"], out["response_mask"], MASK)]
    for name, flat in values.items():
        if flat is None and name != ones:
            continue
        out[name] = torch.empty((batch, max_response), dtype=torch.float32, device=device)
        bits = out[name].view(torch.int32)
        tensors.append((bits, bits, ONES) if flat is None
                       else (bits, flat.contiguous().view(torch.int32), COPY))
    if max_response:
        r_start = r_start.contiguous()
        for target, source, mode in tensors:  # a launch each: a few, each row-parallel
            kernels.triton_launch(
                _RESPONSE_ROWS, device, (batch, triton.cdiv(max_response, block)), target,
                source, r_off, r_start, max_response, MODE=mode, BLOCK=block)
    return out
