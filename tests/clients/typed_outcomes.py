"""Drives the basket example with the official Python client (`mcp` on PyPI), which validates
every successful result's structuredContent against the tool's published output schema and
raises when it does not match; a checkout planned on an old version goes through the
reconfirmation elicitation, answered by this client's elicitation callback.

Usage: python typed_outcomes.py http://127.0.0.1:PORT/mcp
"""

import asyncio
import os
import sys
import uuid

import mcp_types as types
from mcp import Client

checked = 0
asked = []


def op(tag):
    return f"{tag}-{uuid.uuid4()}"


async def confirm(context, params):
    asked.append(params.message)
    return types.ElicitResult(action="accept", content={"confirm": True})


async def call(client, name, arguments, expect):
    global checked
    result = await client.call_tool(name, arguments)
    outcome = (result.structured_content or {}).get("outcome")
    if outcome != expect:
        raise SystemExit(f"{name}: expected {expect}, got {result}")
    if not result.is_error:
        checked += 1
    return result.structured_content


async def main(url):
    async with Client(url, elicitation_callback=confirm) as client:
        tools = (await client.list_tools()).tools
        stateful = [t for t in tools if (t.meta or {}).get("io.github.mcp-tools/state")]
        if len(stateful) < 7:
            raise SystemExit(f"expected the seven basket tools, got {[t.name for t in tools]}")
        created = await call(client, "basket_create", {"operation_id": op("create")}, "applied")
        basket = created["handle"]
        read = await call(client, "basket_get", {"basket_id": basket}, "current")
        await call(client, "basket_upgrade_memory", {"basket_id": basket, "expected_version": read["resumption"]["validator"], "operation_id": op("up"), "memory_gib": 32}, "applied")
        await call(client, "basket_upgrade_memory", {"basket_id": basket, "expected_version": 1, "operation_id": op("up"), "memory_gib": 64}, "stale_view")
        note = op("note")
        await call(client, "basket_add_note", {"basket_id": basket, "operation_id": note, "text": "rush"}, "applied")
        await call(client, "basket_add_note", {"basket_id": basket, "operation_id": note, "text": "rush"}, "replayed")
        since = await call(client, "basket_get", {"basket_id": basket, "basis_version": 1}, "current")
        if not since.get("changes", {}).get("delta"):
            raise SystemExit(f"no changes since version 1: {since}")
        # Planned on version 1, the basket is at 3: the client is asked, confirms, and the
        # checkout applies to the version it confirmed.
        checkout = await call(client, "basket_checkout", {"basket_id": basket, "expected_version": 1, "operation_id": op("co")}, "applied")
        if len(asked) != 1 or "now at version 3" not in asked[0]:
            raise SystemExit(f"expected one reconfirmation at version 3, got {asked}")
        if checkout["version"] != 4:
            raise SystemExit(f"the checkout applied at {checkout['version']}, not 4")
        await call(client, "basket_add_note", {"basket_id": basket, "operation_id": op("note"), "text": "late"}, "rejected")
    print(f"Python client: {checked} successful outcomes validated against their tools' output schemas; reconfirmed: {asked[0]}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python typed_outcomes.py URL")
    asyncio.run(main(sys.argv[1]))
