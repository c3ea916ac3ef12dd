"""``SGLangOptions``: how rlvr reaches SGLang servers and syncs weights into them.

The same dataclass is ``rollout.sglang`` in the training config (``rlvr.config``) and ``sglang``
in ``rlvr eval``'s (``rlvr.eval.evaluator.SuiteEvalConfig``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from rlvr.agents.errors import EngineConfigError
from rlvr.config_checks import bounded, check_choice, check_fields

WEIGHT_SYNCS = ("auto", "distributed", "disk")


@dataclass(kw_only=True)
class SGLangOptions:
    """Options of the SGLang engine.

    Attributes:
        url: an SGLang server (or sglang-router) base URL to attach to; null launches
            ``servers`` servers on the policy (one trainer rank only).
        server_urls: the servers themselves when ``url`` is a router (weight, version, pause,
            memory and cache calls go to each: the router forwards none of them); empty reads
            them from the router's ``/workers``, or means ``[url]`` for a server.
        servers: how many servers to launch when ``url`` is null; more than one puts an
            ``sglang-router`` (``pip install sglang-router`` in the servers' venv) in front.
        router_args: extra ``launch_router`` flags when launching several servers.
        python: the interpreter that runs ``sglang.launch_server`` when launching (sglang pins
            its own transformers, so it usually lives in its own venv); null reads
            ``$RLVR_SGLANG_PYTHON``, else this interpreter.
        launch_args: extra ``launch_server`` flags when launching.
        api_key: the servers' ``--api-key``, sent as ``Authorization: Bearer``.
        weight_sync: ``auto`` (chosen on attach: ``disk`` for a server on a GPU a trainer
            rank uses or with another NCCL version, else ``distributed``; see
            ``rlvr.agents.sglang.placement``), ``distributed`` (broadcast over a process group the
            servers join: NCCL on GPUs, gloo on CPU; needs trainer and servers on one network,
            servers on GPUs of their own and the same NCCL) or ``disk`` (bucketed safetensors
            shards in ``sync_dir``, reloaded by ``/update_weights_from_disk``; needs a
            filesystem the servers see).
        bucket_mb: megabytes per weight-update request (each server allocates one bucket's
            worth of unsharded tensors before loading them).
        sync_dir: where ``disk`` sync writes (null: the run's ``output_dir/weights_sync``).
        master_address: this host's address as the servers reach it (null: the local address
            of a connection to the first server).
        allow_unseeded: accept seeded sampling on servers started without
            ``--enable-deterministic-inference`` (seeds are then ignored: runs are not
            reproducible); else such requests are refused.
        startup_timeout_s: how long a launched server may take to become healthy.
        request_timeout_s: HTTP timeout of one request.
    """

    #: Caveats the configuration reference prints (``rlvr.config.docs``).
    CAVEATS: ClassVar[dict[str, str]] = {
        "": "Takes effect only with the `sglang` engine.",
        "python": "Only when launching (`url` null).",
        "launch_args": "Only when launching (`url` null).",
        "master_address": "Only with the `distributed` weight sync.",
    }

    url: str | None = None
    server_urls: list[str] = field(default_factory=list)
    servers: int = bounded(1, ge=1)
    router_args: list[str] = field(default_factory=list)
    python: str | None = None
    launch_args: list[str] = field(default_factory=list)
    api_key: str | None = None
    weight_sync: str = "auto"
    bucket_mb: int = bounded(512, ge=1)
    sync_dir: str | None = None
    master_address: str | None = None
    allow_unseeded: bool = False
    startup_timeout_s: float = bounded(900.0, gt=0)
    request_timeout_s: float = bounded(600.0, gt=0)

    def __post_init__(self) -> None:
        """Validate the fields (``EngineConfigError`` names the field in its ``key``)."""
        check_fields(self, error=EngineConfigError)
        check_choice("weight_sync", self.weight_sync, WEIGHT_SYNCS, error=EngineConfigError)
        if self.servers > 1 and self.url:
            raise EngineConfigError(
                f"servers={self.servers} launches servers, but url is set (attach): leave url "
                "null to launch, or attach to a router with url (and server_urls)",
                key="servers")
        if self.server_urls and not self.url:
            raise EngineConfigError("server_urls needs url (the router or first server that "
                                    "/generate goes to)", key="server_urls")

    @property
    def bucket_bytes(self) -> int:
        """``bucket_mb`` in bytes."""
        return self.bucket_mb * 1024**2
