"""An MCP server (official Python SDK) whose one tool never answers, for the chat's tests.

python hang_server.py PIDFILE: writes its process id to PIDFILE, then serves over stdio.
The tool blocks the server's only thread, so it ignores cancellation and everything else.
"""
import os
import sys
import time

from mcp.server.fastmcp import FastMCP

server = FastMCP("colloquy-hang")


@server.tool()
def wait_forever() -> str:
    """Never answers."""
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    with open(sys.argv[1], "w") as mark:
        mark.write(str(os.getpid()))
    server.run(transport="stdio")
