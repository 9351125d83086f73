// The official TypeScript client's cost to the process that calls, as `client_overhead.rs`
// measures the Rust client's: CPU time of this process (user + system) and wall time per call of
// `add` on the quickstart, sequential and from 32 concurrent callers, over 2026-07-28.
// Usage: node client_overhead.mjs QUICKSTART_URL [CALLS]
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const url = process.argv[2];
const calls = Number(process.argv[3] ?? 20000);
if (!url) {
  console.error('usage: node client_overhead.mjs QUICKSTART_URL [CALLS]');
  process.exit(2);
}

const client = new Client({ name: 'client-overhead', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const add = { name: 'add', arguments: { a: 2, b: 3 } };

async function measure(label, count, run) {
  const wall = process.hrtime.bigint();
  const cpu = process.cpuUsage();
  await run(count);
  const used = process.cpuUsage(cpu);
  const elapsed = Number(process.hrtime.bigint() - wall) / 1000;
  const per = (micros) => (micros / count).toFixed(1).padStart(8);
  console.log(`${label.padEnd(28)} ${String(count).padStart(8)} calls  ${per(elapsed)} µs wall/call  ${per(used.user + used.system)} µs CPU/call`);
}

for (let i = 0; i < 1000; i += 1) await client.callTool(add);
await measure('ts client add, sequential', calls, async (count) => {
  for (let i = 0; i < count; i += 1) {
    const sum = await client.callTool(add);
    if (sum.structuredContent?.sum !== 5) throw new Error(JSON.stringify(sum));
  }
});
await measure('ts client add, 32 concurrent', calls, async (count) => {
  const share = (task) => Math.floor(count / 32) + (task < count % 32 ? 1 : 0);
  await Promise.all(
    Array.from({ length: 32 }, async (_, task) => {
      for (let i = 0; i < share(task); i += 1) await client.callTool(add);
    }),
  );
});
await client.close();
