// Package requeststate seals the requestState that an MCP server hands a
// client in an input-required result (multi round-trip requests, SEP-2322;
// MCP 2026-07-28, basic/patterns/mrtr) and opens it when the client retries,
// on this process or on any other replica that holds the same key ring.
//
// The specification makes the state attacker-controlled input: a server
// whose state influences what it does MUST protect its integrity and reject
// a state that fails verification, and SHOULD bind it to the authenticated
// principal, a short lifetime and the originating request. A Sealer does all
// of that:
//
//   - integrity and confidentiality: AES-256-GCM with a random 96-bit nonce
//     (crypto/cipher.NewGCMWithRandomNonce); the client can neither read nor
//     forge a state;
//   - the principal: the go-sdk auth.TokenInfo.UserID of the request, or
//     none when the request is not authenticated;
//   - the lifetime: an absolute expiry, Options.TTL after sealing;
//   - the originating request: its method, its tool or prompt name or
//     resource URI, and a digest of its arguments (see Request);
//   - optionally, single use (Options.Ledger): a state opens once.
//
// Open checks, in this order, and refuses with a JSON-RPC error whose
// error.data.reason is one word of the catalogue (replay/reason.go):
//
//	check                                          code    reason
//	not base64url, wrong version, bad tag          -32602  state_invalid
//	sealed with a key the ring does not hold       -32602  state_key_unknown
//	issued to another principal                    -32602  state_principal_mismatch
//	issued for another method, name or arguments   -32602  state_request_mismatch
//	past its expiry                                -32602  state_expired
//	already used (with a Ledger)                   -32602  state_replayed
//	the Ledger is full                             -32603  capacity
//	the Ledger cannot be reached                   -32603  unavailable
//
// A tool handler returns that error as it is: the go-sdk sends a
// *jsonrpc.Error as the JSON-RPC error of the call instead of a tool result.
//
// # Key ring
//
// A Ring holds one or more 32-byte keys. Every key opens; one key seals: the
// one whose not-before time is the latest that has passed (a key without one
// has been valid for ever; between equal times the later key wins). Replicas
// of a fleet load the same ring (ParseRing's text format, from a file or the
// environment variable EnvKeys), so a retry may land on any of them.
//
// Rotation without refusing states in flight: add the new key with a
// not-before time later than the moment every replica will have loaded the
// new ring, and deploy it. Until that time the old key seals and every
// replica can already open the new key's states; from then on the new key
// seals everywhere, and the old key still opens what it sealed. Once the
// new key's not-before time plus the TTL has passed, no live state needs the
// old key: remove it. A random 96-bit nonce bounds each key to 2^32 seals
// (NIST SP 800-38D, section 8.3); rotate well before that.
//
// # Single use
//
// Binding and expiry bound where and how long a state can be replayed, not
// how often (the specification says so too). A server whose state must be
// consumed at most once gives the Sealer a Ledger, which records each opened
// state until its expiry. MemoryLedger keeps that record in the process's
// memory, bounded in entries: a fleet whose replicas each keep their own
// refuses a replay on the replica that saw the first use, but another
// replica accepts the same state once more, so without a Ledger shared by
// the fleet a state opens at most once per replica within its lifetime.
package requeststate
