"""batchproof `reference/`: one module per op (see ../shared/spec and docs/).

Floor 0: imports nothing of batchproof but itself."""

import logging

# tensordict calls torch.fx.is_fx_tracing(), which logs a one-time deprecation warning
logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)
