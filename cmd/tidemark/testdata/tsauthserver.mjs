// Runs the TypeScript SDK's example authorization server
// (@modelcontextprotocol/sdk, examples/server/demoInMemoryOAuthProvider:
// dynamic client registration, PKCE, consent given at once, opaque tokens
// and an introspection endpoint at /introspect) for the MCP server at
// MCP_URL, on AUTH_URL. SDK_DIR is the package's directory.
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const mod = pathToFileURL(path.join(process.env.SDK_DIR, 'dist/esm/examples/server/demoInMemoryOAuthProvider.js'));
const { setupAuthServer } = await import(mod.href);
setupAuthServer({ authServerUrl: new URL(process.env.AUTH_URL), mcpServerUrl: new URL(process.env.MCP_URL), strictResource: true });
