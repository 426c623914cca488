// Package interop checks Tidemark against MCP clients it did not write: the
// official TypeScript SDK client (run by Node.js 22, script in ts/) and the
// official Go SDK client, each resuming a progress stream that a fault
// proxy cuts. It has only tests; run scripts/deps.sh first (or
// scripts/test.sh) for Node.js and the TypeScript SDK.
package interop
