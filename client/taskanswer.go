// taskanswer.go holds wholeAnswers, the http.RoundTripper a TaskTransport
// puts under the go-sdk's streamable transport so that a cut
// application/json answer to a tools/call fails that call only.

package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// wholeAnswerKey marks the context of a tools/call a taskConn sends through
// the wrapped transport: wholeAnswers reads that call's answer whole.
type wholeAnswerKey struct{}

// wholeAnswers reads the application/json answer (2xx) of a request whose
// context carries wholeAnswerKey before the go-sdk's transport sees it,
// and reports such a request cut after it was sent, before its answer's
// headers, as its body's cut is reported. The
// go-sdk reads such a body after its Write has returned, and a read error
// there fails the whole connection (go-sdk v1.8.0 streamableClientConn
// handleJSON), so one cut answer would end the ClientSession. Read here, a
// cut becomes the error of the request (*answerCutError), which the go-sdk
// returns from Write marked as concerning that call only. Other requests
// and answers (SSE, refusals) pass unchanged.
type wholeAnswers struct {
	base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (w wholeAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(req)
	marked := req.Context().Value(wholeAnswerKey{}) != nil
	if err != nil {
		if marked && !notSent(err) && req.Context().Err() == nil {
			// Sent, and cut before its answer's headers were read whole:
			// the call may run, as when its body is cut.
			return nil, &answerCutError{err: err}
		}
		return nil, err
	}
	if !marked || resp.StatusCode < 200 || resp.StatusCode > 299 || wire.MediaType(resp) != wire.MediaJSON {
		return resp, nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, &answerCutError{err: err}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}

// CloseIdleConnections closes the idle connections of the wrapped
// RoundTripper, for http.Client.CloseIdleConnections.
func (w wholeAnswers) CloseIdleConnections() {
	if c, ok := w.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// answerCutError is the error of a tools/call whose answer began (2xx,
// application/json) and broke before its end: the call was sent.
type answerCutError struct{ err error }

func (e *answerCutError) Error() string {
	return fmt.Sprintf("its answer was cut before it was read whole (%v): the call was sent and may run on the server, as a task whose ID the client never read; sending it again could run it twice", e.err)
}

func (e *answerCutError) Unwrap() error { return e.err }

// withWholeAnswers returns a copy of st whose HTTP client reads the
// answers of marked requests whole (wholeAnswers); st is not changed.
func withWholeAnswers(st *mcp.StreamableClientTransport) *mcp.StreamableClientTransport {
	hc := st.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	wrapped := *hc
	wrapped.Transport = wholeAnswers{base: base}
	out := *st
	out.HTTPClient = &wrapped
	return &out
}

// markWholeAnswer returns ctx marked for wholeAnswers.
func markWholeAnswer(ctx context.Context) context.Context {
	return context.WithValue(ctx, wholeAnswerKey{}, true)
}
