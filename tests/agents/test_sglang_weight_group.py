"""The trainer's side of the weight-update group with sglang servers (``sglang_layout_group``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import timedelta

import torch

from rlvr.agents.sglang.server_process import free_port
from rlvr.agents.sglang.weights import sglang_layout_group

# the server's side, as sglang 0.5.23's init_custom_process_group does it: rendezvous as rank 1
SERVER_RANK = textwrap.dedent("""
    import sys, torch
    from datetime import timedelta
    from torch.distributed import distributed_c10d as c10d
    store, rank, world = next(c10d.rendezvous(sys.argv[1], 1, 2, timeout=timedelta(seconds=60)))
    store = c10d.PrefixStore("weights", store)
    pg, _ = c10d._new_process_group_helper(2, 1, [], "gloo", store,
                                           group_name=c10d.GroupName("weights"),
                                           timeout=timedelta(seconds=60))
    t = torch.zeros(3)
    pg.broadcast(t, 0).wait()
    print(t.tolist())
""")


def test_the_group_forms_when_the_trainer_runs_under_torchrun(monkeypatch):
    """torchrun sets TORCHELASTIC_USE_AGENT_STORE: torch's rendezvous then makes rank 0 a client
    of the launcher's store too, and it waited for a store at init_method that nobody served
    (10 minutes, then a timeout). The trainer's rank 0 now serves the store itself."""
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    init = f"tcp://127.0.0.1:{free_port('127.0.0.1')}"
    env = {k: v for k, v in os.environ.items() if k != "TORCHELASTIC_USE_AGENT_STORE"}
    server = subprocess.Popen([sys.executable, "-c", SERVER_RANK, init], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        group = sglang_layout_group(backend="gloo", init_method=init, world_size=2, rank=0,
                                    group_name="weights", timeout=timedelta(seconds=30))
        group.broadcast(torch.tensor([1.0, 2.0, 3.0])).wait()
        out, err = server.communicate(timeout=60)
        group.destroy()
    finally:
        server.kill()
    assert server.returncode == 0, err[-2000:]
    assert out.strip() == "[1.0, 2.0, 3.0]"
