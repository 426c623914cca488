// steps.mjs drives the official MCP TypeScript SDK client
// (@modelcontextprotocol/sdk, Client with StreamableHTTPClientTransport)
// through a list of steps against one server, as an application would, and
// reports what the client did, one JSON object per line on stdout:
//
//   {"step":0,"connected":true,"sessionId":"…","protocolVersion":"2025-11-25","ms":12}
//   {"step":1,"progress":3,"total":50}
//   {"step":1,"result":"countdown of 50 finished","ms":1042}
//   {"step":1,"error":"…","code":-32001,"name":"McpError","ms":3001,"sinceProgressMs":2001}
//   {"transportError":"…","ms":2040}          each error the transport reports
//
// ms counts from the start of the step (transport errors: of the script);
// sinceProgressMs from the step's last progress notification, if any.
//
// Usage: node steps.mjs URL STEPS_JSON
// STEPS_JSON is an object:
//   {"reconnection": {...},  StreamableHTTPClientTransport reconnectionOptions (default: the SDK's)
//    "steps": [              run in order; a failed step does not stop the next
//      {"connect": true},    a new Client and transport; connect() initializes
//      {"call": "countdown", "args": {"n": 50, "delay_ms": 20},
//       "progress": true,    give the call a progress token and report progress
//       "timeout": 3000},    request timeout in ms (absent: the SDK's 60 s default);
//                            with progress, each notification restarts it
//      {"await": true},      wait for a line on stdin (the test's go-ahead)
//      {"close": true}]}     close the client (no DELETE)
//
// Its imports resolve from a node_modules directory next to it: the Go tests
// run a copy through testenv.NodeScript. Exit status 0 once every step ran
// (whatever each one's outcome), 2 on a usage error.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createInterface } from 'node:readline';

const [url, spec] = process.argv.slice(2);
if (!url || !spec) {
  console.error('usage: node steps.mjs URL STEPS_JSON');
  process.exit(2);
}
const config = JSON.parse(spec);
const started = Date.now();
const print = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

let client;
let closing = false;
const stdinLines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function connect(step, t0) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    reconnectionOptions: config.reconnection,
  });
  client = new Client({ name: 'tidemark-interop-ts', version: '1.0.0' });
  // close() aborts the open streams, which the transport reports as errors
  // too; only errors before it are worth reporting.
  closing = false;
  client.onerror = (err) => {
    if (!closing) print({ transportError: String(err?.message ?? err), ms: Date.now() - started });
  };
  await client.connect(transport);
  print({
    step,
    connected: true,
    sessionId: transport.sessionId ?? null,
    protocolVersion: transport.protocolVersion ?? null,
    ms: Date.now() - t0,
  });
}

let lastProgress;

async function call(step, s) {
  const options = {};
  if (s.timeout !== undefined) options.timeout = s.timeout;
  if (s.progress) {
    options.onprogress = (p) => {
      lastProgress = Date.now();
      print({ step, progress: p.progress, total: p.total });
    };
    options.resetTimeoutOnProgress = true;
  }
  const result = await client.callTool({ name: s.call, arguments: s.args ?? {} }, undefined, options);
  const text = result.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
  return { result: text, isError: result.isError ?? false };
}

for (const [i, s] of config.steps.entries()) {
  const step = i;
  const t0 = Date.now();
  lastProgress = undefined;
  try {
    if (s.connect) {
      await connect(step, t0);
    } else if (s.await) {
      await stdinLines.next();
      print({ step, awaited: true, ms: Date.now() - t0 });
    } else if (s.close) {
      closing = true;
      await client.close();
      print({ step, closed: true, ms: Date.now() - t0 });
    } else if (s.call) {
      const out = await call(step, s);
      print({ step, ...out, ms: Date.now() - t0 });
    } else {
      throw new Error(`step ${i}: unknown ${JSON.stringify(s)}`);
    }
  } catch (err) {
    const now = Date.now();
    print({
      step,
      error: String(err?.message ?? err),
      code: err?.code ?? null,
      name: err?.constructor?.name ?? null,
      ms: now - t0,
      sinceProgressMs: lastProgress === undefined ? null : now - lastProgress,
    });
  }
}
closing = true;
await client?.close();
process.exit(0);
