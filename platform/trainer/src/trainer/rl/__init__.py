"""RL post-training (GRPO): episodes, advantages, loss, replay buffer, prompts, rewards, generation, HF checkpoints.

README.md beside this file says what each module does and what was verified.
"""
