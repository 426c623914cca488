// tools.mjs calls every tool of Tidemark's demo server (`tidemark serve`)
// with the official MCP TypeScript SDK client at its default protocol
// version, answering confirm's question with "confirmed", and reports what
// it saw, one JSON object per line on stdout. Given several URLs (the
// replicas of a fleet), it sends each HTTP request to the next of them in
// turn.
//
//   {"protocolVersion":"2025-11-25"}                 what the client negotiated
//   {"tool":"countdown","text":"...","isError":false,"progress":[1,2,3]}
//   {"tool":"echo","text":"hello","isError":false}
//   {"tool":"confirm","text":"accepted","isError":false,"asked":["Proceed?"]}
//   {"tool":"notify","text":"notified notifications/tools/list_changed","isError":false}
//
// Usage: node tools.mjs URL [URL...]   (Node.js 22, from scripts/deps.sh; run by
// demo_test.go through testenv.NodeScript, which provides node_modules)
// Exit status: 0 after the last tool, 1 on any failure (message on stderr).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const urls = process.argv.slice(2).map((u) => new URL(u));
if (urls.length === 0) {
  console.error('usage: node tools.mjs URL [URL...]');
  process.exit(2);
}
let next = 0;
const rotating = (input, init) => {
  const target = new URL(input instanceof Request ? input.url : input);
  target.host = urls[next++ % urls.length].host;
  return fetch(target, init);
};
const print = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
const textOf = (result) => result.content.filter((c) => c.type === 'text').map((c) => c.text).join('');

const client = new Client({ name: 'tidemark-demo-ts', version: '1.0.0' }, { capabilities: { elicitation: {} } });
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params.message);
  return { action: 'accept', content: { confirmed: true } };
});

try {
  const transport = new StreamableHTTPClientTransport(urls[0], { fetch: rotating });
  await client.connect(transport);
  print({ protocolVersion: transport.protocolVersion });

  const progress = [];
  const countdown = await client.callTool({ name: 'countdown', arguments: { n: 3 } }, undefined, {
    onprogress: (p) => progress.push(p.progress),
  });
  print({ tool: 'countdown', text: textOf(countdown), isError: countdown.isError ?? false, progress });

  const echo = await client.callTool({ name: 'echo', arguments: { text: 'hello' } });
  print({ tool: 'echo', text: textOf(echo), isError: echo.isError ?? false });

  const confirm = await client.callTool({ name: 'confirm', arguments: { question: 'Proceed?' } });
  print({ tool: 'confirm', text: textOf(confirm), isError: confirm.isError ?? false, asked });

  const notify = await client.callTool({ name: 'notify', arguments: { method: 'notifications/tools/list_changed' } });
  print({ tool: 'notify', text: textOf(notify), isError: notify.isError ?? false });

  await client.close();
} catch (err) {
  console.error(`tools.mjs: ${err?.stack ?? err}`);
  process.exit(1);
}
