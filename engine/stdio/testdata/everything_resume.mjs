// everything_resume.mjs drives `tidemark serve --stdio` fronting the
// reference server @modelcontextprotocol/server-everything with the official
// MCP TypeScript SDK client: it lists the tools, then calls the long-running
// tool with a progress token and reports what the client saw, one JSON
// object per line on stdout:
//
//   {"tools":["echo",...]}                   the tool names, sorted
//   {"progress":K,"total":N}                 one per progress notification
//   {"result":"Long running ...","isError":false}
//   {"transportError":"..."}                 each error the transport reports
//
// Usage: node everything_resume.mjs URL STEPS SECONDS   (Node.js 22)
// gateway_test.go runs a copy through testenv.NodeScript, whose
// node_modules holds the SDK. Exit status: 0 after the result, 1 on any
// failure (message on stderr).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, steps, seconds] = process.argv.slice(2);
if (!url || !steps || !seconds) {
  console.error('usage: node everything_resume.mjs URL STEPS SECONDS');
  process.exit(2);
}
const print = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

const transport = new StreamableHTTPClientTransport(new URL(url), {
  // Short delays; the server's SSE retry field takes precedence once a
  // stream has carried one.
  reconnectionOptions: {
    initialReconnectionDelay: 50,
    maxReconnectionDelay: 500,
    reconnectionDelayGrowFactor: 1.5,
    maxRetries: 5,
  },
});
const client = new Client({ name: 'tidemark-gateway-ts', version: '1.0.0' });
client.onerror = (err) => print({ transportError: String(err?.message ?? err) });

try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  print({ tools: tools.map((t) => t.name).sort() });
  const result = await client.callTool(
    { name: 'trigger-long-running-operation', arguments: { duration: Number(seconds), steps: Number(steps) } },
    undefined,
    {
      onprogress: (p) => print({ progress: p.progress, total: p.total }),
      // Progress proves the call is alive; 10 s without any fails it.
      timeout: 10_000,
      resetTimeoutOnProgress: true,
    },
  );
  const text = result.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
  print({ result: text, isError: result.isError ?? false });
  await transport.terminateSession();
  await client.close();
} catch (err) {
  console.error(`everything_resume.mjs: ${err?.stack ?? err}`);
  process.exit(1);
}
