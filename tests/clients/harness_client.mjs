// Drives the drop-in harness with the official TypeScript client: the client runs
// `HARNESS harness --upstream URL --records FILE` as its stdio server, and the harness relays to
// the basket server over HTTP through a link this script can make lose an answer. Twice: as the
// client connects by default (the 2025-11-25 `initialize` handshake) and with version
// negotiation (2026-07-28). Each time the client calls the stateful tools without
// operation_id or expected_version, a lost answer is retried once and applied once, and a
// client started again on the same records goes on from what it was shown.
// Usage: node harness_client.mjs PATH/TO/HARNESS http://127.0.0.1:PORT/mcp RECORDS_DIR
import net from 'node:net';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const [harness, upstream, recordsDir] = process.argv.slice(2);
if (!harness || !upstream || !recordsDir) {
  console.error('usage: node harness_client.mjs PATH/TO/HARNESS UPSTREAM_URL RECORDS_DIR');
  process.exit(2);
}

// A link to the server that, when asked, loses the next answer once the server has sent it.
const target = new URL(upstream);
let loseNext = false;
const link = net.createServer((client) => {
  const server = net.connect(Number(target.port), target.hostname);
  client.on('data', (chunk) => server.write(chunk));
  server.on('data', (chunk) => {
    if (loseNext) {
      loseNext = false;
      client.destroy();
      server.destroy();
      return;
    }
    client.write(chunk);
  });
  const close = () => {
    client.destroy();
    server.destroy();
  };
  client.on('error', close);
  server.on('error', close);
  client.on('close', close);
  server.on('close', close);
});
await new Promise((resolve) => link.listen(0, '127.0.0.1', resolve));
const linked = `http://127.0.0.1:${link.address().port}${target.pathname}`;

// Another agent, straight to the server, naming what it must.
const other = new Client({ name: 'other-agent', version: '1.0.0' });
await other.connect(new StreamableHTTPClientTransport(new URL(upstream)));

function outcome(result) {
  return result.structuredContent?.outcome;
}

function expect(result, wanted, what) {
  if (outcome(result) !== wanted) throw new Error(`${what}: expected ${wanted}, got ${JSON.stringify(result)}`);
  return result.structuredContent;
}

async function host(options, records) {
  const client = new Client({ name: 'harness-host', version: '1.0.0' }, options);
  await client.connect(
    new StdioClientTransport({ command: harness, args: ['harness', '--upstream', linked, '--records', records] }),
  );
  return client;
}

async function run(options, mode) {
  const records = `${recordsDir}/ts-${mode}.json`;
  let client = await host(options, records);
  const { tools } = await client.listTools();
  const upgrade = tools.find((tool) => tool.name === 'basket_upgrade_memory');
  if (upgrade.inputSchema.required.includes('operation_id')) {
    throw new Error(`operation_id is still required: ${JSON.stringify(upgrade.inputSchema)}`);
  }
  if (!upgrade.inputSchema.properties.expected_version.description.includes('harness')) {
    throw new Error('expected_version does not say the harness supplies it');
  }

  const basket = expect(await client.callTool({ name: 'basket_create', arguments: {} }), 'applied', 'create').handle;
  expect(await client.callTool({ name: 'basket_get', arguments: { basket_id: basket } }), 'current', 'read');
  expect(
    await client.callTool({ name: 'basket_upgrade_memory', arguments: { basket_id: basket, memory_gib: 32 } }),
    'applied',
    'an upgrade without operation_id or expected_version',
  );

  loseNext = true;
  const noted = await client.callTool({ name: 'basket_add_note', arguments: { basket_id: basket, text: 'once' } });
  expect(noted, 'replayed', 'a note whose answer was lost');
  const seen = expect(await other.callTool({ name: 'basket_get', arguments: { basket_id: basket } }), 'current', 'read');
  const notes = (seen.state.notes.items ?? []).map((note) => note.value);
  if (JSON.stringify(notes) !== '["once"]' || seen.version !== 3) {
    throw new Error(`the note was not applied exactly once: ${JSON.stringify(seen)}`);
  }
  await client.close();

  // Meanwhile, another agent upgrades the memory.
  expect(
    await other.callTool({
      name: 'basket_upgrade_memory',
      arguments: { basket_id: basket, memory_gib: 48, expected_version: seen.version, operation_id: crypto.randomUUID() },
    }),
    'applied',
    "the other agent's upgrade",
  );

  // Started again on its records, the host goes on from version 3, what it was shown.
  client = await host(options, records);
  const stale = await client.callTool({ name: 'basket_upgrade_memory', arguments: { basket_id: basket, memory_gib: 64 } });
  const refused = expect(stale, 'stale_view', 'a change planned before the restart');
  if (refused.expected_version !== 3 || refused.current_version !== 4) {
    throw new Error(`the restarted host did not go on from version 3: ${JSON.stringify(refused)}`);
  }
  await client.close();
  console.log(`TypeScript client (${mode}) through the drop-in harness: no ids or versions sent, a lost answer replayed and applied once, a restart resumed from version 3`);
}

await run({}, 'initialize');
await run({ versionNegotiation: { mode: 'auto' } }, '2026-07-28');
await other.close();
link.close();
