package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// servePOST handles a POST of one JSON-RPC message, or of a batch under
// 2025-03-26 (MCP 2025-11-25, "Sending Messages to the Server").
func (h *Handler) servePOST(w http.ResponseWriter, r *http.Request, version string) {
	if herr := h.postChecks(r); herr != nil {
		herr.write(w, h.logger)
		return
	}
	token, herr := sessionID(r)
	if herr != nil {
		herr.write(w, h.logger)
		return
	}
	msgs, batch, body, herr := h.readMessages(w, r, version)
	if herr != nil {
		herr.write(w, h.logger)
		return
	}

	var calls []*jsonrpc.Request
	var initialize *jsonrpc.Request
	for _, m := range msgs {
		if req, ok := m.(*jsonrpc.Request); ok && req.IsCall() {
			calls = append(calls, req)
			if req.Method == "initialize" {
				initialize = req
			}
		}
	}
	if initialize != nil && (len(msgs) > 1 || batch) {
		// MCP 2025-03-26, lifecycle: initialize MUST NOT be part of a batch.
		refuse(http.StatusBadRequest, ReasonInvalidRequest, "initialize must be sent alone, not in a batch").write(w, h.logger)
		return
	}

	if len(calls) > 0 && h.isDraining() {
		e := refuse(http.StatusServiceUnavailable, ReasonUnavailable,
			"the server is shutting down and takes no new calls: send the request again (after the restart, or to another replica)")
		e.retryAfter = retryAfterSeconds
		e.write(w, h.logger)
		return
	}

	ctx := r.Context()
	userID := ""
	if ti := auth.TokenInfoFromContext(ctx); ti != nil {
		userID = ti.UserID
	}
	var live *session.Live
	if initialize != nil {
		var err error
		live, err = h.reg.Create(ctx, userID)
		if err != nil {
			h.registryError(err).write(w, h.logger)
			return
		}
		w.Header().Set("Mcp-Session-Id", live.Token())
		if token != "" {
			// A client that initializes again while holding a live session
			// replaces it: the old token is superseded and answers 404.
			// Get checks the user binding; a session another replica owns
			// ends in the store, and that owner's renewal then fails.
			if _, err := h.reg.Get(ctx, token, userID); err == nil || errors.Is(err, session.ErrRemote) {
				h.reg.End(ctx, token, store.EndSuperseded)
			}
		}
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		json.Unmarshal(initialize.Params, &p)
		version = p.ProtocolVersion
	} else {
		if token == "" {
			refuse(http.StatusBadRequest, ReasonSessionRequired, "Mcp-Session-Id header is required for requests after initialize").write(w, h.logger)
			return
		}
		var err error
		live, err = h.resolve(w, r, token, userID, body)
		if errors.Is(err, errServed) {
			return // forwarded to the session's owner, or refused
		}
		if err != nil {
			h.registryError(err).write(w, h.logger)
			return
		}
		negotiated := live.ProtocolVersion()
		if version == "" {
			// No header: the version negotiated at initialize applies (MCP
			// 2025-11-25, "Protocol Version Header").
			version = negotiated
		}
		// A session that negotiated 2025-06-18 or later takes no batch,
		// whatever older version a request's header claims.
		if batch && negotiated >= V20250618 {
			refuse(http.StatusBadRequest, ReasonBatchNotAllowed,
				"JSON-RPC batches are not allowed under protocol version "+negotiated+", which this session negotiated").write(w, h.logger)
			return
		}
	}
	req := engine.Request{Header: r.Header, TokenInfo: auth.TokenInfoFromContext(ctx)}

	if len(calls) == 0 {
		// Only notifications and responses: 202 with no body.
		for _, m := range msgs {
			if err := live.Deliver(ctx, m, req); err != nil {
				h.deliverError(live, err).write(w, h.logger)
				return
			}
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}

	asJSON := h.opts.JSONResponse
	// The stream opens with a priming event (SEP-1699), which is sent under
	// 2025-11-25 and later only; earlier clients see the stream's messages.
	primed := !asJSON && version >= V20251125
	retry := time.Duration(0)
	if primed {
		retry = max(h.opts.Retry, 0)
	}
	streamID, err := live.OpenStream(ctx, calls, asJSON, retry)
	if err != nil {
		if !errors.Is(err, session.ErrDuplicateID) && !errors.Is(err, session.ErrTooManyCalls) {
			h.deliverError(live, err).write(w, h.logger)
			return
		}
		herr := refuse(http.StatusBadRequest, ReasonDuplicateID, err.Error())
		var limit *session.CallLimitError
		switch {
		case errors.As(err, &limit) && limit.Sent > limit.Limit:
			herr = refuse(http.StatusBadRequest, ReasonBatchTooLarge, fmt.Sprintf(
				"a batch of %d requests is more than the %d a session may have in flight at once: it can never be accepted; send at most %d requests per batch",
				limit.Sent, limit.Limit, limit.Limit))
		case errors.Is(err, session.ErrTooManyCalls):
			herr = refuse(http.StatusTooManyRequests, ReasonTooManyCalls,
				err.Error()+": wait for answers before sending more requests on this session")
		}
		if len(calls) == 1 {
			herr.id = calls[0].ID
		}
		herr.write(w, h.logger)
		return
	}
	req.CloseStream = func(retry time.Duration) {
		if retry <= 0 {
			retry = h.opts.Retry
		}
		live.CloseStream(context.WithoutCancel(ctx), streamID, retry)
	}

	// The stream's number is the sequence of its opening event; its reader
	// starts just before it.
	after := streamID - 1

	for i, m := range msgs {
		if err := live.Deliver(ctx, m, req); err != nil {
			// The calls not handed over will never be answered: free their
			// ids, so the client can send them again as it is told to.
			var undelivered []*jsonrpc.Request
			for _, m := range msgs[i:] {
				if r, ok := m.(*jsonrpc.Request); ok && r.IsCall() {
					undelivered = append(undelivered, r)
				}
			}
			live.ReleaseCalls(ctx, streamID, undelivered)
			if initialize != nil {
				// A session whose initialize never reached the server never began.
				h.reg.End(context.WithoutCancel(ctx), live.Token(), store.EndInitializeFailed)
			}
			h.deliverError(live, err).write(w, h.logger)
			return
		}
	}

	if initialize != nil {
		// A session whose initialize failed never began: end it once the
		// error is written, so it holds no room (MCP 2025-11-25, lifecycle).
		// When the client left before the answer, decide when it comes
		// (regression: the session outlived a failed initialize until its
		// idle TTL, TestInitializeFailingAfterClientLeft).
		defer func() {
			endIfFailed := func() {
				if live.InitializeFailed() {
					h.reg.End(context.WithoutCancel(ctx), live.Token(), store.EndInitializeFailed)
				}
			}
			answered := live.InitializeAnswered()
			select {
			case <-answered:
				endIfFailed()
			default:
				go func() {
					select {
					case <-answered:
						endIfFailed()
					case <-live.Done():
						// The engine session ended first (a gateway's
						// subprocess stopped): unless initialize had
						// succeeded, the session never began.
						if !live.Initialized() {
							h.reg.End(context.WithoutCancel(ctx), live.Token(), store.EndInitializeFailed)
						}
					}
				}()
			}
		}()
	}
	if asJSON {
		h.answerJSON(ctx, w, live, streamID, after, batch)
		return
	}
	setSSEHeaders(w.Header())
	h.serve(ctx, w, stream{live: live, stream: streamID, after: after, unprimed: !primed})
}

// postChecks applies the media-type rules of a POST: Content-Type must be
// application/json (415), Accept must list application/json and
// text/event-stream (406), and Last-Event-ID belongs on GET only (400).
func (h *Handler) postChecks(r *http.Request) *httpError {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return refuse(http.StatusUnsupportedMediaType, ReasonContentType,
			"Content-Type must be application/json, not "+quote(r.Header.Get("Content-Type")))
	}
	if !accepts(r, "application/json") || !accepts(r, "text/event-stream") {
		return refuse(http.StatusNotAcceptable, ReasonNotAcceptable,
			"Accept must list both application/json and text/event-stream")
	}
	for _, v := range r.Header.Values("Content-Encoding") {
		for ce := range strings.SplitSeq(v, ",") {
			if ce = strings.TrimSpace(ce); ce != "" && !strings.EqualFold(ce, "identity") {
				return refuse(http.StatusUnsupportedMediaType, ReasonContentType,
					"Content-Encoding "+quote(ce)+" is not accepted: send the JSON body uncompressed")
			}
		}
	}
	if len(r.Header.Values("Last-Event-ID")) > 0 {
		return refuse(http.StatusBadRequest, ReasonLastEventIDOnPost,
			"Last-Event-ID is only meaningful on GET: resume a stream with GET")
	}
	return nil
}

// readMessages reads and decodes the body: one JSON-RPC message, or a
// non-empty array of them when the protocol version allows batches
// (2025-03-26, which is also the version assumed when the header is
// absent). It also returns the body's bytes, which a forwarded request
// carries to the session's owner.
func (h *Handler) readMessages(w http.ResponseWriter, r *http.Request, version string) ([]jsonrpc.Message, bool, []byte, *httpError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, false, nil, refuse(http.StatusRequestEntityTooLarge, ReasonBodyTooLarge,
				fmt.Sprintf("request body exceeds %d bytes", mbe.Limit))
		}
		if isBodyTimeout(err) {
			return nil, false, nil, refuse(http.StatusRequestTimeout, ReasonBodyTimeout,
				fmt.Sprintf("the request body did not arrive within %v", h.opts.BodyTimeout))
		}
		e := refuse(http.StatusBadRequest, ReasonParseError, "reading the body failed: "+err.Error()+": send the whole body as its Content-Length says")
		e.code = codeParseError
		return nil, false, nil, e
	}
	msgs, batch, herr := h.decodeMessages(body, version)
	return msgs, batch, body, herr
}

// decodeMessages decodes a POST body for readMessages.
func (h *Handler) decodeMessages(body []byte, version string) ([]jsonrpc.Message, bool, *httpError) {
	parseErr := func(msg string) *httpError {
		e := refuse(http.StatusBadRequest, ReasonParseError, msg)
		e.code = codeParseError
		return e
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, false, parseErr("request body is empty")
	}
	batch := trimmed[0] == '['
	limit := maxNesting
	if batch {
		limit++ // the batch's own array
	}
	if depth := nesting(trimmed); depth > limit {
		return nil, false, parseErr(fmt.Sprintf(
			"the message nests arrays and objects %d levels deep; at most %d are accepted (the MCP SDK decoder's limit)", depth-(limit-maxNesting), maxNesting))
	}
	if !json.Valid(trimmed) {
		return nil, false, parseErr("request body is not valid JSON")
	}
	var raws []json.RawMessage
	if batch {
		if version >= V20250618 {
			return nil, false, refuse(http.StatusBadRequest, ReasonBatchNotAllowed,
				"JSON-RPC batches are not allowed under protocol version "+version)
		}
		if err := json.Unmarshal(trimmed, &raws); err != nil || len(raws) == 0 {
			return nil, false, refuse(http.StatusBadRequest, ReasonInvalidRequest, "a batch must be a non-empty array of messages")
		}
	} else {
		raws = []json.RawMessage{trimmed}
	}
	msgs := make([]jsonrpc.Message, 0, len(raws))
	for _, raw := range raws {
		m, err := jsonrpc.DecodeMessage(raw)
		if err != nil {
			return nil, false, refuse(http.StatusBadRequest, ReasonInvalidRequest, "not a JSON-RPC 2.0 message: "+err.Error())
		}
		var id jsonrpc.ID
		switch m := m.(type) {
		case *jsonrpc.Request:
			if m.Method == "" {
				return nil, false, refuse(http.StatusBadRequest, ReasonInvalidRequest, "a request must have a method")
			}
			id = m.ID
		case *jsonrpc.Response:
			if !m.ID.IsValid() || (m.Result == nil && m.Error == nil) {
				return nil, false, refuse(http.StatusBadRequest, ReasonInvalidRequest, "a response must have an id and a result or an error")
			}
			id = m.ID
		}
		if !idSurvived(raw, id) {
			if err := checkID(raw); err != nil {
				return nil, false, refuse(http.StatusBadRequest, ReasonInvalidRequest, err.Error())
			}
		}
		msgs = append(msgs, m)
	}
	return msgs, batch, nil
}

// maxExactID is the largest integer id magnitude that survives decoding as
// a JSON number into a float64 (2^53): the go-sdk decodes ids that way, and
// an id it rounds would come back to the client as another id.
const maxExactID = 1 << 53

// idSurvived reports, without decoding raw again, whether id (as the
// go-sdk decoded it) is plainly the id the client sent: a string, an
// integer within ±2^53 that appears as `"id":N` in raw, the only "id" in
// it, or no id where raw has no "id" at all. Anything else (white space
// around the colon, an exponent, a fraction, null, an "id" inside params)
// goes to checkID, which decodes the id exactly.
func idSurvived(raw []byte, id jsonrpc.ID) bool {
	switch v := id.Raw().(type) {
	case string:
		return true
	case int64:
		if v > maxExactID || v < -maxExactID {
			return false
		}
		var buf [32]byte
		key := strconv.AppendInt(append(buf[:0], `"id":`...), v, 10)
		i := bytes.Index(raw, key)
		if i < 0 || i+len(key) >= len(raw) || bytes.Count(raw, []byte(`"id"`)) != 1 {
			return false // absent, or maybe not the top-level key
		}
		switch raw[i+len(key)] {
		case ',', '}', ' ', '\t', '\r', '\n':
			return true
		}
		return false
	case nil:
		return !bytes.Contains(raw, []byte(`"id"`))
	}
	return false
}

// checkID refuses the ids MCP forbids or the decoder would alter: MCP
// 2025-11-25 (basic, "Requests") requires a string or integer id that is
// not null; a fractional number, or an integer beyond ±2^53, would be
// answered under a different id.
func checkID(raw json.RawMessage) error {
	var env struct {
		ID json.RawMessage `json:"id"` // "null" when null, empty when absent
	}
	if json.Unmarshal(raw, &env) != nil {
		return nil // not an object: the decoder judges it
	}
	id := bytes.TrimSpace(env.ID)
	switch {
	case len(id) == 0:
		return nil // no id: a notification
	case string(id) == "null":
		return fmt.Errorf("the id is null: MCP requires a string or an integer id")
	case id[0] == '"':
		return nil
	}
	if !isInteger(id) {
		return fmt.Errorf("the id %s is not a string or an integer", quote(string(id)))
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	if err != nil || n > maxExactID || n < -maxExactID {
		return fmt.Errorf("the id %s is beyond ±2^53: send large ids as strings", quote(string(id)))
	}
	return nil
}

// isInteger reports whether b is a JSON number written as an integer: an
// optional minus sign and digits, no fraction and no exponent.
func isInteger(b []byte) bool {
	b = bytes.TrimPrefix(b, []byte("-"))
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// maxNesting is the deepest nesting of arrays and objects in one message
// that the go-sdk's decoder (jsonrpc.DecodeMessage, v1.8.0) accepts.
const maxNesting = 1000

// nesting returns the deepest nesting of arrays and objects in b, not
// counting brackets inside strings. b need not be valid JSON.
func nesting(b []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			// Skip the string: to the next quote not escaped.
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ']', '}':
			depth--
		}
	}
	return deepest
}

// answerJSON waits for the responses of the stream's calls and writes them
// as one application/json body: an object, or an array for a batch.
func (h *Handler) answerJSON(ctx context.Context, w http.ResponseWriter, live *session.Live, streamID, after uint64, batch bool) {
	rd := live.Reader(streamID, after)
	var out []json.RawMessage
	// A JSON answer cannot be resumed: at shutdown, say so instead of
	// letting the connection be cut without a body.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(h.shutdownCtx, cancel)
	defer stop()
	for done := false; !done; {
		evs, err := rd.Next(ctx)
		if err != nil {
			switch {
			case h.shuttingDown():
				refuse(http.StatusServiceUnavailable, ReasonUnavailable,
					"the server is shutting down before the call answered; a JSON response cannot be resumed: send the request again").write(w, h.logger)
			case ctx.Err() == nil:
				e := refuse(http.StatusServiceUnavailable, ReasonUnavailable, "the session ended before answering: send the request again")
				e.cause = err
				e.write(w, h.logger)
			}
			return
		}
		for _, e := range evs {
			if e.Kind == store.KindMessage {
				out = append(out, e.Data)
			}
			if e.End {
				done = true
				break
			}
		}
	}
	var body []byte
	if len(out) == 1 && !batch {
		body = out[0]
	} else {
		body, _ = json.Marshal(out)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// registryError maps a session.Registry error to a refusal.
func (h *Handler) registryError(err error) *httpError {
	var e *httpError
	switch {
	case errors.Is(err, session.ErrNotFound), errors.Is(err, store.ErrEnded):
		e = refuse(http.StatusNotFound, ReasonSessionNotFound,
			"the session is unknown, ended or superseded: send initialize to start a new session")
	case errors.Is(err, session.ErrForbidden):
		e = refuse(http.StatusForbidden, ReasonSessionForbidden, "the session belongs to another user")
	case errors.Is(err, engine.ErrCapacity):
		e = refuse(http.StatusServiceUnavailable, ReasonCapacity, "no room for another session or server process: retry later")
	default:
		e = refuse(http.StatusServiceUnavailable, ReasonUnavailable, "the session's store or server cannot take the request now: retry later")
	}
	e.cause = err
	return e
}

// deliverError maps a failure to hand a message to the session, or to
// store what answering it needs (an opening event, a state change).
func (h *Handler) deliverError(live *session.Live, err error) *httpError {
	switch {
	case errors.Is(err, store.ErrEnded) || errors.Is(err, store.ErrNotFound):
		live.Logger().Warn("delivery failed", "reason", ReasonSessionNotFound, "error", err)
		return refuse(http.StatusNotFound, ReasonSessionNotFound, "the session ended: send initialize to start a new session")
	case errors.Is(err, store.ErrFenced):
		// Another replica took the session over; the next attempt reaches it.
		live.Logger().Warn("delivery failed", "reason", ReasonOwnerMoved, "error", err)
		e := refuse(http.StatusServiceUnavailable, ReasonOwnerMoved, "another replica took the session over: retry the request")
		e.retryAfter = retryAfterSeconds
		return e
	}
	live.Logger().Warn("delivery failed", "reason", ReasonUnavailable, "error", err)
	return refuse(http.StatusServiceUnavailable, ReasonUnavailable, "the session's store or server cannot take the request now: retry the request")
}
