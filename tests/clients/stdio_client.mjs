// Drives the quickstart example over stdio with the official TypeScript client: the client
// spawns the server as its child process, lists its tools, calls `add` and checks the structured
// result. Twice: as the client connects by default (the 2025-11-25 `initialize` handshake) and
// with version negotiation, which probes with `server/discover` and speaks 2026-07-28.
// Usage: node stdio_client.mjs PATH/TO/quickstart
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const binary = process.argv[2];
if (!binary) {
  console.error('usage: node stdio_client.mjs PATH/TO/quickstart');
  process.exit(2);
}

async function run(options, version) {
  const client = new Client({ name: 'mcp-tools-stdio', version: '1.0.0' }, options);
  await client.connect(new StdioClientTransport({ command: binary, args: ['--stdio'] }));

  const { tools } = await client.listTools();
  const names = tools.map((tool) => tool.name);
  if (names.join() !== 'add,echo,whoami') throw new Error(`expected the quickstart's tools, got ${names}`);

  const sum = await client.callTool({ name: 'add', arguments: { a: 20, b: 22 } });
  if (sum.isError || sum.structuredContent?.sum !== 42) throw new Error(`add(20, 22): ${JSON.stringify(sum)}`);

  const echoed = await client.callTool({ name: 'echo', arguments: { text: 'line one\nline two' } });
  if (echoed.isError || echoed.content[0].text !== 'line one\nline two') {
    throw new Error(`echo: ${JSON.stringify(echoed)}`);
  }

  const who = (await client.callTool({ name: 'whoami', arguments: {} })).content[0].text;
  if (!who.endsWith(`speaking MCP ${version}`)) throw new Error(`expected revision ${version} over stdio, got ${who}`);
  await client.close();
  console.log(`TypeScript client over stdio: listed ${names}, add(20, 22) = 42; ${who}`);
}

await run({}, '2025-11-25');
await run({ versionNegotiation: { mode: 'auto' } }, '2026-07-28');
