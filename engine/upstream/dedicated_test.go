package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// roundTripFunc is an http.RoundTripper of one function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestDedicatedCloseEndsEndlessStream: closing the body of an SSE answer
// that never ends returns at once and closes the connection (the body's
// own Close would read the stream to its end first).
func TestDedicatedCloseEndsEndlessStream(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the connection closed
		close(gone)
	}))
	defer func() {
		srv.CloseClientConnections() // a Close that reads on returns
		srv.Close()
	}()
	d := &dedicated{dial: (&net.Dialer{}).DialContext, fallback: roundTripFunc(func(*http.Request) (*http.Response, error) {
		t.Error("a plain http:// GET went to the fallback")
		return nil, errors.New("fallback")
	})}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/mcp", nil)
	resp, err := d.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("answer %d %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	closed := make(chan struct{})
	go func() {
		resp.Body.Close()
		close(closed)
	}()
	for what, ch := range map[string]chan struct{}{"Close returned": closed, "the server saw the connection close": gone} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not within 5 s", what)
		}
	}
}

// TestDedicatedCancel: a request whose context ends before the answer
// fails with the context's error, as through http.Transport.
func TestDedicatedCancel(t *testing.T) {
	arrived := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
	}))
	defer srv.Close()
	d := &dedicated{dial: (&net.Dialer{}).DialContext}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/mcp", nil)
	go func() {
		<-arrived
		cancel()
	}()
	_, err := d.RoundTrip(req)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RoundTrip: %v, want context.Canceled", err)
	}
}

// TestDedicatedFallback: https:// requests and those the proxy function
// sends through a proxy go to the fallback transport, which answers them;
// nothing is dialed.
func TestDedicatedFallback(t *testing.T) {
	proxied := "http://proxied.example/mcp"
	for _, target := range []string{"https://upstream.example/mcp", proxied} {
		var got *http.Request
		d := &dedicated{
			dial: func(context.Context, string, string) (net.Conn, error) {
				t.Errorf("%s: dialed", target)
				return nil, errors.New("dial")
			},
			proxy: func(r *http.Request) (*url.URL, error) {
				if r.URL.String() == proxied {
					return url.Parse("http://proxy.example:3128")
				}
				return nil, nil
			},
			fallback: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				got = r
				return &http.Response{StatusCode: http.StatusTeapot, Body: http.NoBody, Request: r}, nil
			}),
		}
		req, _ := http.NewRequest(http.MethodGet, target, nil)
		resp, err := d.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusTeapot || got != req {
			t.Errorf("%s: %v %v, want the fallback's 418 to that request", target, resp, err)
		}
	}
}
