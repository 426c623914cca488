// The official TypeScript SDK peer of Tidemark's benchmark: Node's http
// server, one McpServer and one StreamableHTTPServerTransport per session
// (the SDK's documented stateful pattern), each transport with the SDK's
// InMemoryEventStore for resumption, serving the countdown tool with
// internal/demo's behaviour (one notifications/progress per step when the
// call carries a progress token, then "countdown of N finished").
//
// Usage: node server.mjs --port PORT --node-modules DIR
//   DIR is the node_modules directory holding @modelcontextprotocol/sdk 1.x
//   and zod (default: $BENCH_NODE_MODULES). The URL is printed on stdout.
import http from 'node:http';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';

function flag(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const port = Number(flag('port', '0'));
const modulesDir = flag('node-modules', process.env.BENCH_NODE_MODULES);
if (!modulesDir) {
  console.error('server.mjs: --node-modules DIR (or BENCH_NODE_MODULES) is required');
  process.exit(2);
}
// Resolve packages from modulesDir rather than from this file's directory.
const require = createRequire(path.join(path.resolve(modulesDir), 'resolve-here.js'));
const { McpServer } = require('@modelcontextprotocol/sdk/server/mcp.js');
const { StreamableHTTPServerTransport } = require('@modelcontextprotocol/sdk/server/streamableHttp.js');
const { InMemoryEventStore } = require('@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js');
const { isInitializeRequest } = require('@modelcontextprotocol/sdk/types.js');
const { z } = require('zod');

const MAX_STEPS = 1000000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function newServer() {
  const server = new McpServer({ name: 'ts-peer', version: '1.0.0' });
  server.registerTool(
    'countdown',
    {
      description: 'Counts n steps, sending one progress notification per step, then returns.',
      inputSchema: {
        n: z.number().int().min(1).max(MAX_STEPS).describe('number of steps, 1 to 1000000'),
        delay_ms: z.number().int().min(0).max(60000).optional().describe('pause before each step, in milliseconds'),
      },
    },
    async ({ n, delay_ms }, extra) => {
      const token = extra._meta?.progressToken;
      for (let step = 1; step <= n; step++) {
        if (delay_ms > 0) await sleep(delay_ms);
        if (extra.signal.aborted) throw new Error('cancelled');
        if (token !== undefined) {
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken: token, progress: step, total: n, message: `step ${step} of ${n}` },
          });
        }
      }
      return { content: [{ type: 'text', text: `countdown of ${n} finished` }] };
    },
  );
  return server;
}

const sessions = new Map(); // session ID → transport

function jsonError(res, status, code, message) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
}

async function handle(req, res) {
  const sid = req.headers['mcp-session-id'];
  if (req.method === 'POST') {
    let body;
    try {
      body = JSON.parse(await readBody(req));
    } catch {
      return jsonError(res, 400, -32700, 'Parse error');
    }
    if (sid) {
      const t = sessions.get(sid);
      if (!t) return jsonError(res, 404, -32001, 'Session not found');
      return t.handleRequest(req, res, body);
    }
    if (!isInitializeRequest(body)) return jsonError(res, 400, -32000, 'Bad Request: No valid session ID provided');
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore: new InMemoryEventStore(),
      onsessioninitialized: (id) => sessions.set(id, transport),
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    await newServer().connect(transport);
    return transport.handleRequest(req, res, body);
  }
  if (req.method === 'GET' || req.method === 'DELETE') {
    if (!sid) return jsonError(res, 400, -32000, 'Missing session ID');
    const t = sessions.get(sid);
    if (!t) return jsonError(res, 404, -32001, 'Session not found');
    return t.handleRequest(req, res);
  }
  return jsonError(res, 405, -32000, 'Method not allowed');
}

const httpServer = http.createServer((req, res) => {
  handle(req, res).catch((err) => {
    console.error('server.mjs: request failed:', err);
    if (!res.headersSent) jsonError(res, 500, -32603, 'Internal server error');
  });
});
httpServer.keepAliveTimeout = 60000;
httpServer.listen(port, '127.0.0.1', () => {
  console.log(`listening http://127.0.0.1:${httpServer.address().port}/mcp`);
});
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(0));
