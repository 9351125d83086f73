"""Drives the drop-in harness with the official Python client (`mcp` on PyPI): the client runs
`HARNESS harness --upstream URL --records FILE` as its stdio server, and the harness relays to
the basket server over HTTP through a link this script can make lose an answer. Twice: with the
2025-11-25 handshake (mode "legacy") and with discovery (mode "auto", 2026-07-28). Each time the
client calls the stateful tools without operation_id or expected_version, a lost answer is
retried once and applied once, and a client started again on the same records goes on from what
it was shown.

Usage: python harness_client.py PATH/TO/HARNESS http://127.0.0.1:PORT/mcp RECORDS_DIR
"""

import asyncio
import sys
import uuid
from urllib.parse import urlparse

from mcp import Client, StdioServerParameters


class Link:
    """A TCP link to the server that, when asked, loses the next answer once the server sent it."""

    def __init__(self, upstream):
        target = urlparse(upstream)
        self.host, self.port, self.path = target.hostname, target.port, target.path
        self.lose_next = False

    async def start(self):
        self.server = await asyncio.start_server(self.relay, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}{self.path}"

    async def relay(self, client_reader, client_writer):
        server_reader, server_writer = await asyncio.open_connection(self.host, self.port)

        async def requests():
            while data := await client_reader.read(65536):
                server_writer.write(data)
                await server_writer.drain()

        async def answers():
            while data := await server_reader.read(65536):
                if self.lose_next:
                    self.lose_next = False
                    return
                client_writer.write(data)
                await client_writer.drain()

        tasks = [asyncio.create_task(requests()), asyncio.create_task(answers())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except ConnectionError:
            pass
        for task in tasks:
            task.cancel()
        for writer in (client_writer, server_writer):
            writer.close()


def expect(result, wanted, what):
    outcome = (result.structured_content or {}).get("outcome")
    if outcome != wanted:
        raise SystemExit(f"{what}: expected {wanted}, got {result}")
    return result.structured_content


def host(harness, linked, records, mode):
    parameters = StdioServerParameters(
        command=harness, args=["harness", "--upstream", linked, "--records", records]
    )
    return Client(parameters, mode=mode)


async def run(harness, upstream, linked, link, records, mode):
    async with host(harness, linked, records, mode) as client:
        tools = (await client.list_tools()).tools
        upgrade = next(tool for tool in tools if tool.name == "basket_upgrade_memory")
        if "operation_id" in upgrade.input_schema.get("required", []):
            raise SystemExit(f"operation_id is still required: {upgrade.input_schema}")
        basket = expect(await client.call_tool("basket_create", {}), "applied", "create")["handle"]
        expect(await client.call_tool("basket_get", {"basket_id": basket}), "current", "read")
        expect(
            await client.call_tool("basket_upgrade_memory", {"basket_id": basket, "memory_gib": 32}),
            "applied",
            "an upgrade without operation_id or expected_version",
        )
        link.lose_next = True
        noted = await client.call_tool("basket_add_note", {"basket_id": basket, "text": "once"})
        expect(noted, "replayed", "a note whose answer was lost")

    async with Client(upstream) as other:
        seen = expect(await other.call_tool("basket_get", {"basket_id": basket}), "current", "read")
        notes = [note["value"] for note in seen["state"]["notes"].get("items", [])]
        if notes != ["once"] or seen["version"] != 3:
            raise SystemExit(f"the note was not applied exactly once: {seen}")
        expect(
            await other.call_tool(
                "basket_upgrade_memory",
                {"basket_id": basket, "memory_gib": 48, "expected_version": 3, "operation_id": str(uuid.uuid4())},
            ),
            "applied",
            "the other agent's upgrade",
        )

    async with host(harness, linked, records, mode) as client:
        stale = await client.call_tool("basket_upgrade_memory", {"basket_id": basket, "memory_gib": 64})
        refused = expect(stale, "stale_view", "a change planned before the restart")
        if refused["expected_version"] != 3 or refused["current_version"] != 4:
            raise SystemExit(f"the restarted host did not go on from version 3: {refused}")
    print(
        f"Python client ({mode}) through the drop-in harness: no ids or versions sent, "
        "a lost answer replayed and applied once, a restart resumed from version 3"
    )


async def main(harness, upstream, records_dir):
    link = Link(upstream)
    linked = await link.start()
    for mode in ("legacy", "auto"):
        await run(harness, upstream, linked, link, f"{records_dir}/py-{mode}.json", mode)
    link.server.close()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit("usage: python harness_client.py PATH/TO/HARNESS UPSTREAM_URL RECORDS_DIR")
    asyncio.run(main(*sys.argv[1:]))
