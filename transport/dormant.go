// dormant.go holds the refusals a session's record decides alone: a
// request for a session whose live state this process does not hold
// (hibernated, or held by no process) hands the lookup
// (session.Registry.GetChecked) a check of its kind, which the record is
// given before anything wakes or re-creates the session. A request refused
// for what it carries (a batch, a protocol version, its calls, its cursor)
// then costs no wake (DESIGN.md, "Hibernation"), and gets the refusal the
// live session gives it, status, reason, message and data alike: each
// check applies the rules its kind applies to a live session, in the same
// order, through the same functions.

package transport

import (
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// recordRefusal is the error a check returns through the lookup: the
// refusal it decided, which lookupRefusal returns as it is.
type recordRefusal struct{ ref *refusal }

func (e *recordRefusal) Error() string {
	return "transport: refused from the session's record: " + string(e.ref.reason) + ": " + e.ref.message
}

// refusedBy returns the error of a check that refuses with ref, nil for
// no refusal.
func refusedBy(ref *refusal) error {
	if ref == nil {
		return nil
	}
	return &recordRefusal{ref: ref}
}

// postCheck returns the check of a POST on an existing session: the rules
// postSession applies to the live session (postVersion: 400
// batch_not_allowed, then 400 protocol_version), then those openStream
// applies to calls (callsRefusal of session.Registry.AdmitCalls: 429
// too_many_calls, 400 invalid_params, 400 duplicate_request_id), as the
// session would judge them once started from the record, with no call in
// flight. version is the request's MCP-Protocol-Version ("" when absent),
// batch whether its body was a batch, calls its requests with an id.
func (h *Handler) postCheck(version string, batch bool, calls []*jsonrpc.Request) func(store.Record) error {
	return func(rec store.Record) error {
		if _, ref := postVersion(session.ProtocolVersion(rec), version, batch); ref != nil {
			return refusedBy(ref)
		}
		if len(calls) == 0 {
			return nil
		}
		return refusedBy(callsRefusal(h.reg.AdmitCalls(rec, calls), calls))
	}
}

// getCheck returns the check of a GET that opens the standalone stream:
// the version, as serveGET applies it to the live session
// (negotiatedVersion: 400 protocol_version).
func getCheck(version string) func(store.Record) error {
	return func(rec store.Record) error {
		_, ref := negotiatedVersion(session.ProtocolVersion(rec), version)
		return refusedBy(ref)
	}
}

// resumeCheck returns the check of a resume, in the order resume applies
// them to the live session: the version (negotiatedVersion: 400
// protocol_version), then the cursor, as far as it decides by itself (row
// 3 of the replay decision, replay.DecideCursor: 400 cursor_malformed for
// a cursor that does not parse or names another session), with the
// refusal resumeRefusal gives on a live session and a log line that says
// the session was not woken.
func (h *Handler) resumeCheck(hdr headers) func(store.Record) error {
	return func(rec store.Record) error {
		if _, ref := negotiatedVersion(session.ProtocolVersion(rec), hdr.version); ref != nil {
			return refusedBy(ref)
		}
		cursor := ""
		if len(hdr.cursors) == 1 {
			cursor = hdr.cursors[0]
		}
		d, refused := replay.DecideCursor(replay.Tag(hdr.token), cursor)
		if !refused {
			return nil
		}
		d = repeatedCursor(d, len(hdr.cursors) > 1)
		ref := resumeRefusal(nil, d, cursor)
		h.logger.Info("resume refused", "session", store.Prefix(hdr.token), "reason", d.Outcome.Reason(),
			"cursor", clip(cursor), "status", d.Outcome.HTTPStatus(), "woken", false)
		ref.logged = true
		return refusedBy(ref)
	}
}
