"""The mutants of one Python module: small deliberate bugs, one per mutant, found on its AST.

Each mutant changes one expression or statement and is applied by splicing the mutated node
(``ast.unparse``, parenthesised unless an atom) over the original node's source range, so every
other line, comment and line number stays as it was. A mutant is named by its scope and its
line before and after (``Mutant.key``), never by its line number. Operators:

- comparisons: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``, ``in``/``is`` negated;
- arithmetic and bitwise operators (also in ``x op= y``): ``+`` <-> ``-``, ``*`` <-> ``/``,
  ``//`` -> ``/``, ``**`` -> ``*``, ``%`` -> ``//``, ``&`` <-> ``|``, ``^`` -> ``|``,
  ``<<`` <-> ``>>``; ``and`` <-> ``or``;
- unary operators dropped (``-x`` -> ``x``, ``not x`` -> ``x``, ``~x`` -> ``x``); an ``if``
  condition that is not a comparison negated;
- constants: an int ``n`` -> ``n + 1``, a float ``x`` -> ``x + 1.0``, ``True`` <-> ``False``
  (strings are left alone: they are messages, names and keys);
- dropped calls: ``x.detach()``, ``x.clamp(...)``, ``x.clamp_(...)``, ``x.abs()`` -> ``x``;
  ``masked(x, m)`` and ``torch.where(c, x, y)`` -> ``x``; the mask of ``masked_mean``,
  ``masked_var``, ``masked_whiten`` and ``aggregate`` replaced by ``torch.ones_like(mask)``;
- swapped extremes: ``min`` <-> ``max``, ``minimum`` <-> ``maximum``, ``any`` <-> ``all``;
- deleted statements: a call statement, an augmented assignment, an assignment to an item or
  an attribute (-> ``pass``).

Not mutated: docstrings, ``__all__``, annotations, decorators, ``raise`` statements (their
messages) and f-strings.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

_COMPARE_FLIPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_BINOP_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Pow: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitOr,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
}
_DROPPED_METHODS = {"detach", "clamp", "clamp_", "abs"}
_MODULES = {"torch", "math", "cmath", "np", "numpy"}
_MASK_FUNCS = {"masked_mean", "masked_var", "masked_whiten", "aggregate"}
_NAME_SWAPS = {
    "min": "max",
    "max": "min",
    "minimum": "maximum",
    "maximum": "minimum",
    "any": "all",
    "all": "any",
}


@dataclass(frozen=True)
class Mutant:
    """One mutant of a module.

    Attributes:
        line: the first line of the mutated node (1-based).
        scope: the enclosing ``Class.function`` (``<module>`` at top level).
        before: the original line (stripped), or for a node spanning lines the node as
            ``ast.unparse`` writes it.
        after: the mutated line, or node, likewise.
        occurrence: 1 for the first mutant of this ``(scope, before, after)``, 2 for the next...
        source: the whole mutated module source.
    """

    line: int
    scope: str
    before: str
    after: str
    occurrence: int
    source: str

    @property
    def key(self) -> str:
        """Identifies the mutant across edits of the module (no line number in it)."""
        suffix = f" #{self.occurrence}" if self.occurrence > 1 else ""
        return f"{self.scope}: {self.before} => {self.after}{suffix}"


def _changes(node: ast.AST, parent: ast.AST | None) -> Iterator[ast.AST]:
    """Every mutated copy of ``node`` (only ``node`` itself changes; its children do not)."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _COMPARE_FLIPS:
                new = copy.copy(node)
                new.ops = list(node.ops)
                new.ops[i] = _COMPARE_FLIPS[type(op)]()
                yield new
    elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _BINOP_SWAPS:
        new_op = copy.copy(node)
        new_op.op = _BINOP_SWAPS[type(node.op)]()
        yield new_op
    elif isinstance(node, ast.BoolOp):
        yield ast.BoolOp(op=ast.Or() if isinstance(node.op, ast.And) else ast.And(),
                         values=node.values)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.Not | ast.Invert):
        yield node.operand
    elif isinstance(node, ast.Constant):
        yield from _constant_changes(node)
    elif isinstance(node, ast.Call):
        yield from _call_changes(node)
    elif isinstance(node, ast.Name | ast.Attribute) and _swappable(node, parent):
        yield _renamed(node)
    if (
        isinstance(parent, ast.If | ast.While | ast.IfExp)
        and parent.test is node
        and not isinstance(node, ast.Compare | ast.BoolOp | ast.UnaryOp)
    ):
        yield ast.UnaryOp(op=ast.Not(), operand=node)
    if _deletable(node):
        yield ast.Pass()


def _constant_changes(node: ast.Constant) -> Iterator[ast.AST]:
    value = node.value
    if isinstance(value, bool):
        yield ast.Constant(not value)
    elif isinstance(value, int):
        yield ast.Constant(value + 1)
    elif isinstance(value, float):
        yield ast.Constant(value + 1.0)


def _call_changes(node: ast.Call) -> Iterator[ast.AST]:
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in _DROPPED_METHODS:
        # x.clamp(...) -> x; torch.clamp(x, ...) -> x
        module_call = isinstance(func.value, ast.Name) and func.value.id in _MODULES
        if not module_call:
            yield func.value
        elif node.args:
            yield node.args[0]
    elif isinstance(func, ast.Name) and func.id == "abs" and len(node.args) == 1:
        yield node.args[0]
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    if name == "masked" and len(node.args) == 2:
        yield node.args[0]
    if name == "where" and len(node.args) == 3:
        yield node.args[1]
    if name in _MASK_FUNCS and len(node.args) >= 2:
        ones = ast.Call(
            func=ast.Attribute(value=ast.Name("torch"), attr="ones_like"),
            args=[node.args[1]],
            keywords=[],
        )
        yield ast.Call(func=node.func, args=[node.args[0], ones, *node.args[2:]],
                       keywords=node.keywords)


def _swappable(node: ast.Name | ast.Attribute, parent: ast.AST | None) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr
    return name in _NAME_SWAPS and isinstance(parent, ast.Call) and parent.func is node


def _renamed(node: ast.Name | ast.Attribute) -> ast.AST:
    if isinstance(node, ast.Name):
        return ast.Name(_NAME_SWAPS[node.id])
    return ast.Attribute(value=node.value, attr=_NAME_SWAPS[node.attr])


def _deletable(node: ast.AST) -> bool:
    if isinstance(node, ast.AugAssign):
        return True
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Call)
    if isinstance(node, ast.Assign):
        return all(isinstance(t, ast.Subscript | ast.Attribute) for t in node.targets)
    return False


def _skipped_children(node: ast.AST) -> set[int]:
    """Ids of the children of ``node`` never mutated (annotations, decorators, docstrings)."""
    skip: list[ast.AST] = []
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        skip += node.decorator_list
        returns = getattr(node, "returns", None)
        if returns is not None:
            skip.append(returns)
    if isinstance(node, ast.arguments):  # defaults are mutated, annotations are not
        skip += [a for a in (*node.posonlyargs, *node.args, *node.kwonlyargs) if a is not None]
        skip += [a for a in (node.vararg, node.kwarg) if a is not None]
    if isinstance(node, ast.AnnAssign):
        skip.append(node.annotation)
    body = getattr(node, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
        value = body[0].value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            skip.append(body[0])
    return {id(n) for n in skip}


def _is_dunder_all(node: ast.AST) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else (
        [node.target] if isinstance(node, ast.AnnAssign) else [])
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def _walk(tree: ast.Module) -> Iterator[tuple[ast.AST, ast.AST | None, str]]:
    """``(node, parent, scope)`` for every node that may be mutated, in source order."""

    def visit(node: ast.AST, parent: ast.AST | None, scope: str) -> Iterator[
        tuple[ast.AST, ast.AST | None, str]
    ]:
        if isinstance(node, ast.Raise | ast.JoinedStr) or _is_dunder_all(node):
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            scope = node.name if scope == "<module>" else f"{scope}.{node.name}"
        yield node, parent, scope
        skipped = _skipped_children(node)
        for child in ast.iter_child_nodes(node):
            if id(child) not in skipped:
                yield from visit(child, node, scope)

    yield from visit(tree, None, "<module>")


def _offsets(source: str) -> list[int]:
    """Character offset of the start of each line (index 0 = line 1)."""
    starts, total = [], 0
    for line in source.splitlines(keepends=True):
        starts.append(total)
        total += len(line)
    return starts


def mutants(source: str) -> list[Mutant]:
    """All mutants of the module ``source``, in source order."""
    tree = ast.parse(source)
    starts = _offsets(source)
    # Offsets in the AST count UTF-8 bytes; splice in bytes, then decode.
    data = source.encode()
    byte_starts = [len(source[:s].encode()) for s in starts]
    lines = source.splitlines()
    seen: dict[tuple[str, str, str], int] = {}
    out: list[Mutant] = []
    for node, parent, scope in _walk(tree):
        if not hasattr(node, "lineno") or node.end_lineno is None:
            continue
        begin = byte_starts[node.lineno - 1] + node.col_offset
        end = byte_starts[node.end_lineno - 1] + (node.end_col_offset or 0)
        before = ast.unparse(node)
        for new in _changes(node, parent):
            after = ast.unparse(new)
            if after == before:
                continue
            atom = isinstance(new, ast.stmt | ast.Constant | ast.Name | ast.Attribute | ast.Call
                              | ast.Subscript)
            text = after if atom else f"({after})"
            mutated = (data[:begin] + text.encode() + data[end:]).decode()
            if node.lineno == node.end_lineno:  # the whole line, before and after
                shown = (lines[node.lineno - 1].strip(),
                         mutated.splitlines()[node.lineno - 1].strip())
            else:
                shown = (_one_line(before), _one_line(after))
            ident = (scope, *shown)
            seen[ident] = seen.get(ident, 0) + 1
            out.append(Mutant(node.lineno, scope, *shown, seen[ident], mutated))
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split())


def check_compiles(items: list[Mutant], compile_fn: Callable[[str], object] | None = None) -> None:
    """Raise ``SyntaxError`` naming the mutant if one does not compile (a bug of this tool)."""
    for m in items:
        try:
            (compile_fn or (lambda s: compile(s, "<mutant>", "exec")))(m.source)
        except SyntaxError as err:
            raise SyntaxError(f"mutant at line {m.line} ({m.key}) does not compile: {err}") from err
