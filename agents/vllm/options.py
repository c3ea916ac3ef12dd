"""``VLLMOptions``: how rlvr reaches vLLM servers and syncs weights into them.

The same dataclass is ``rollout.vllm`` in the training config (``rlvr.config``) and ``vllm`` in
``rlvr eval``'s (``rlvr.eval.evaluator.SuiteEvalConfig``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from rlvr.agents.errors import EngineConfigError
from rlvr.config_checks import bounded, check_choice, check_fields

WEIGHT_SYNCS = ("auto", "distributed", "disk")


@dataclass(kw_only=True)
class VLLMOptions:
    """Options of the vLLM engine (``rlvr.agents.vllm.VLLMEngine``).

    Attributes:
        url: a vLLM OpenAI-compatible server's base URL to attach to; null launches ``servers``
            servers on the policy (one trainer rank only). The server must run with
            ``VLLM_SERVER_DEV_MODE=1``, ``--enable-scale-out``, ``--logprobs-mode
            processed_logprobs`` and rlvr's worker extension (``--worker-extension-cls``;
            docs/engines.md gives the command), else it is refused, saying what is missing; a
            LoRA policy's adapter alone is synced to one started with ``--enable-lora``.
        server_urls: more servers of the same policy, used round-robin beside ``url`` (weight,
            memory and cache calls go to each).
        servers: how many servers to launch when ``url`` is null (round-robin).
        python: the interpreter that runs ``vllm.entrypoints.openai.api_server`` when launching
            (vLLM pins its own transformers, so it lives in its own venv: ``bash dev.sh
            setup-vllm``); null reads ``$RLVR_VLLM_PYTHON``, else this interpreter.
        launch_args: extra ``api_server`` flags when launching (last, so they override).
        api_key: the servers' ``--api-key``, sent as ``Authorization: Bearer``.
        weight_sync: ``auto`` (chosen on attach by the same rules as sglang's: ``disk`` for a
            server on a GPU a trainer rank uses, else ``distributed``), ``distributed``
            (broadcast over a process group the servers' workers join through rlvr's worker
            extension: NCCL on GPUs, gloo on CPU) or ``disk`` (bucketed safetensors shards in
            ``sync_dir`` that the workers load; needs a filesystem the servers see).
        bucket_mb: megabytes per weight-update call.
        sync_dir: where ``disk`` sync writes (null: the run's ``output_dir/weights_sync``).
        master_address: this host's address as the servers reach it (null: the local address
            of a connection to the first server).
        startup_timeout_s: how long a launched server may take to become healthy.
        request_timeout_s: HTTP timeout of one request.
    """

    #: Caveats the configuration reference prints (``rlvr.config.docs``).
    CAVEATS: ClassVar[dict[str, str]] = {
        "": "Takes effect only with the `vllm` engine.",
        "python": "Only when launching (`url` null).",
        "launch_args": "Only when launching (`url` null).",
        "master_address": "Only with the `distributed` weight sync.",
    }

    url: str | None = None
    server_urls: list[str] = field(default_factory=list)
    servers: int = bounded(1, ge=1)
    python: str | None = None
    launch_args: list[str] = field(default_factory=list)
    api_key: str | None = None
    weight_sync: str = "auto"
    bucket_mb: int = bounded(512, ge=1)
    sync_dir: str | None = None
    master_address: str | None = None
    startup_timeout_s: float = bounded(900.0, gt=0)
    request_timeout_s: float = bounded(600.0, gt=0)

    def __post_init__(self) -> None:
        """Validate the fields (``EngineConfigError`` names the field in its ``key``)."""
        check_fields(self, error=EngineConfigError)
        check_choice("weight_sync", self.weight_sync, WEIGHT_SYNCS, error=EngineConfigError)
        if self.servers > 1 and self.url:
            raise EngineConfigError(
                f"servers={self.servers} launches servers, but url is set (attach): leave url "
                "null to launch, or list the running servers in url and server_urls",
                key="servers")
        if self.server_urls and not self.url:
            raise EngineConfigError("server_urls needs url (the first server)", key="server_urls")

    @property
    def bucket_bytes(self) -> int:
        """``bucket_mb`` in bytes."""
        return self.bucket_mb * 1024**2
