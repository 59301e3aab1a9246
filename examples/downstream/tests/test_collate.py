"""minirl's collate, checked with batchproof's public API.

1. `batchproof.check`: every check of the `rl_batch.build_rl_batch` contract (equivalence with
   the oracle on every input form we accept, the layout properties, the pinned historical bugs).
2. A property of our own, on batchproof's input strategies.
"""

import batchproof
import batchproof.strategies as bps
from hypothesis import given

from minirl import collate_rollouts


def test_collate_follows_the_rl_batch_contract():
    batchproof.check(
        collate_rollouts, "rl_batch.build_rl_batch",
        forms=["lists"],  # minirl collates Python lists
        skip={"errors": "minirl validates rollouts where they are made, not here"},
    )


@given(bps.rl_batch_inputs(layouts=["left"], rewards=["none", "scalar"]))
def test_every_real_token_is_attended_once(inputs):
    batch = collate_rollouts(inputs["prompts"], inputs["responses"],
                             pad_token_id=inputs["pad_token_id"], rewards=inputs.get("rewards"))
    real = [len(p) + len(r) for p, r in zip(inputs["prompts"], inputs["responses"])]
    assert batch["attention_mask"].sum(dim=1).tolist() == real
