"""batchproof `impl/`: one module per op (see ../shared/spec and docs/).

Floor 0: imports `reference/` (shared validation) and nothing of the harness."""

import logging

# tensordict calls torch.fx.is_fx_tracing(), which logs a one-time deprecation warning
logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)
