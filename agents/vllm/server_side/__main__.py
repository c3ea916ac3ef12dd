"""``python -m rlvr.agents.vllm.server_side`` prints the folder to put on a vLLM server's
``PYTHONPATH`` (it holds rlvr's worker extension, ``rlvr_vllm_worker``)."""

from rlvr.agents.vllm.server_side import extension_dir

print(extension_dir())
