"""episodes.html: every episode in one self-contained page (no server, no external assets).

The page nests collapsible sections checkpoint -> env -> episode. Inside an episode the decoded
tokens are shown in order, coloured by who produced them: the prompt, the model (trained on,
``response_mask == 1``) and the env (tool results, feedback, chat-template tokens). Each model
turn ends with a badge showing the reward placed on that turn. Styles are inline in a ``<style>``
block; there are no scripts, links, images or fonts to fetch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

__all__ = ["render_html", "write_html"]

Record = Mapping[str, Any]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; }
details { margin: 0.3em 0 0.3em 1em; }
summary { cursor: pointer; padding: 0.15em 0; }
.legend span, .tok { padding: 0 0.15em; border-radius: 3px; }
.prompt { background: #eeeeee; color: #555; }
.model { background: #d6e9ff; color: #0b3d91; }
.env { background: #fff0c2; color: #7a4b00; }
.badge { display: inline-block; margin: 0 0.3em; padding: 0 0.4em; border-radius: 8px;
  font-size: 0.8em; font-weight: bold; background: #444; color: #fff; }
.pass { color: #1a7f37; font-weight: bold; }
.fail { color: #cf222e; font-weight: bold; }
pre.episode { white-space: pre-wrap; word-break: break-word; font-size: 0.85em;
  border: 1px solid #ddd; padding: 0.6em; background: #fafafa; }
table.meta { font-size: 0.85em; border-collapse: collapse; }
table.meta td { padding: 0 0.8em 0 0; }
"""


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _text(value: Any) -> str:
    r"""HTML-escaped text with control characters (invalid in HTML) shown as ``\xNN``."""
    if value is None:
        return "n/a"
    return escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value)))


def _episode(record: Record, expanded: bool = False) -> str:
    passed = bool(record.get("passed"))
    mark = '<span class="pass">pass</span>' if passed else '<span class="fail">fail</span>'
    summary = (
        f"task {_text(record.get('task_id'))} · sample {record.get('sample')} · {mark} · "
        f"reward {float(record.get('reward', 0.0)):.3f} · turns {record.get('turns')} · "
        f"finish {_text(record.get('finish_reason'))}"
    )
    rewards = ", ".join(f"{r:.3f}" for r in record.get("turn_rewards", []))
    meta_rows = [
        ("verdict", record.get("verdict_reason")),
        ("answer", record.get("answer")),
        *([("gold answer", record["gold"])] if record.get("gold") is not None else []),
        ("score", record.get("score")),
        ("rewards per turn", f"[{rewards}]"),
        ("model tokens", record.get("model_tokens")),
    ]
    if record.get("tool_calls"):  # an episode without a tool call has nothing to say here
        errors = record.get("tool_call_errors") or 0
        meta_rows.append(("tool calls (errors)", f"{record.get('tool_calls')} ({errors})"))
    meta = "".join(
        f"<tr><td>{escape(name)}</td><td>{_text(value)}</td></tr>" for name, value in meta_rows
    )
    parts = []
    for seg in record.get("segments", []):
        kind = seg.get("kind", "env")
        kind = kind if kind in ("prompt", "model", "env") else "env"
        parts.append(f'<span class="tok {kind}">{_text(seg.get("text", ""))}</span>')
        if kind == "model" and seg.get("reward") is not None:
            parts.append(f'<span class="badge">r={float(seg["reward"]):.3f}</span>')
    return (
        f"<details{' open' if expanded else ''}><summary>{summary}</summary>"
        f'<table class="meta">{meta}</table>'
        f'<pre class="episode">{"".join(parts)}</pre></details>'
    )


def _group(records: Sequence[Record], key: str) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = {}
    for record in records:
        groups.setdefault(str(record.get(key)), []).append(record)
    return groups


def render_html(
    records: Sequence[Record], title: str = "rlvr eval episodes", expanded: bool = False
) -> str:
    """The page for ``records`` (episodes.jsonl records, see ``rlvr.eval.episodes``).

    Args:
        records: episode records, grouped in the page by ``model`` then ``env`` (first-seen
            order).
        title: the page title.
        expanded: show every section open (for pages of a few episodes); else only the
            checkpoint sections are open.

    Returns:
        A complete HTML5 document as a string.
    """
    body = [
        f"<h1>{escape(title)}</h1>",
        '<p class="legend">Legend: <span class="prompt">prompt</span> '
        '<span class="model">model tokens (trained on)</span> '
        '<span class="env">env / tool / template tokens</span> '
        '<span class="badge">r=reward of the model turn</span></p>',
    ]
    for model, by_model in _group(records, "model").items():
        solved = sum(bool(r.get("passed")) for r in by_model)
        body.append(
            f"<details open><summary><b>{escape(model)}</b> · {len(by_model)} episodes · "
            f"{solved} passed</summary>"
        )
        for env, by_env in _group(by_model, "env").items():
            ok = sum(bool(r.get("passed")) for r in by_env)
            body.append(
                f"<details{' open' if expanded else ''}><summary>{escape(env)} · {len(by_env)} "
                f"episodes · {ok} passed</summary>"
            )
            body.extend(_episode(r, expanded) for r in by_env)
            body.append("</details>")
        body.append("</details>")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def write_html(
    records: Sequence[Record], path: str | Path, title: str = "rlvr eval", expanded: bool = False
) -> Path:
    """Write ``render_html(records, title, expanded)`` to ``path`` (UTF-8) and return it."""
    target = Path(path)
    target.write_text(render_html(records, title, expanded), encoding="utf-8")
    return target
