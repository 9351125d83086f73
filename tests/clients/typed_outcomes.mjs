// Drives the basket example with the official TypeScript client, which validates every
// successful result's structuredContent against the tool's published output schema and throws
// when it does not match. Usage: node typed_outcomes.mjs http://127.0.0.1:PORT/mcp
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const url = process.argv[2];
if (!url) {
  console.error('usage: node typed_outcomes.mjs URL');
  process.exit(2);
}

const client = new Client({ name: 'mcp-tools-typed-outcomes', version: '1.0.0' });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));

const { tools } = await client.listTools();
const stateful = tools.filter((tool) => tool._meta?.['io.github.mcp-tools/state']);
if (stateful.length < 7) throw new Error(`expected the seven basket tools, got ${tools.map((t) => t.name)}`);

let checked = 0;
async function call(name, args, expect) {
  const result = await client.callTool({ name, arguments: args });
  const outcome = result.structuredContent?.outcome;
  if (outcome !== expect) {
    throw new Error(`${name}: expected ${expect}, got ${JSON.stringify(result)}`);
  }
  if (!result.isError) checked += 1;
  return result.structuredContent;
}

// Callers here are anonymous, so operation ids must be unguessable: UUIDs.
const id = (tag) => `${tag}-${crypto.randomUUID()}`;
const created = await call('basket_create', { operation_id: id('create') }, 'applied');
const basket = created.handle;
const read = await call('basket_get', { basket_id: basket }, 'current');
await call('basket_upgrade_memory', { basket_id: basket, expected_version: read.version, operation_id: id('up'), memory_gib: 32 }, 'applied');
await call('basket_upgrade_memory', { basket_id: basket, expected_version: read.version, operation_id: id('up'), memory_gib: 64 }, 'stale_view');
await call('basket_upgrade_storage', { basket_id: basket, expected_version: read.version, operation_id: id('st'), storage_gib: 1024 }, 'applied');
const note = id('note');
await call('basket_add_note', { basket_id: basket, operation_id: note, text: 'rush' }, 'applied');
await call('basket_add_note', { basket_id: basket, operation_id: note, text: 'rush' }, 'replayed');
const since = await call('basket_get', { basket_id: basket, basis_version: read.resumption.validator }, 'current');
if (!since.changes || since.changes.delta.length === 0) throw new Error(`no changes since 1: ${JSON.stringify(since)}`);
const now = await call('basket_get', { basket_id: basket }, 'current');
await call('basket_replace_configuration', { basket_id: basket, expected_version: now.resumption.validator, operation_id: id('rc'), memory_gib: 128, storage_gib: 2048 }, 'applied');
await call('basket_upgrade_memory', { basket_id: basket, expected_version: 99, operation_id: id('up'), memory_gib: 256 }, 'rejected');
const last = await call('basket_get', { basket_id: basket }, 'current');
await call('basket_checkout', { basket_id: basket, expected_version: last.version, operation_id: id('co') }, 'applied');
await call('basket_add_note', { basket_id: basket, operation_id: id('note'), text: 'late' }, 'rejected');

await client.close();
console.log(`TypeScript client: ${checked} successful outcomes validated against their tools' output schemas`);
