"""A small MCP server on the official Python SDK, for colloquy's MCP tests.

python mcp_server.py stdio [--mark FILE] [--deep N]
python mcp_server.py http PORT [--json] [--deep N]
(streamable HTTP at /mcp: answers are SSE streams, or JSON bodies with --json). With --mark, the
server writes its process id to FILE as it starts. With --deep, it also lists a tool `deep`
whose schema nests N objects (hostile: the SDK cannot write a schema that deep itself, so the
listing's text is patched as it is written).
"""
import asyncio
import json
import os
import subprocess
import sys

import mcp.types
from mcp.server.fastmcp import Context, FastMCP

port = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] == "http" else 8000
server = FastMCP("colloquy-test", host="127.0.0.1", port=port, json_response="--json" in sys.argv)


@server.tool()
def add(a: int, b: int) -> str:
    """Adds two integers."""
    return f"{a} + {b} = {a + b}"


@server.tool()
async def slow(steps: int, ctx: Context) -> str:
    """Works for `steps` tenths of a second, reporting progress."""
    for i in range(1, steps + 1):
        await asyncio.sleep(0.1)
        await ctx.report_progress(i, steps, f"step {i} of {steps}")
    return f"done after {steps} steps"


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def crash() -> str:
    """Exits the server process at once."""
    os._exit(3)


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ValueError("the disk is full")


def extra() -> str:
    """A tool added while the server runs."""
    return "extra works"


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `extra` and tells the client its tool list changed."""
    server.add_tool(extra)
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool()
def big(mib: float) -> str:
    """Returns `mib` MiB of text."""
    return "x" * int(mib * 1024 * 1024)


@server.tool()
async def flood(n: int, ctx: Context) -> str:
    """Sends `n` progress notifications as fast as it can, then returns."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"note {i}")
    return f"flooded {n}"


@server.tool()
def env() -> str:
    """The server's environment, as JSON."""
    return json.dumps(dict(os.environ), sort_keys=True)


@server.tool()
def grandchild() -> str:
    """Starts a long `sleep` (a grandchild of the client) and returns its process id."""
    return str(subprocess.Popen(["sleep", "300"]).pid)


@server.tool()
async def hang() -> str:
    """Never answers."""
    await asyncio.sleep(3600)
    return "woke up"


def deep_tool(depth: int) -> None:
    """Lists `deep` with a placeholder schema that the writer swaps for `depth` nested objects."""

    def deep(x: str) -> str:
        """A tool whose schema nests very deep."""
        return x

    server.add_tool(deep)
    server._tool_manager.get_tool("deep").parameters = {
        "type": "object",
        "properties": {"x": "__deep__"},
    }
    nested = '{"items":' * depth + "{}" + "}" * depth
    dump = mcp.types.JSONRPCMessage.model_dump_json

    def dump_deep(self, **kwargs):
        return dump(self, **kwargs).replace('"__deep__"', nested)

    mcp.types.JSONRPCMessage.model_dump_json = dump_deep


if __name__ == "__main__":
    if "--deep" in sys.argv:
        deep_tool(int(sys.argv[sys.argv.index("--deep") + 1]))
    if "--mark" in sys.argv:
        with open(sys.argv[sys.argv.index("--mark") + 1], "w") as mark:
            mark.write(str(os.getpid()))
    server.run(transport="streamable-http" if sys.argv[1] == "http" else "stdio")
