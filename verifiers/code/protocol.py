"""What the host and the sandbox say to each other: a plain-data codec, framing, check splitting.

Stdlib only. The host imports it as ``rlvr.verifiers.code.protocol``; inside the sandbox the
bootstrap of :mod:`rlvr.verifiers.code.sandbox` installs the same source under the same name,
for :mod:`rlvr.verifiers.code.harness`.
"""

from __future__ import annotations

import ast
import json
import socket
import struct
import threading
from typing import Any, Literal, overload

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# A reply of the program (one call's result or exception) is at most this long: decoding JSON
# costs ~50x its size in memory and holds the GIL, so a program must not choose how much.
MAX_REPLY_BYTES = 1 << 20
MAX_DEPTH = 64
# At most this many keys of one decoded set or dict may share a hash: a set of n ints that all
# hash alike takes n**2 / 2 comparisons to build (~20 s for one 1 MiB reply), and sets and dicts
# of exact builtin types that encode() produces essentially never have more than two.
MAX_SAME_HASH = 16

# ---------------------------------------------------------------------------- value codec


class EncodeError(Exception):
    """A value is not plain data (exact builtin types only), or is too deep or too large."""


def encode(value: Any, _depth: int = 0) -> Any:
    """Turns plain data into JSON-able tagged data; anything else raises :class:`EncodeError`.

    Only exact builtin types pass (``type(x) is int``, not a subclass): None, bool, int, float,
    str, list, tuple, dict, set, frozenset, bytes, complex. Tuples, dicts, sets, frozensets,
    bytes and complex become one-key dicts (``{"t": [...]}`` ...), so plain JSON dicts never
    appear and the tags are unambiguous.
    """
    if _depth > MAX_DEPTH:
        raise EncodeError("value nested too deeply")
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is float:
        return value
    if kind is int:
        if value.bit_length() > 4000:
            raise EncodeError("integer too large")
        return value
    nxt = _depth + 1
    if kind is list:
        return [encode(v, nxt) for v in value]
    if kind is tuple:
        return {"t": [encode(v, nxt) for v in value]}
    if kind is dict:
        return {"d": [[encode(k, nxt), encode(v, nxt)] for k, v in value.items()]}
    if kind is set:
        return {"s": [encode(v, nxt) for v in value]}
    if kind is frozenset:
        return {"fs": [encode(v, nxt) for v in value]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    raise EncodeError(f"values of type {kind.__name__!r} are not plain data")


def decode(data: Any, _depth: int = 0) -> Any:
    """Inverse of :func:`encode`; raises :class:`EncodeError` on anything it would not produce."""
    if _depth > MAX_DEPTH + 1:
        raise EncodeError("value nested too deeply")
    kind = type(data)
    if data is None or kind in (bool, int, float, str):
        return data
    nxt = _depth + 1
    if kind is list:
        return [decode(v, nxt) for v in data]
    if kind is dict and len(data) == 1:
        (tag, body), = data.items()
        try:
            if tag == "t":
                return tuple(decode(v, nxt) for v in body)
            if tag == "d":
                pairs = [(decode(k, nxt), decode(v, nxt)) for k, v in body]
                _few_collisions(k for k, _ in pairs)
                return dict(pairs)
            if tag in ("s", "fs"):
                items = [decode(v, nxt) for v in body]
                _few_collisions(items)
                return set(items) if tag == "s" else frozenset(items)
            if tag == "b":
                return bytes.fromhex(body)
            if tag == "c":
                return complex(float(body[0]), float(body[1]))
        except (TypeError, ValueError) as exc:
            raise EncodeError(f"malformed {tag!r} value: {exc}") from None
    raise EncodeError(f"unexpected encoded value of type {kind.__name__}")


def _few_collisions(keys: Any) -> None:
    """Raises :class:`EncodeError` when more than ``MAX_SAME_HASH`` keys share one hash.

    Called before a set or dict is built from the keys; linear work (distinct hash values go in
    a dict keyed by the hash, which CPython's probing spreads whatever their low bits).
    """
    seen: dict[int, int] = {}
    for key in keys:
        h = hash(key)
        n = seen.get(h, 0) + 1
        if n > MAX_SAME_HASH:
            raise EncodeError(f"more than {MAX_SAME_HASH} keys of one set or dict share a hash")
        seen[h] = n


# ---------------------------------------------------------------------------- framing


def send_msg(sock: socket.socket, obj: Any) -> None:
    """Sends one length-prefixed JSON message on a stream socket."""
    body = json.dumps(obj, separators=(",", ":")).encode()
    sock.sendall(struct.pack("!I", len(body)) + body)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv_msg(sock: socket.socket, limit: int = MAX_MESSAGE_BYTES) -> Any:
    """Receives one message sent by :func:`send_msg`; returns None at end of stream.

    Raises:
        EncodeError: the message is larger than ``limit`` bytes or is not JSON.
    """
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack("!I", head)
    if size > limit:
        raise EncodeError(f"message of {size} bytes is over the limit")
    body = _recv_exact(sock, size)
    if body is None:
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise EncodeError(f"bad message: {exc}") from None


# ---------------------------------------------------------------------------- parsing

# CPython 3.11 keeps the AST-to-object recursion counter in interpreter-wide state: two threads in
# ast.parse at once (a thread switch happens when a garbage collection during the conversion runs
# a Python finaliser) corrupt it, and ast.parse raises "SystemError: AST constructor recursion
# depth mismatch". Seen in CI from the verifier pool's threads. Every parse in the process holds
# this lock.
_PARSE_LOCK = threading.Lock()


@overload
def parse_source(source: str, mode: Literal["exec"] = "exec") -> ast.Module: ...
@overload
def parse_source(source: str, mode: Literal["eval"]) -> ast.Expression: ...
def parse_source(source: str, mode: str = "exec") -> ast.AST:
    """``ast.parse`` that is safe to call from several threads at once (see ``_PARSE_LOCK``)."""
    with _PARSE_LOCK:
        return ast.parse(source, mode=mode)


# ---------------------------------------------------------------------------- check splitting


def split_check(test_code: str) -> tuple[str, list[tuple[bool, str]]] | None:
    """Splits the body of ``def check(param)`` into set-up and tests.

    A statement that mentions the parameter (the candidate) starts a test; every statement after
    it up to the next such statement belongs to the same test (``r = candidate(x)`` then
    ``assert r == y`` is one test, and so is ``f = candidate`` with the asserts that use ``f``),
    so a statement that fails after the first test always fails a test. Statements before the
    first test are set-up: if one fails, every test fails. Returns ``(param, [(is_test, source),
    ...])`` with set-up first, or None when the body cannot run as separate statements (no
    one-parameter ``check``, a ``return``/``yield``/``nonlocal``/``global`` at its top level, or
    no statement mentions the candidate); then the whole call is one test.
    """
    fn = _check_function(test_code)
    if fn is None:
        return None
    param = fn.args.args[0].arg
    out: list[tuple[bool, str]] = []
    for stmt in fn.body:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom, ast.Nonlocal, ast.Global)):
                if _scope_of(stmt, node) is stmt:
                    return None
        mentions = any(isinstance(n, ast.Name) and n.id == param for n in ast.walk(stmt))
        source = ast.unparse(stmt)
        if out and out[-1][0] and not mentions:
            out[-1] = (True, out[-1][1] + "\n" + source)
        else:
            out.append((mentions, source))
    if not any(is_test for is_test, _ in out):
        return None
    return param, out


def _check_function(test_code: str) -> ast.FunctionDef | None:
    """The one ``def check(param)`` at the top level of ``test_code``, if there is exactly one."""
    try:
        tree = parse_source(test_code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1:
        return None
    return checks[0]


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names the code reads, names it binds anywhere); two empty sets when it does not parse."""
    try:
        tree = parse_source(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set(), set()
    loaded: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
    return loaded, bound


def free_names(test_code: str) -> set[str]:
    """Names the test code reads but never binds itself.

    A name that the test code assigns, imports, defines or uses as a parameter anywhere is the
    test code's own; so is ``check``. Returns an empty set when the code does not parse.
    """
    loaded, bound = _names(test_code)
    return loaded - bound - {"check"}


def bound_names(source: str) -> set[str]:
    """Names ``source`` binds anywhere (defines, assigns, imports); empty when it does not parse."""
    return _names(source)[1]


def in_place_test(test_code: str) -> str | None:
    """The first test of ``check`` that relies on the candidate mutating its argument, if any.

    Such a test (``candidate(xs)`` as a statement, then a later statement reads ``xs``) cannot
    hold across the process boundary: the program works on a copy of ``xs``, so the test would
    fail every program, the right one included. Returns that call's source, or None.
    """
    fn = _check_function(test_code)
    if fn is None:
        return None
    callers = {fn.args.args[0].arg}
    for i, stmt in enumerate(fn.body):
        for node in ast.walk(stmt):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                    and node.value.id in callers):
                callers.update(t.id for t in node.targets if isinstance(t, ast.Name))
        for node in _outside_try(stmt):  # in a try/with it tests that the call raises
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
                continue
            call = node.value
            if not (isinstance(call.func, ast.Name) and call.func.id in callers):
                continue
            args = {a.id for a in ast.walk(call) if isinstance(a, ast.Name)} - callers
            later = {n.id for s in fn.body[i + 1:] for n in ast.walk(s) if isinstance(n, ast.Name)}
            if args & later:
                return ast.unparse(node)[:120]
    return None


_TRY_NODES = tuple(getattr(ast, n) for n in ("Try", "TryStar", "With") if hasattr(ast, n))


def _outside_try(node: ast.AST) -> list[ast.AST]:
    """``node`` and its descendants, but not what is inside a ``try`` or ``with`` statement."""
    out: list[ast.AST] = []
    stack = [node]
    while stack:
        current = stack.pop()
        out.append(current)
        if not isinstance(current, _TRY_NODES):
            stack.extend(ast.iter_child_nodes(current))
    return out


def _scope_of(stmt: ast.AST, target: ast.AST) -> ast.AST:
    """The innermost function/lambda/class in ``stmt`` that contains ``target`` (else ``stmt``)."""
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    for node in ast.walk(stmt):
        if node is not stmt and isinstance(node, scopes):
            if any(n is target for n in ast.walk(node)):
                return node
    return stmt


def test_labels(test_code: str) -> list[str]:
    """Names of the tests that :func:`split_check` finds (``["check"]`` when it cannot split)."""
    plan = split_check(test_code)
    if plan is None:
        return ["check"]
    return [src.splitlines()[0][:120] for is_test, src in plan[1] if is_test]


# ---------------------------------------------------------------------------- outcomes


def program_raised(exc_name: str, msg: object) -> tuple[str, str]:
    """The status and message of a test in which the program raised ``exc_name`` with ``msg``.

    The status is "memory_limit" for ``MemoryError`` and "runtime_error" for anything else; the
    host (call tests) and the tester (assert tests) report a program's exception alike.
    """
    status = "memory_limit" if exc_name == "MemoryError" else "runtime_error"
    return status, f"the program raised {exc_name}: {msg}"[:300]


# ---------------------------------------------------------------------------- text from the sandbox

# C0 controls (but tab, newline, carriage return) and DEL become U+FFFD.
_CONTROLS = {c: 0xFFFD for c in (*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)}


def clean_text(text: object, limit: int | None = None) -> str:
    """Program-controlled text made safe to store, log and tokenize.

    Lone surrogates (which no UTF-8 encoder accepts) become ``?``, control characters other than
    tab, newline and carriage return become U+FFFD; ``limit`` truncates to that many characters.
    """
    s = text if type(text) is str else str(text)
    if limit is not None:
        s = s[:limit]
    return s.encode("utf-8", "replace").decode("utf-8").translate(_CONTROLS)
