// An agent's MCP client made with the official TypeScript SDK, run by
// e2e/mcp_ts_test.go against the gateway: a call, its retry on a new
// session, and a retry after a dropped answer. It prints one JSON line
// of what it saw; the Go test judges it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const endpoint = new URL(process.argv[2]);
const seen = []; // tools/call exchanges: the request's id, the answer's headers and body

// session opens a new connection and MCP session, as an agent runtime
// does after a failure.
async function session() {
  const fetchAndRecord = async (url, init) => {
    const res = await fetch(url, init);
    let msg;
    try { msg = JSON.parse(init?.body ?? "null"); } catch { msg = null; }
    if (msg && msg.method === "tools/call") {
      const body = await res.clone().text();
      seen.push({ id: msg.id, replayed: res.headers.get("idempotent-replayed"), contentType: res.headers.get("content-type"), body });
    }
    return res;
  };
  const transport = new StreamableHTTPClientTransport(endpoint, {
    fetch: fetchAndRecord,
    requestInit: { headers: { Authorization: "Bearer agent-ts" } },
  });
  const client = new Client({ name: "agent-ts", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

const out = {};
const args = { event_id: "evt-ts", name: "TypeScript deal", amount: 9 };

const first = await session();
out.first = (await first.callTool({ name: "create_deal", arguments: args })).structuredContent;
await first.close();

const retry = await session();
await retry.listTools(); // the retry's JSON-RPC id differs from the first's
out.retry = (await retry.callTool({ name: "create_deal", arguments: args })).structuredContent;
await retry.close();

const dropped = { event_id: "drop-ts", name: "Dropped deal", amount: 1 };
const before = await session();
try {
  await before.callTool({ name: "create_deal", arguments: dropped });
  out.dropped = "answered";
} catch (e) {
  out.dropped = "failed";
}
await before.close().catch(() => {});
const after = await session();
try {
  await after.callTool({ name: "create_deal", arguments: dropped });
  out.held = { answered: true };
} catch (e) {
  out.held = { code: e.code, data: e.data };
}
await after.close();

out.seen = seen;
console.log(JSON.stringify(out));
