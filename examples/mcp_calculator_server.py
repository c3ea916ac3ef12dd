r"""An MCP server with one tool, ``calculator``: the tool quickstart's calculator, served over MCP.

Written with the ``mcp`` package (``pip install 'rlvr[mcp]'``); rlvr starts it as a child process
when a tool env's ``tools`` lists ``{"mcp": "python examples/mcp_calculator_server.py"}``::

    rlvr train configs/tool_quickstart.yaml \
        'env.kwargs.tools=[{mcp: "python examples/mcp_calculator_server.py"}]'

A failed evaluation raises, which MCP reports as an error result and the env shows to the model
as a failed call, as with the built-in strict calculator.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from rlvr.envs.calculator import evaluate, format_number

server = MCPServer("rlvr-calculator")


@server.tool()
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly, e.g. "347*58"."""
    return format_number(evaluate(expression))


if __name__ == "__main__":
    server.run()
