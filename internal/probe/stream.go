// The answers the probe reads: an SSE stream, or the messages of a JSON
// body, event by event, up to a given response or a given number of
// messages.

package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/sse"
	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// event is one SSE event (or one message of a JSON answer).
type event struct {
	id    string
	hasID bool
	data  []byte
	retry time.Duration
	msg   jsonrpc.Message // nil for a priming event or undecodable data
}

func (e event) priming() bool { return len(e.data) == 0 }

// stream reads one answer: SSE events, or the messages of a JSON body.
type stream struct {
	resp   *http.Response
	status int
	sse    bool
	rd     *sse.Reader
	queued []event // messages of a JSON body
}

func openStream(resp *http.Response) *stream {
	st := &stream{resp: resp, status: resp.StatusCode}
	if wire.MediaType(resp) == wire.MediaSSE {
		st.sse = true
		st.rd = sse.NewReader(resp.Body, 0)
		return st
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	resp.Body.Close()
	if err == nil {
		for _, m := range decodeJSON(body) {
			st.queued = append(st.queued, event{msg: m, data: []byte("{}")})
		}
	}
	return st
}

func decodeJSON(body []byte) []jsonrpc.Message {
	body = bytes.TrimSpace(body)
	var raws []json.RawMessage
	if len(body) > 0 && body[0] == '[' {
		if json.Unmarshal(body, &raws) != nil {
			return nil
		}
	} else {
		raws = []json.RawMessage{body}
	}
	var msgs []jsonrpc.Message
	for _, r := range raws {
		if m, err := jsonrpc.DecodeMessage(r); err == nil {
			msgs = append(msgs, m)
		}
	}
	return msgs
}

// next returns the next event; io.EOF at the end of the answer.
func (st *stream) next() (event, error) {
	if !st.sse {
		if len(st.queued) == 0 {
			return event{}, io.EOF
		}
		e := st.queued[0]
		st.queued = st.queued[1:]
		return e, nil
	}
	ev, err := st.rd.Next()
	if err != nil {
		return event{}, err
	}
	e := event{id: ev.ID, hasID: ev.HasID, data: ev.Data, retry: ev.Retry}
	if len(ev.Data) > 0 && (ev.Name == "" || ev.Name == "message") {
		e.msg, _ = jsonrpc.DecodeMessage(ev.Data)
	}
	return e, nil
}

// close cuts the connection (if still open).
func (st *stream) close() { st.resp.Body.Close() }

// closeWith ties st to ctx: st is closed when ctx ends or when the
// returned function is called, whichever comes first. A reader defers the
// returned function.
func (st *stream) closeWith(ctx context.Context) func() {
	stop := context.AfterFunc(ctx, st.close)
	return func() {
		stop()
		st.close()
	}
}

// answer reads until the response to id and returns it.
func (st *stream) answer(ctx context.Context, id jsonrpc.ID) (*jsonrpc.Response, error) {
	defer st.closeWith(ctx)()
	for {
		e, err := st.next()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("answer ended before the response: %w", err)
		}
		if r, ok := e.msg.(*jsonrpc.Response); ok && r.ID == id {
			return r, nil
		}
	}
}

// readToResponse reads st until the response to id (included), closing
// it; it fails if the answer ends first or ctx ends.
func readToResponse(ctx context.Context, st *stream, id jsonrpc.ID) ([]event, error) {
	defer st.closeWith(ctx)()
	var evs []event
	for {
		e, err := st.next()
		if err != nil {
			if ctx.Err() != nil {
				return evs, ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("the stream ended without the response")
			}
			return evs, err
		}
		evs = append(evs, e)
		if r, ok := e.msg.(*jsonrpc.Response); ok && r.ID == id {
			return evs, nil
		}
	}
}

// readMessages reads st until n message events have come (priming events
// not counted) and returns every event read; the stream stays open.
func readMessages(ctx context.Context, st *stream, n int) ([]event, error) {
	stop := context.AfterFunc(ctx, st.close)
	defer stop()
	var evs []event
	for got := 0; got < n; {
		e, err := st.next()
		if err != nil {
			if ctx.Err() != nil {
				return evs, ctx.Err()
			}
			return evs, fmt.Errorf("the stream ended after %d of %d messages: %w", got, n, err)
		}
		evs = append(evs, e)
		if e.msg != nil {
			got++
		}
	}
	return evs, nil
}
