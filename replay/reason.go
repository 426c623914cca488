// reason.go holds the catalogue of reasons: every word that says why a
// request was refused or a stream, generation or session ended, and the
// HTTP status of each refusal.

package replay

import (
	"net/http"
	"sort"
)

// Reason is a stable, machine-readable word that says why Tidemark refused a
// request, ended a stream, a generation or a session, or logged a fault. The
// same word is `error.data.reason` in JSON-RPC error bodies, the `reason`
// field of log lines and the `reason` label of metrics (DESIGN.md,
// "Reasons"). This file is the one catalogue of them:
// every layer takes its reasons from here and never writes the word again.
//
// A Reason never changes once released: clients and alerting rules match on
// it. A new reason is added here with a doc comment that says what it
// means and the HTTP status it answers, if any; a reason a request can be
// refused with also gets that status in statuses (Reason.Status).
type Reason string

// String returns the reason's word.
func (r Reason) String() string { return string(r) }

// Status returns the HTTP status of a request refused for r (README,
// "Refusals" and "The replay decision"), or 0 when r is never a refusal
// (an outcome, why a stream, generation or session ended, or a log
// reason).
func (r Reason) Status() int { return statuses[r] }

// Refusals returns every reason a request can be refused with, ordered by
// status, then by word.
func Refusals() []Reason {
	rs := make([]Reason, 0, len(statuses))
	for r := range statuses {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool {
		if si, sj := statuses[rs[i]], statuses[rs[j]]; si != sj {
			return si < sj
		}
		return rs[i] < rs[j]
	})
	return rs
}

// statuses is the HTTP status of each refusal reason; see each reason's
// doc comment.
var statuses = map[Reason]int{
	ReasonSessionRequired:     http.StatusBadRequest,
	ReasonSessionNotFound:     http.StatusNotFound,
	ReasonCursorMalformed:     http.StatusBadRequest,
	ReasonGenerationMismatch:  http.StatusConflict,
	ReasonCursorCompacted:     http.StatusConflict,
	ReasonCursorAhead:         http.StatusBadRequest,
	ReasonSessionIDInvalid:    http.StatusBadRequest,
	ReasonProtocolVersion:     http.StatusBadRequest,
	ReasonContentType:         http.StatusUnsupportedMediaType,
	ReasonNotAcceptable:       http.StatusNotAcceptable,
	ReasonBodyTooLarge:        http.StatusRequestEntityTooLarge,
	ReasonBodyTimeout:         http.StatusRequestTimeout,
	ReasonTooManyCalls:        http.StatusTooManyRequests,
	ReasonParseError:          http.StatusBadRequest,
	ReasonInvalidRequest:      http.StatusBadRequest,
	ReasonInvalidParams:       http.StatusBadRequest,
	ReasonBatchNotAllowed:     http.StatusBadRequest,
	ReasonHeaderMismatch:      http.StatusBadRequest,
	ReasonDuplicateRequestID:  http.StatusBadRequest,
	ReasonBatchTooLarge:       http.StatusBadRequest,
	ReasonOriginForbidden:     http.StatusForbidden,
	ReasonHostForbidden:       http.StatusForbidden,
	ReasonMethodNotAllowed:    http.StatusMethodNotAllowed,
	ReasonPathNotFound:        http.StatusNotFound,
	ReasonMethodNotFound:      http.StatusNotFound,
	ReasonLastEventIDOnPost:   http.StatusBadRequest,
	ReasonUnavailable:         http.StatusServiceUnavailable,
	ReasonCapacity:            http.StatusServiceUnavailable,
	ReasonInflightBytes:       http.StatusServiceUnavailable,
	ReasonOwnerMoved:          http.StatusServiceUnavailable,
	ReasonOwnerUnreachable:    http.StatusServiceUnavailable,
	ReasonUpstreamUnreachable: http.StatusServiceUnavailable,
	ReasonLoopDetected:        http.StatusLoopDetected,
	ReasonTokenMissing:        http.StatusUnauthorized,
	ReasonTokenInvalid:        http.StatusUnauthorized,
	ReasonInsufficientScope:   http.StatusForbidden,
}

// Outcomes of the replay decision (DESIGN.md, "The replay decision").
const (
	// ReasonReplay: the resume was accepted and its stream replayed; the
	// outcome word of a successful resume in logs and metrics, never the
	// reason of an error.
	ReasonReplay Reason = "replay"
	// ReasonSessionRequired: 400, no Mcp-Session-Id where one is needed.
	ReasonSessionRequired Reason = "session_required"
	// ReasonSessionNotFound: 404, the token is unknown, evicted, deleted or
	// superseded; the client must initialize again.
	ReasonSessionNotFound Reason = "session_not_found"
	// ReasonCursorMalformed: 400, Last-Event-ID is not a cursor of this
	// session, or names a stream the event at its sequence is not on.
	ReasonCursorMalformed Reason = "cursor_malformed"
	// ReasonGenerationMismatch: 409, the cursor belongs to another
	// generation of the session's live state (DESIGN.md, "Where the rule comes from").
	ReasonGenerationMismatch Reason = "generation_mismatch"
	// ReasonCursorCompacted: 409, the cursor is below the replay floor.
	ReasonCursorCompacted Reason = "cursor_compacted"
	// ReasonCursorAhead: 400, the cursor is above the high-water mark; it is
	// never clamped, and the live generation ends: row 6 of the decision
	// (DESIGN.md, "The replay decision").
	ReasonCursorAhead Reason = "cursor_ahead"
)

// Refusals of the HTTP transport (MCP 2025-11-25, basic/transports).
const (
	// ReasonSessionIDInvalid: 400, Mcp-Session-Id repeated, longer than 128
	// bytes or not visible ASCII.
	ReasonSessionIDInvalid Reason = "session_id_invalid"
	// ReasonProtocolVersion: 400, MCP-Protocol-Version repeated, not a
	// revision this endpoint serves (a later date included: MCP 2026-07-28,
	// basic/transports, "Protocol Version Header"), or another revision
	// than the one the request's session negotiated.
	ReasonProtocolVersion Reason = "protocol_version"
	// ReasonContentType: 415, a POST body that is not application/json, or
	// a Content-Encoding other than identity.
	ReasonContentType Reason = "content_type"
	// ReasonNotAcceptable: 406, Accept lacks a media type the response needs.
	ReasonNotAcceptable Reason = "not_acceptable"
	// ReasonBodyTooLarge: 413, a body over the configured limit, an
	// initialize whose params are over engine.MaxInitializeParams bytes, or
	// a subscriptions/listen whose params are over engine.MaxListenParams.
	ReasonBodyTooLarge Reason = "body_too_large"
	// ReasonBodyTimeout: 408, the body did not arrive in time.
	ReasonBodyTimeout Reason = "body_timeout"
	// ReasonTooManyCalls: 429 with Retry-After, the session has the most
	// calls in flight it may have.
	ReasonTooManyCalls Reason = "too_many_calls"
	// ReasonParseError: 400 (JSON-RPC -32700), the body is not JSON.
	ReasonParseError Reason = "parse_error"
	// ReasonInvalidRequest: 400 (JSON-RPC -32600), JSON that is not a valid
	// JSON-RPC message.
	ReasonInvalidRequest Reason = "invalid_request"
	// ReasonInvalidParams: 400 (JSON-RPC -32602), an initialize whose
	// params are not an InitializeParams object (MCP 2025-11-25, lifecycle:
	// protocolVersion a string, capabilities and clientInfo objects); no
	// session is created for it. Also a call that would take its session's
	// state over its bounds (engine.State.Admit: subscriptions, log level),
	// or a subscriptions/listen naming more resource URIs than a session
	// may subscribe (engine.AdmitListen).
	ReasonInvalidParams Reason = "invalid_params"
	// ReasonBatchNotAllowed: 400, a JSON-RPC batch under a protocol version
	// that has none (2025-06-18 and later).
	ReasonBatchNotAllowed Reason = "batch_not_allowed"
	// ReasonDuplicateRequestID: 400, a request ID already in flight on the
	// session (JSON-RPC 2.0: IDs are unique per sender).
	ReasonDuplicateRequestID Reason = "duplicate_request_id"
	// ReasonBatchTooLarge: 400, a batch of more messages (requests,
	// notifications and responses together) than a session may have calls
	// in flight at once (session.Options.MaxCallsPerSession): it can never
	// be accepted as sent, however long the client waits, and none of its
	// messages is delivered.
	ReasonBatchTooLarge Reason = "batch_too_large"
	// ReasonOriginForbidden: 403, an Origin that is not allowed (MCP
	// 2025-11-25, "Security Warning").
	ReasonOriginForbidden Reason = "origin_forbidden"
	// ReasonHostForbidden: 403, a non-localhost Host on a loopback listener
	// (DNS rebinding).
	ReasonHostForbidden Reason = "host_forbidden"
	// ReasonMethodNotAllowed: 405, an HTTP method other than GET, POST and
	// DELETE; under protocol 2026-07-28, any method but POST (MCP
	// 2026-07-28, basic/transports: GET and DELETE answer 405).
	ReasonMethodNotAllowed Reason = "method_not_allowed"
	// ReasonPathNotFound: 404, a path that is not the MCP endpoint.
	ReasonPathNotFound Reason = "path_not_found"
	// ReasonMethodNotFound: 404 with JSON-RPC error -32601, a request of
	// protocol 2026-07-28 whose method the server does not implement (MCP
	// 2026-07-28, basic/transports, "Protocol Version Header": the error
	// body tells it from the 404 of a server without the modern endpoint).
	// In the stateful era the same request is answered with -32601 on its
	// stream.
	ReasonMethodNotFound Reason = "method_not_found"
	// ReasonLastEventIDOnPost: 400, Last-Event-ID on a POST (resumption is
	// a GET).
	ReasonLastEventIDOnPost Reason = "last_event_id_on_post"
	// ReasonUnavailable: 503 with Retry-After, the store or the engine
	// cannot take the request now; also the log reason of a store that
	// cannot be reached, the refusal of a request whose bearer token the
	// authorization server could not be asked about (token introspection
	// or the issuer's keys unreachable), and the reason of a JSON-RPC
	// error -32603 when the memory of used requestStates (package
	// requeststate) cannot be reached.
	ReasonUnavailable Reason = "unavailable"
	// ReasonCapacity: 503 with Retry-After, no room for another session,
	// subprocess or subscriptions/listen stream (transport.Options.MaxListens:
	// tidemark serve --max-listens); also the end reason of a session evicted to make room,
	// and the reason of a JSON-RPC error -32603 when the memory of used
	// requestStates (package requeststate) is full.
	ReasonCapacity Reason = "capacity"
	// ReasonInflightBytes: 503 with Retry-After, a POST of calls whose body
	// would take the request bytes held by calls being answered over the
	// process's bound (tidemark serve --max-inflight-bytes); nothing of it
	// is delivered and its session is unharmed.
	ReasonInflightBytes Reason = "inflight_bytes"
	// ReasonOwnerMoved: 503 with Retry-After, a forwarded request reached a
	// replica that does not own the session either.
	ReasonOwnerMoved Reason = "owner_moved"
	// ReasonOwnerUnreachable: 503 with Retry-After, the replica that holds
	// the session's lease cannot be reached.
	ReasonOwnerUnreachable Reason = "owner_unreachable"
	// ReasonLoopDetected: 508 Loop Detected (RFC 5842, section 7.2), the
	// request's Via header (RFC 9110, section 7.6.3) already names this
	// process: a gateway's upstream leads back to it, directly or through
	// other gateways or a load balancer, and serving the request would send
	// it round again without limit.
	ReasonLoopDetected Reason = "loop_detected"
)

// Refusals of authorization: an endpoint that is an OAuth 2.1 resource
// server (transport.Options.Auth; MCP 2025-11-25, basic/authorization)
// refuses a request whose bearer token does not let it through, before
// anything else is done with the request, with WWW-Authenticate: Bearer
// and the URL of its protected resource metadata (RFC 6750, section 3;
// RFC 9728, section 5.1). A session, task or requestState of another
// user is not one of these: it answers as one that does not exist.
const (
	// ReasonTokenMissing: 401, the request carries no bearer token (no
	// Authorization header, or one of another scheme); the challenge
	// names no error (RFC 6750, section 3.1).
	ReasonTokenMissing Reason = "token_missing"
	// ReasonTokenInvalid: 401 with error="invalid_token", the bearer token
	// is malformed, or its verification refused it: expired, not yet
	// valid, issued by another issuer or for another audience, signed by
	// a key the issuer does not publish, or not active.
	ReasonTokenInvalid Reason = "token_invalid"
	// ReasonInsufficientScope: 403 with error="insufficient_scope" and the
	// scope to ask for: the token lacks a scope every request needs, or
	// the one a tools/call of the tool needs (tidemark serve
	// --auth-tool-scope).
	ReasonInsufficientScope Reason = "insufficient_scope"
)

// Refusals of a requestState that a retried request carries (package
// requeststate; MCP 2026-07-28, basic/patterns/mrtr, "Server Requirements":
// the state is attacker-controlled input, its integrity is checked, and it
// is bound to the principal, a lifetime and the originating request). Each
// is a JSON-RPC error -32602 (invalid params) answering the retry; the
// client starts the request again without requestState and inputResponses.
const (
	// ReasonStateInvalid: the requestState fails verification: altered,
	// truncated, not base64url, or not sealed by this server's key ring.
	ReasonStateInvalid Reason = "state_invalid"
	// ReasonStateKeyUnknown: the requestState names a key the key ring
	// does not hold: the process was started without the ring the state
	// was issued under (the replicas' rings differ, the key was retired
	// while the state was in flight, or the process restarted without a
	// ring, with a random key of its own).
	ReasonStateKeyUnknown Reason = "state_key_unknown"
	// ReasonStatePrincipalMismatch: the requestState was issued to another
	// principal (go-sdk auth.TokenInfo.UserID) than the retry's.
	ReasonStatePrincipalMismatch Reason = "state_principal_mismatch"
	// ReasonStateRequestMismatch: the requestState belongs to another
	// request: the method, the tool or prompt name, the resource URI or the
	// arguments differ.
	ReasonStateRequestMismatch Reason = "state_request_mismatch"
	// ReasonStateExpired: the requestState's lifetime has passed.
	ReasonStateExpired Reason = "state_expired"
	// ReasonStateReplayed: the requestState was already used, and the
	// server accepts each state once.
	ReasonStateReplayed Reason = "state_replayed"
)

// Why a session ended (its tombstone keeps the reason; store.EndReason).
const (
	// ReasonDeleted: the client sent DELETE. It is also error.data.reason
	// of the JSON-RPC error (code -32001) that answers each request whose
	// answer had not reached its client then: the last event, with no id,
	// of each stream of such a request open at that moment, or its JSON
	// answer (MCP 2025-11-25, basic/transports: a server may send a
	// JSON-RPC response on the stream of the request before it ends it).
	// The error is never stored: a resume of the stream answers 404
	// session_not_found.
	ReasonDeleted Reason = "deleted"
	// ReasonIdle: no request for the idle TTL.
	ReasonIdle Reason = "idle"
	// ReasonSuperseded: replaced by a newer session (an initialize that
	// named the session's token); also the reason of the error that
	// answers a call of that session still in flight then.
	ReasonSuperseded Reason = "superseded"
	// ReasonShutdown: the server shut down (a store that does not outlive
	// the process ends its sessions; a draining server refuses calls).
	ReasonShutdown Reason = "shutdown"
	// ReasonInitializeFailed: initialize was answered with an error, so the
	// session never began (MCP 2025-11-25, lifecycle).
	ReasonInitializeFailed Reason = "initialize_failed"
	// ReasonRetentionBudget: evicted because the events all sessions retain
	// exceeded the process's retention budget (--retention-budget) and this
	// session's newest event, which trimming never removes, was the oldest
	// event left.
	ReasonRetentionBudget Reason = "retention_budget"
)

// Why a session's live state was re-created at a new generation, or a
// generation ended (DESIGN.md, "Generations").
const (
	// ReasonOwnerGone: the process that held the live state is gone (a
	// restart kept the record in a durable store).
	ReasonOwnerGone Reason = "owner_gone"
	// ReasonLeaseExpired: another replica's lease lapsed and this one took
	// the session over.
	ReasonLeaseExpired Reason = "lease_expired"
	// ReasonHibernated: the session hibernated, idle, and its engine could
	// not restore its state exactly (engine.HibernateLossy), so it woke at
	// generation+1 (DESIGN.md, "Hibernation").
	ReasonHibernated Reason = "hibernated"
	// ReasonEngineEnded: the engine session ended on its own (a gateway's
	// subprocess exited).
	ReasonEngineEnded Reason = "engine_ended"
	// ReasonFenced: a write carried a generation the store has moved past:
	// a newer owner holds the session, so this generation stops.
	ReasonFenced Reason = "fenced"
	// ReasonStoreError: the store failed a write for another cause; the
	// generation ends rather than leave a gap a client cannot see.
	ReasonStoreError Reason = "store_error"
	// ReasonGenerationLost: events of the generation could not be stored,
	// or not confirmed stored: a pipelined store lost a batch it had
	// accepted (store.ErrLost), or the store was unavailable for an event
	// or a state the generation had to store (store.ErrUnavailable); the
	// generation ends, so that no client ever sees a gap. Also a store
	// that lost events it had confirmed (a resume's cursor above the
	// high-water mark: session.ErrConfirmedLost), after which the
	// generation ends so that no id names two events. Also the reason of
	// the re-creation that follows in the same process, which still owns
	// the record.
	ReasonGenerationLost Reason = "generation_lost"
)

// Why a stream's connection ended (log lines).
const (
	// ReasonClientGone: writing to the connection failed, or the client
	// closed it before its request was handed over (no answer is written
	// nor counted as a refusal).
	ReasonClientGone Reason = "client_gone"
)

// Gateway (stdio engine) faults: JSON-RPC error reasons of calls a
// subprocess cannot answer, and log reasons of its misbehaviour.
const (
	// ReasonServerExited: the subprocess exited with the call in flight.
	ReasonServerExited Reason = "server_exited"
	// ReasonInitializeTimeout: the subprocess did not answer initialize in
	// time and was stopped.
	ReasonInitializeTimeout Reason = "initialize_timeout"
	// ReasonInvalidMessage: a subprocess stdout line that is not a JSON-RPC
	// message.
	ReasonInvalidMessage Reason = "invalid_message"
	// ReasonMessageTooLarge: a subprocess message over the size limit: the
	// subprocess is stopped, and the calls it left in flight fail with it.
	ReasonMessageTooLarge Reason = "message_too_large"
	// ReasonStderrFlood: subprocess stderr lines over the logging rate,
	// counted instead of logged.
	ReasonStderrFlood Reason = "stderr_flood"
	// ReasonStopTimeout: the subprocess did not exit within its stop grace
	// and was killed.
	ReasonStopTimeout Reason = "stop_timeout"
	// ReasonStdinClosed: writing to the subprocess's stdin failed.
	ReasonStdinClosed Reason = "stdin_closed"
	// ReasonReadError: reading the subprocess's stdout failed.
	ReasonReadError Reason = "read_error"
	// ReasonUnknownResponse: the client answered a server-to-client
	// request that is not in flight (answered already, cancelled, or of
	// another generation); the answer is dropped.
	ReasonUnknownResponse Reason = "unknown_response"
	// ReasonProtocolVersionChanged: a re-created subprocess negotiated
	// another protocol version than the session's.
	ReasonProtocolVersionChanged Reason = "protocol_version_changed"
	// ReasonClosed: the subprocess ended because its session closed it
	// (the session ended, was evicted, or Tidemark shut down); the calls
	// it left in flight are not failed.
	ReasonClosed Reason = "closed"
)

// Gateway (upstream engine) faults: how the faults of an upstream
// Streamable HTTP server reach the client (tidemark serve --upstream;
// docs/gateways.md, "Gateway to a Streamable HTTP server").
const (
	// ReasonUpstreamSessionLost: the upstream answered 404 to its session
	// ID (it restarted, or ended the session): the generation ends, the
	// calls it left in flight fail with this reason, and the session's
	// next request opens a new upstream session at generation+1.
	ReasonUpstreamSessionLost Reason = "upstream_session_lost"
	// ReasonUpstreamStreamCut: a call's upstream response stream ended
	// before its answer and could not be resumed (the upstream gave its
	// events no IDs, or refused the resume: at once with an answer that
	// will not change (400, 403, 405, a 409 with a reason, 501, 508), or
	// with a bare 409, 429, 503 or another 5xx on every try until the
	// resume deadline); the call fails with it.
	ReasonUpstreamStreamCut Reason = "upstream_stream_cut"
	// ReasonUpstreamUnreachable: 503 with Retry-After, the upstream cannot
	// be reached (connection refused, DNS, connect timeout); also the error
	// of a call whose cut stream could not be resumed because the upstream
	// stayed unreachable, and of an initialize the upstream took and did
	// not answer within its bound (the session does not begin).
	ReasonUpstreamUnreachable Reason = "upstream_unreachable"
	// ReasonUpstreamError: the upstream answered a call with an HTTP error,
	// or with a body that holds no JSON-RPC answer to it; the call fails
	// with it (error.data.status holds the HTTP status).
	ReasonUpstreamError Reason = "upstream_error"
	// ReasonCancelled: the client cancelled the call (notifications/
	// cancelled) and the server did not answer it: the upstream ended its
	// stream, or let its grace pass, or the stdio subprocess let its grace
	// pass or exited; this answer closes the call's stream.
	ReasonCancelled Reason = "cancelled"
)

// Connect bridge faults: how the faults of the remote MCP server reach the
// host that runs `tidemark connect` (docs/connect.md). Each is
// error.data.reason of the JSON-RPC error (code -32603) that answers the
// host's call; none is an HTTP status of Tidemark's own.
const (
	// ReasonRequestLost: the server answered 404 (the session is gone) or
	// 409 (its generation is gone, and the call was among the requests the
	// refused stream carried, error.data.lostRequests, or the server did
	// not list them) while the call was in flight: its answer can no
	// longer come. The call may or may not have run. The bridge has
	// initialized a new session with the host's own parameters; the host
	// may send the call again. error.data.status is 404 or 409 and
	// error.data.serverReason the server's own reason, when it gave one.
	ReasonRequestLost Reason = "request_lost"
	// ReasonStreamLost: the call's answer stream broke and could not be
	// resumed (the server gave its events no IDs, refused the resume with a
	// status other than 404 or 409, or no new event came within the resume
	// timeout), or the call could not be sent because a new session could
	// not be initialized. The call may or may not have run.
	ReasonStreamLost Reason = "stream_lost"
	// ReasonServerUnreachable: no connection to the server could be made
	// (connection refused, DNS, TLS) within the bound the bridge retries
	// for; the call was not sent.
	ReasonServerUnreachable Reason = "server_unreachable"
	// ReasonServerRefused: the server refused the call's POST with an HTTP
	// error status (a 503 with Retry-After after the bridge retried it
	// within its bound); error.data.status holds the status and
	// error.data.serverReason the server's reason, when it gave one.
	ReasonServerRefused Reason = "server_refused"
)

// Store and process conditions (log reasons).
const (
	// ReasonMaxBytes: a store over its own documented size bound trims the
	// oldest events.
	ReasonMaxBytes Reason = "max_bytes"
	// ReasonFatal: the embedded store reported a fatal error.
	ReasonFatal Reason = "fatal"
	// ReasonPersistenceUnknown: Redis's persistence settings could not be
	// read.
	ReasonPersistenceUnknown Reason = "persistence_unknown"
	// ReasonUnsafePersistence: Redis persists data in a way that can lose
	// acknowledged writes.
	ReasonUnsafePersistence Reason = "unsafe_persistence"
	// ReasonEvictionUnknown: Redis's maxmemory-policy could not be read
	// (CONFIG GET refused, as managed services often do), so whether Redis
	// may evict sessions is unknown.
	ReasonEvictionUnknown Reason = "eviction_unknown"
	// ReasonUnsafeEviction: Redis's maxmemory-policy is not noeviction:
	// over maxmemory Redis may evict a session's record (the session then
	// answers 404) or its event log (its events are lost).
	ReasonUnsafeEviction Reason = "unsafe_eviction"
	// ReasonAmbiguousKey: two keys of a requestState key ring start to
	// seal at the same time, so which of them seals depends on their order
	// in each replica's ring.
	ReasonAmbiguousKey Reason = "ambiguous_key"
	// ReasonReplicaIDInUse: another live replica announces this replica ID.
	ReasonReplicaIDInUse Reason = "replica_id_in_use"
	// ReasonSignal: the process received a stop signal.
	ReasonSignal Reason = "signal"
	// ReasonNotRegistered: /readyz answers 503 because this replica's
	// entry is missing from the fleet's replica directory (others cannot
	// forward requests to it).
	ReasonNotRegistered Reason = "not_registered"
)

// Fleet fan-out of notifications (package fanout): log reasons.
const (
	// ReasonNotificationsLost: a replica could not read the fleet's
	// notification stream for longer than its retention covers, so
	// notifications raised elsewhere meanwhile never reached the listeners
	// of this replica.
	ReasonNotificationsLost Reason = "notifications_lost"
	// ReasonListenerStalled: a subscriptions/listen stream did not take
	// its notifications as fast as they came (its client stopped
	// reading): more than its queue holds were waiting (fanout), or a
	// write to it waited the write timeout (transport,
	// Options.WriteTimeout); the stream is cut so that nothing else waits
	// on it, and the notifications raised until its client listens again
	// never reach it.
	ReasonListenerStalled Reason = "listener_stalled"
)

// Tasks of the Tasks extension (package taskrun; DESIGN.md, "Tasks: the
// executor rule"): the reasons a task read as failed carries in
// error.data.reason, and the refusals of the task requests. The refusals
// of this group are JSON-RPC errors of the sessionless era, which the
// HTTP transport's own refusal tables do not list.
const (
	// ReasonExecutorLost: a working task's executor is gone (its process
	// ended or its lease lapsed); the task is settled failed with error
	// -32603, and the tool may or may not have taken effect.
	ReasonExecutorLost Reason = "executor_lost"
	// ReasonTaskExpired: the task's time to live ended before it settled;
	// it is settled failed with error -32603 and its call cancelled.
	ReasonTaskExpired Reason = "task_expired"
	// ReasonTaskNotFound: JSON-RPC error -32602 (HTTP 200): the task ID is
	// unknown, expired, or belongs to another subject.
	ReasonTaskNotFound Reason = "task_not_found"
	// ReasonCapabilityMissing: JSON-RPC error -32021 (HTTP 200): the
	// request did not declare the Tasks extension in its client
	// capabilities, and what it asks needs it (tasks/get, tasks/update,
	// tasks/cancel, a tool that runs only as a task).
	ReasonCapabilityMissing Reason = "capability_missing"
	// ReasonHeaderMismatch: HTTP 400 with JSON-RPC error -32020: a
	// request of the sessionless revision whose Mcp-Method, Mcp-Name or an
	// Mcp-Param-* header is missing, disagrees with its body (a task
	// request's Mcp-Name carries params.taskId), or is sent more than once.
	ReasonHeaderMismatch Reason = "header_mismatch"
	// ReasonResultTooLarge: a task's call returned a result over 8 MiB; the
	// task is stored failed with error -32603 instead.
	ReasonResultTooLarge Reason = "result_too_large"
)
