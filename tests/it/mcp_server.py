"""A small MCP server on the official Python SDK, for colloquy's MCP tests.

python mcp_server.py stdio [--mark FILE] | python mcp_server.py http PORT (streamable HTTP at
/mcp). With --mark, the server writes its process id to FILE as it starts.
"""
import asyncio
import os
import sys

from mcp.server.fastmcp import Context, FastMCP

port = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] == "http" else 8000
server = FastMCP("colloquy-test", host="127.0.0.1", port=port)


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


if __name__ == "__main__":
    if "--mark" in sys.argv:
        with open(sys.argv[sys.argv.index("--mark") + 1], "w") as mark:
            mark.write(str(os.getpid()))
    server.run(transport="streamable-http" if sys.argv[1] == "http" else "stdio")
