"""Drives the quickstart example over stdio with the official Python client (`mcp` on PyPI):
the client spawns the server as its child process, lists its tools, calls `add` and checks the
structured result, then closes stdin and expects the server to exit on its own.

Usage: python stdio_client.py PATH/TO/quickstart
"""

import asyncio
import sys

from mcp import Client, StdioServerParameters


async def main(binary):
    server = StdioServerParameters(command=binary, args=["--stdio"])
    async with Client(server) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        if names != ["add", "echo", "whoami"]:
            raise SystemExit(f"expected the quickstart's tools, got {names}")
        result = await client.call_tool("add", {"a": 20, "b": 22})
        if result.is_error or result.structured_content != {"sum": 42}:
            raise SystemExit(f"add(20, 22): {result}")
        echoed = await client.call_tool("echo", {"text": "line one\nline two"})
        if echoed.is_error or echoed.content[0].text != "line one\nline two":
            raise SystemExit(f"echo: {echoed}")
        who = (await client.call_tool("whoami", {})).content[0].text
        if not who.endswith("speaking MCP 2026-07-28"):
            raise SystemExit(f"expected the 2026-07-28 revision over stdio, got {who!r}")
    print(f"Python client over stdio: listed {names}, add(20, 22) = 42; {who}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python stdio_client.py PATH/TO/quickstart")
    asyncio.run(main(sys.argv[1]))
