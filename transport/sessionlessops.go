// sessionlessops.go holds what the transport records of a request of the
// sessionless revision, which the go-sdk's handler answers: its
// mcp.server.operation.duration, as the session records a stateful
// request's (session.Live.OpenStream).

package transport

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/metrics"
)

// answerTail is the most of an answer's last bytes answerWatcher keeps: a
// response longer than that (a large tool result) is recorded without its
// error type.
const answerTail = 64 << 10

// answerWatcher is an http.ResponseWriter that keeps the status and at
// least the last answerTail bytes of the answer written through it, from which
// errorType reads the error of the response that ends it. It keeps
// http.Flusher and, through Unwrap, the rest of http.ResponseController.
type answerWatcher struct {
	w      http.ResponseWriter
	status int
	tail   []byte
}

func (a *answerWatcher) Header() http.Header { return a.w.Header() }

func (a *answerWatcher) WriteHeader(status int) {
	if a.status == 0 {
		a.status = status
	}
	a.w.WriteHeader(status)
}

func (a *answerWatcher) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	// Trimmed to answerTail once twice that is kept, so that each byte
	// written is copied a bounded number of times.
	if len(b) >= answerTail {
		a.tail = append(a.tail[:0], b[len(b)-answerTail:]...)
	} else {
		a.tail = append(a.tail, b...)
		if len(a.tail) > 2*answerTail {
			a.tail = append(a.tail[:0], a.tail[len(a.tail)-answerTail:]...)
		}
	}
	return a.w.Write(b)
}

func (a *answerWatcher) FlushError() error { return http.NewResponseController(a.w).Flush() }

func (a *answerWatcher) Flush() { a.FlushError() }

// Unwrap gives http.ResponseController the writer underneath.
func (a *answerWatcher) Unwrap() http.ResponseWriter { return a.w }

// errorType returns the error.type of the answer to a request of method
// (metrics.ResponseErrorType): that of the JSON-RPC response the answer
// ends with, an application/json body or the last data line of an
// event stream; "" when it ends with a result, or with no response whose
// start it kept (a notification's 202, a listen stream cut off), unless
// its HTTP status is an error, then metrics.Other.
func (a *answerWatcher) errorType(method string) string {
	data := bytes.TrimSpace(a.tail)
	if strings.HasPrefix(a.w.Header().Get("Content-Type"), mediaSSE) {
		data = nil
		for line := range bytes.Lines(a.tail) {
			if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				data = bytes.TrimSpace(d)
			}
		}
	}
	if msg, err := jsonrpc.DecodeMessage(data); err == nil {
		if resp, ok := msg.(*jsonrpc.Response); ok {
			return metrics.ResponseErrorType(method, resp)
		}
	}
	if a.status >= http.StatusBadRequest {
		return metrics.Other
	}
	return ""
}
