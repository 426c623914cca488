// forward.go holds the forwarding of a request to its session's owner:
// the HTTP transport to the owners, the reverse proxy that streams the
// owner's answer back, and the end of a forwarded stream whose owner goes
// silent.

package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// Timings of forwarding.
const (
	// forwardDialTimeout bounds connecting to an owner.
	forwardDialTimeout = 2 * time.Second
	// forwardHeaderTimeout bounds the wait for a forwarded request's
	// response headers (SSE answers only; a JSON answer's headers come with
	// the whole response). An owner that accepts connections but does not
	// answer (paused, overloaded) is given up on after it.
	forwardHeaderTimeout = 10 * time.Second
)

// dialError marks an error in connecting to an owner, before any byte of
// the request was sent: the owner is unreachable, and the request can be
// served elsewhere without having been seen.
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial owner: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// newForwardTransport returns the HTTP transport for forwarded requests:
// kept-alive connections to the owners, dial errors marked as such.
func newForwardTransport(jsonResponse bool) *http.Transport {
	d := &net.Dialer{Timeout: forwardDialTimeout, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, &dialError{err}
			}
			return c, nil
		},
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	if !jsonResponse {
		t.ResponseHeaderTimeout = forwardHeaderTimeout
	}
	return t
}

// forward sends r, with body as its body when non-nil, to the owner's
// endpoint target and streams the answer back (SSE flushed as it comes).
// It returns the error why, having written nothing, when the owner could
// not be connected to; then the caller waits for the owner's lease to
// lapse. It returns a refusal, having written nothing, for a failure after the
// request was sent (503 owner_unreachable: the owner may have seen it, and
// the client decides whether to retry) or at shutdown (503 unavailable).
// Otherwise the request was answered: by the owner, or cut by a failure
// after the answer began (the client resumes), or not at all because the
// client went away.
func (rt *Router) forward(w http.ResponseWriter, r *http.Request, re *RemoteError, target string, body []byte) (*Refusal, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("owner %q announced the unusable URL %s", re.Owner, quote(target))
	}
	// Shutdown ends forwarded streams too, and waits for them.
	rt.active.Add(1)
	defer rt.active.Done()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(rt.stopCtx, cancel)
	defer stop()

	logger := rt.logger.With("session", store.Prefix(re.Token), "generation", re.Generation, "owner", re.Owner)
	var unreachable error
	var ref *Refusal
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			out.URL.Scheme, out.URL.Host, out.URL.Path, out.URL.RawPath = u.Scheme, u.Host, u.Path, u.RawPath
			out.Host = ""
			out.Header.Set(ForwardedByHeader, rt.leases.Owner)
			// This replica has checked Origin against its own host; the
			// owner would compare it with another host and refuse.
			out.Header.Del("Origin")
			pr.SetXForwarded()
			if body != nil {
				out.Body = io.NopCloser(bytes.NewReader(body))
				out.ContentLength = int64(len(body))
				out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			}
		},
		Transport:     rt.fwd,
		FlushInterval: -1, // SSE: every event reaches the client as it comes
		ModifyResponse: func(resp *http.Response) error {
			// An owner writes at least a keep-alive comment on an idle
			// stream every 1.5 KeepAlive; one that sends nothing for
			// twice that is stopped or cut off (its lease may have been
			// taken over meanwhile): the stream ends, and the client's
			// resume finds out where the session went.
			if idle := 2 * rt.opts.KeepAlive; idle > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				resp.Body = newIdleBody(resp.Body, idle, func() {
					logger.Warn("the owner sent nothing on a forwarded stream for twice the keep-alive interval; the stream ends and the client resumes",
						"reason", replay.ReasonOwnerUnreachable, "idle", idle)
					cancel()
				})
			}
			return nil
		},
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		// Called before anything is written to w.
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) {
			var de *dialError
			switch {
			case errors.As(err, &de):
				unreachable = err
			case rt.shuttingDown():
				ref = refuse(replay.ReasonUnavailable, "server is shutting down; retry against another replica or later")
			case ctx.Err() != nil:
				// The client went away.
			default:
				logger.Warn("forwarding failed", "reason", replay.ReasonOwnerUnreachable, "error", err)
				ref = refuse(replay.ReasonOwnerUnreachable, "the replica "+quote(re.Owner)+" that owns the session "+
					"failed to answer: "+err.Error()+"; retry")
			}
		},
	}
	logger.Debug("forwarding request", "method", r.Method)
	proxy.ServeHTTP(w, r.WithContext(ctx))
	return ref, unreachable
}

// idleBody is a forwarded SSE response body that calls stalled when no
// byte has come for idle.
type idleBody struct {
	io.ReadCloser
	idle time.Duration
	t    *time.Timer
}

func newIdleBody(rc io.ReadCloser, idle time.Duration, stalled func()) *idleBody {
	return &idleBody{ReadCloser: rc, idle: idle, t: time.AfterFunc(idle, stalled)}
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.t.Reset(b.idle)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.t.Stop()
	return b.ReadCloser.Close()
}
