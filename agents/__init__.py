"""The LLM agent: rollout engines and the multi-turn episode runner."""
