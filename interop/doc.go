// Package interop checks Tidemark against MCP clients it did not write,
// each driven as its users drive it against a real `tidemark serve`: the
// TypeScript SDK client (run by Node.js 22, script in ts/), the MCP
// Inspector CLI, mcp-remote, the official Go SDK client and mcp-go's. A
// relay between client and server records every exchange, cuts a stream
// after a chosen progress notification, and holds requests while the
// server restarts (kill -9, or SIGTERM, and the same command again); the
// tests assert what each client does with a cut, a 409, a 404 and the
// sessionless 2026-07-28 protocol, which docs/clients.md ("What MCP
// clients do with Tidemark's answers") states with the test behind each
// row. The package also runs README's curl walkthrough ("One session with
// curl") as written.
//
// It has only tests; run scripts/deps.sh first (or scripts/test.sh) for
// Node.js and the npm packages.
package interop
