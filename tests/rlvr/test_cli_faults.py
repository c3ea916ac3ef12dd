"""``rlvr train`` when the disk fills, the folder is read-only, Ctrl-C lands in a checkpoint save,
or a config error shows up only once a model is loaded: one line, the right exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tmpfs import small_tmpfs
from trainer_helpers import QUIET, SMALL_MODEL

from rlvr.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
RUN = [*SMALL_MODEL, *QUIET, "sft.enabled=false", "trainer.steps=2", "trainer.threads=1",
       "rollout.prompts_per_step=2", "rollout.group_size=2", "eval.tasks=2", "eval.every=0"]


def _train(out: Path, *extra: str) -> int:
    return main(["train", str(CONFIGS / "quickstart.yaml"), *RUN,
                 f"trainer.output_dir={out}", *extra])


def test_a_read_only_output_folder_is_refused_before_any_work(tmp_path, capsys):
    with small_tmpfs(tmp_path / "ro", 64) as disk:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        assert _train(disk / "run") == 2
    err = capsys.readouterr().err
    assert "trainer.output_dir: cannot write in" in err and "Read-only file system" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_full_disk_says_so_in_one_line_and_leaves_no_empty_picture(tmp_path, capsys):
    with small_tmpfs(tmp_path / "disk", 160) as disk:
        code = _train(disk / "run", "trainer.checkpoint_every=1", "trainer.plot=true")
        err = capsys.readouterr().err
        assert code == 1, err[-3000:]
        assert "rlvr train: error: no space left on device at" in err
        assert str(disk / "run") in err and "Traceback" not in err
        picture = disk / "run" / "curves.png"
        assert not picture.exists() or picture.stat().st_size > 0
        assert not list((disk / "run").glob(".*.tmp"))


@pytest.mark.slow
def test_a_config_error_found_after_loading_exits_2_in_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(out, "trainer.checkpoint_every=1") == 0
    capsys.readouterr()
    before = (out / "config.yaml").read_bytes()
    assert _train(out, "trainer.checkpoint_every=1", "trainer.resume=true",
                  "model.tiny.hidden_size=64") == 2
    err = capsys.readouterr().err
    assert "model.tiny.hidden_size: 32 -> 64" in err and "Traceback" not in err
    assert (out / "config.yaml").read_bytes() == before


# Ctrl-C while the second checkpoint is written: SIGINT goes to the main thread, and the write
# waits for it, so it lands inside the save every time. The script first gives SIGINT Python's
# own handler, as in a terminal: a process started with SIGINT ignored keeps it ignored (the
# disposition is inherited), and a pytest worker of the suite had it ignored, so the run went on
# to exit 0.
INTERRUPTED_SAVE = textwrap.dedent("""
    import signal, sys, threading, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from torch.distributed.checkpoint import FileSystemWriter
    from rlvr.cli import main

    write = FileSystemWriter.write_data
    saves = []

    def interrupted(self, *args, **kwargs):
        saves.append(1)
        if len(saves) == 2:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            if threading.current_thread() is threading.main_thread():
                time.sleep(60)  # the KeyboardInterrupt ends the sleep
        return write(self, *args, **kwargs)

    FileSystemWriter.write_data = interrupted
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.slow
def test_ctrl_c_during_a_checkpoint_save_exits_130_with_the_resume_hint(tmp_path):
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED_SAVE)
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(script), "train", str(CONFIGS / "quickstart.yaml"), *RUN,
         "trainer.checkpoint_every=1", f"trainer.output_dir={out}"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 130, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert f"the last checkpoint is {out / 'checkpoints' / 'step_000001'}" in done.stderr
    assert "trainer.resume=true" in done.stderr


def test_the_help_examples_name_what_exists():
    import re as _re

    from rlvr.cli import _eval_parser
    from rlvr.envs import load_suite
    from rlvr.serve import _parser as serve_parser

    suite = _re.search(r"--suite (\S+)", _eval_parser().epilog or "")
    assert suite is not None and load_suite(suite.group(1)).entries
    assert "runs/tool_quickstart/export" in (serve_parser().epilog or "")


def test_lora_target_modules_that_match_nothing_exit_2_in_one_line(tmp_path, capsys):
    assert _train(tmp_path / "run", "actor.lora.rank=4",
                  "actor.lora.target_modules=[no_such_layer]") == 2
    err = capsys.readouterr().err
    assert "match no linear layer" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
