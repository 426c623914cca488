// tasks.mjs runs one tool call as a task with the official Tasks client,
// @modelcontextprotocol/ext-tasks (createTaskSessionFromClient on the
// TypeScript SDK's Client, @modelcontextprotocol/client), against one
// server of protocol 2026-07-28, and reports what it saw, one JSON object
// per line on stdout:
//
//   {"connected":true,"era":"modern","tasks":true,"ms":40}
//   {"dispatch":"tools/call","attempt":1,"resultType":"task","status":"working","ms":3}
//   {"dispatch":"tasks/get","attempt":1,"status":"working","ms":2}
//   {"dispatch":"tasks/get","attempt":1,"networkError":"fetch failed","ms":1}
//   {"execution":"task","taskId":"…"}
//   {"event":"working"}                      each task status settle() reported
//   {"outcome":"completed","text":"countdown of 5 finished","isError":false,"ms":5012}
//   {"outcome":"failed","code":-32603,"message":"…","data":{…},"ms":2200}
//   {"outcome":"cancelled","ms":…}
//   {"thrown":"…","name":"…","ms":…}          settle() itself threw
//
// ms counts from the start of the step (connect, one dispatch attempt, or
// the call until its outcome).
//
// ext-tasks speaks the 2026-07-28 task wire only through a request path
// the host owns (rawDispatch, with v2RequestFraming: the per-request _meta
// it adds to tools/call and tasks/*), because the SDK Client's result
// schemas reject a CreateTaskResult. This script's host coordinator sends
// those requests through the Client's own StreamableHTTPClientTransport
// (which sets MCP-Protocol-Version, Mcp-Method and Mcp-Name from the body),
// with request IDs of its own, and takes their responses off the
// transport before the Client sees them.
//
// A request that does not reach the server (connection refused while a
// server restarts) is, for tasks/* only, sent again every 100 ms until
// retryMs has passed since its first attempt; after that, and for
// tools/call always, it fails with a DispatchError (retryable for tasks/*,
// which ext-tasks sends once more). tools/call is never sent twice.
//
// Usage: node tasks.mjs URL CONFIG_JSON
// CONFIG_JSON: {"tool": "countdown", "args": {"n": 50, "delay_ms": 100},
//               "retryMs": 20000}
//
// Its imports resolve from a node_modules directory next to it: the Go tests
// run a copy through testenv.NodeScript. Exit status 0 once the call has an
// outcome (whatever it is), 1 when connecting fails, 2 on a usage error.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import {
  createTaskSessionFromClient,
  DispatchError,
  resultFromTaskOutcome,
} from '@modelcontextprotocol/ext-tasks/client';

const [url, spec] = process.argv.slice(2);
if (!url || !spec) {
  console.error('usage: node tasks.mjs URL CONFIG_JSON');
  process.exit(2);
}
const config = JSON.parse(spec);
const print = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

const PROTOCOL_VERSION = '2026-07-28';
const clientInfo = { name: 'tidemark-interop-ext-tasks', version: '1.0.0' };
const clientCapabilities = {};

const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client(clientInfo, {
  capabilities: clientCapabilities,
  versionNegotiation: { mode: { pin: PROTOCOL_VERSION } },
});

let t0 = Date.now();
try {
  await client.connect(transport);
} catch (err) {
  print({ connectError: String(err?.message ?? err), name: err?.name, ms: Date.now() - t0 });
  process.exit(1);
}
const tasksOffered =
  client.getServerCapabilities()?.extensions?.['io.modelcontextprotocol/tasks'] !== undefined;
print({ connected: true, era: client.getProtocolEra(), tasks: tasksOffered, ms: Date.now() - t0 });

// The host coordinator: request IDs of its own, responses matched on the
// transport before the Client's handler.
const pending = new Map();
let nextID = 0;
const clientOnMessage = transport.onmessage;
transport.onmessage = (message, extra) => {
  if (message && 'id' in message && !('method' in message) && pending.has(message.id)) {
    const settle = pending.get(message.id);
    pending.delete(message.id);
    settle(message);
    return;
  }
  clientOnMessage?.call(transport, message, extra);
};

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function rawDispatch(request, options = {}) {
  const method = request.method;
  const first = Date.now();
  for (let attempt = 1; ; attempt++) {
    const id = `ext-tasks-${++nextID}`;
    const started = Date.now();
    const answered = new Promise((resolve) => pending.set(id, resolve));
    try {
      await transport.send({ jsonrpc: '2.0', id, method, params: request.params }, {
        headers: options.context?.headers,
        requestSignal: options.signal,
      });
    } catch (err) {
      pending.delete(id);
      const networkError = String(err?.message ?? err);
      print({ dispatch: method, attempt, networkError, ms: Date.now() - started });
      const task = method.startsWith('tasks/');
      if (task && Date.now() - first < (config.retryMs ?? 0) && !options.signal?.aborted) {
        await sleep(100);
        continue;
      }
      throw new DispatchError(`${method}: ${networkError}`, task, { cause: err });
    }
    const response = await answered;
    const ms = Date.now() - started;
    if (response.error) {
      print({ dispatch: method, attempt, code: response.error.code, message: response.error.message, ms });
      return { kind: 'error', error: response.error };
    }
    const r = response.result ?? {};
    print({ dispatch: method, attempt, resultType: r.resultType, status: r.status, ms });
    return { kind: 'result', result: response.result };
  }
}

const session = createTaskSessionFromClient(client, {
  endpointId: url,
  rawDispatch,
  v2RequestFraming: { protocolVersion: PROTOCOL_VERSION, clientInfo, clientCapabilities },
});

t0 = Date.now();
try {
  const execution = await session.callTool(config.tool, config.args ?? {});
  print({ execution: execution.kind, taskId: execution.handle?.taskId ?? null });
  const { outcome } = await execution.settle({
    onEvent: (event) => {
      if (event.type === 'task') print({ event: event.task.status });
    },
  });
  const ms = Date.now() - t0;
  switch (outcome.status) {
    case 'completed': {
      const result = resultFromTaskOutcome(outcome);
      const text = (result.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');
      print({ outcome: 'completed', text, isError: result.isError ?? false, ms });
      break;
    }
    case 'failed':
      print({
        outcome: 'failed',
        code: outcome.error.code ?? null,
        message: outcome.error.message,
        data: outcome.error.data ?? null,
        ms,
      });
      break;
    default:
      print({ outcome: outcome.status, ms });
  }
} catch (err) {
  print({ thrown: String(err?.message ?? err), name: err?.name, ms: Date.now() - t0 });
}
await session.close();
await client.close();
process.exit(0);
