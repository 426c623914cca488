package resume_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/resume"
)

// A stdio bridge resumes a cut stream toward any MCP server and tells its
// host at once about a lost session or generation: here the server's
// generation ended, and the calls the stream carried fail.
func ExampleStream_Resume() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"the session's state was re-created",`+
			`"data":{"reason":"generation_mismatch","lostRequests":[7]}}}`)
	}))
	defer srv.Close()

	st := &resume.Stream{Policy: resume.Policy{Timeout: 30 * time.Second, RetryBareConflict: true}}
	st.Retry = 10 * time.Millisecond // the stream's retry field, as read
	req := resume.Request{URL: srv.URL, Session: "sess", Version: "2025-11-25", LastEventID: "c41"}
	res, err := st.Resume(context.Background(), req, io.ErrUnexpectedEOF)
	switch {
	case err != nil:
		fmt.Println("context ended:", err)
	case res.Kind == resume.Resumed:
		defer res.Response.Body.Close()
		fmt.Println("read the stream on")
	case res.Kind == resume.SessionLost:
		fmt.Println("initialize again; every call of the session failed")
	case res.Kind == resume.GenerationLost && res.LostKnown:
		fmt.Println("initialize again; fail at once the calls", res.LostRequests[0].Raw())
	case res.Kind == resume.GenerationLost:
		fmt.Println("initialize again; fail every call of the stream")
	default:
		fmt.Println("fail the stream's call:", res.Outcome, "expired:", res.Expired)
	}
	// Output: initialize again; fail at once the calls 7
}
