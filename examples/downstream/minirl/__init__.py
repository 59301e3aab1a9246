"""minirl: a stand-in for an RL post-training framework (batchproof's downstream example)."""

from minirl.collate import collate_rollouts

__all__ = ["collate_rollouts"]
