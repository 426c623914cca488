// countdown.mjs calls the countdown tool of a Tidemark server (`tidemark
// serve`) with the official MCP TypeScript SDK client and reports what the
// client saw, one JSON object per line on stdout:
//
//   {"progress":K,"total":50}             one per progress notification
//   {"result":"countdown of 50 finished","isError":false}
//   {"transportError":"..."}              each error the transport reports
//                                         (a cut stream reports one)
//
// Usage: node countdown.mjs URL   (Node.js 22, from scripts/deps.sh)
// Its imports resolve from a node_modules directory next to it or above it:
// interop_test.go runs a copy through testenv.NodeScript, which provides
// one. To run it by hand after scripts/deps.sh:
//   ln -s ../../.cache/npm/node_modules interop/ts/node_modules   (gitignored)
//   .cache/npm/node_modules/.bin/node interop/ts/countdown.mjs http://127.0.0.1:8080/mcp
// Exit status: 0 after the result, 1 on any failure (message on stderr).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const url = process.argv[2];
if (!url) {
  console.error('usage: node countdown.mjs URL');
  process.exit(2);
}
const print = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

const transport = new StreamableHTTPClientTransport(new URL(url), {
  // Short delays: the server's SSE retry field (100 ms in the test) takes
  // precedence once a stream has sent one.
  reconnectionOptions: {
    initialReconnectionDelay: 50,
    maxReconnectionDelay: 500,
    reconnectionDelayGrowFactor: 1.5,
    maxRetries: 5,
  },
});
const client = new Client({ name: 'tidemark-interop-ts', version: '1.0.0' });
// close() aborts the open streams, which the transport reports as errors
// too; only errors before it are worth reporting.
let closing = false;
client.onerror = (err) => {
  if (!closing) print({ transportError: String(err?.message ?? err) });
};

try {
  await client.connect(transport);
  const result = await client.callTool(
    { name: 'countdown', arguments: { n: 50, delay_ms: 20 } },
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
  closing = true;
  await client.close();
} catch (err) {
  console.error(`countdown.mjs: ${err?.stack ?? err}`);
  process.exit(1);
}
