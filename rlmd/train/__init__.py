"""Training: task sets, rewards, rollouts, datasets, LoRA fine-tuning, back into llama.cpp.

Modules (one job each): :mod:`~rlmd.train.tasks` (generated splits, user JSONL),
:mod:`~rlmd.train.scoring` (metrics), :mod:`~rlmd.train.rewards`, :mod:`~rlmd.train.teacher`
(the programmatic teacher), :mod:`~rlmd.train.rollout` (rollouts into the store),
:mod:`~rlmd.train.export` (SFT samples, GRPO groups), :mod:`~rlmd.train.sft`,
:mod:`~rlmd.train.grpo`, :mod:`~rlmd.train.gguf_lora` (adapter → GGUF → registry model).
Only ``sft`` and ``grpo`` need the ``train`` extra (torch and friends),
imported when called. Guide: ``docs/training.md``.
"""
