"""``python -m rlvr.agents.vllm.server_side``: print the extension's folder.

That folder goes on a vLLM server's ``PYTHONPATH`` (it holds ``rlvr_vllm_worker``).
"""

from rlvr.agents.vllm.server_side import extension_dir

print(extension_dir())
