"""The in-process transformers engine: batched KV-cache decoding on the actor's own weights."""
