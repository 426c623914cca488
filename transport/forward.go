package transport

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
	"time"

	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// Fleet mode (DESIGN.md, "Fleet mode"): every request for a session is
// served by the replica that owns the session's live state, so that the
// session's engine runs, and its SSE streams are read, in one process,
// where the one-reader-per-stream rule (attach.go) holds as in a single
// process. A replica that receives a request for a session another
// replica owns (session.ErrRemote) forwards the HTTP request to the owner
// and streams the answer back. Forwarding was measured against a
// per-session inbox stream in Redis (store/redis/forward_bench_test.go):
// one HTTP hop on a kept-alive connection costs less than an inbox write,
// a blocking read on the owner and a wake-up of the receiving replica, and
// it carries the SSE response as it is.
//
// When the owner cannot be reached (connection refused, dial timeout, no
// directory entry: it died), the replica checks the record again every
// ownerPoll until the owner's lease lapses, then takes the session over
// (generation+1) and serves the request itself. Nothing is acknowledged
// meanwhile. The wait is bounded by the lease expiry first seen plus
// ownerGrace, and by the request's context.

// ForwardedByHeader is set on a forwarded request to the ID of the replica
// that forwarded it. A request that carries it and finds that the session
// is, again, owned elsewhere is refused (503 owner_moved, Retry-After: 1)
// rather than forwarded a second time, so that replicas that disagree on
// the owner for a moment cannot bounce a request between them.
const ForwardedByHeader = "Tidemark-Forwarded-By"

// Timings of forwarding.
const (
	// ownerPoll is how often a replica that cannot reach a session's owner
	// looks at the record again, waiting for the lease to lapse.
	ownerPoll = 200 * time.Millisecond
	// ownerGrace is how long past the owner's lease expiry (as first seen)
	// the wait goes on before the request is refused with
	// owner_unreachable: the owner renewed its lease meanwhile, so it is
	// alive but cannot be reached from here.
	ownerGrace = time.Second
	// forwardDialTimeout bounds connecting to an owner.
	forwardDialTimeout = 2 * time.Second
	// forwardHeaderTimeout bounds the wait for a forwarded request's
	// response headers (SSE answers only; a JSON answer's headers come with
	// the whole response). An owner that accepts connections but does not
	// answer (paused, overloaded) is given up on after it.
	forwardHeaderTimeout = 10 * time.Second
	// retryAfterSeconds is the Retry-After value of the fleet refusals.
	retryAfterSeconds = 1
)

// Directory finds the URL at which a replica serves MCP, so that requests
// for the sessions it owns can be forwarded to it. store/redis implements
// it (redisstore.Store.Lookup, with replicas announcing themselves).
type Directory interface {
	// Lookup returns the MCP endpoint URL of replica, e.g.
	// "http://10.0.0.7:8080/mcp". An error wrapping store.ErrUnavailable
	// means the directory cannot be reached (503 unavailable); any other
	// error means the replica is not known (treated as unreachable).
	Lookup(ctx context.Context, replica string) (string, error)
}

// errServed is resolve's signal that the response has been written: the
// request was forwarded or refused.
var errServed = errors.New("transport: request served")

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

// resolve returns the live session of token for a request by userID, as
// Registry.Get does, except that a session another replica owns is served
// here: the request is forwarded to the owner, or, when the owner cannot
// be reached, served locally after its lease lapsed and the session was
// taken over, or refused. It then returns errServed. body is the POST
// body already read (nil for GET). Other errors are Get's, for the caller
// to map.
func (h *Handler) resolve(w http.ResponseWriter, r *http.Request, token, userID string, body []byte) (*session.Live, error) {
	ctx := r.Context()
	var seen *session.RemoteError // the owner and lease the wait is about
	var deadline time.Time
	waiting := false // the wait has been logged
	for {
		live, err := h.reg.Get(ctx, token, userID)
		var re *session.RemoteError
		if !errors.As(err, &re) {
			return live, err
		}
		if by := r.Header.Get(ForwardedByHeader); by != "" {
			h.refuseRetry(w, ReasonOwnerMoved, "the session is owned by another replica than the one "+
				quote(by)+" forwarded this request to; retry")
			return nil, errServed
		}
		if seen == nil || seen.Owner != re.Owner || seen.Generation != re.Generation {
			seen, deadline = re, re.LeaseUntil.Add(ownerGrace)
		}
		why := errors.New("no replica directory")
		if h.opts.Directory != nil {
			target, err := h.opts.Directory.Lookup(ctx, re.Owner)
			if errors.Is(err, store.ErrUnavailable) {
				h.registryError(err).write(w, h.logger)
				return nil, errServed
			}
			why = err
			if err == nil {
				if why = h.forward(w, r, token, re, target, body); why == nil {
					return nil, errServed
				}
			}
		}
		// The owner cannot be reached; it may have died, and then its lease
		// lapses soon. Nothing has been acknowledged.
		if !waiting {
			waiting = true
			h.logger.Info("owner unreachable; waiting for its lease to lapse", "session", store.Prefix(token),
				"generation", re.Generation, "owner", re.Owner, "lease_until", re.LeaseUntil, "reason", ReasonOwnerUnreachable, "error", why)
		}
		now := time.Now()
		if !now.Before(deadline) {
			h.logger.Warn("owner unreachable", "session", store.Prefix(token), "generation", re.Generation,
				"owner", re.Owner, "reason", ReasonOwnerUnreachable)
			h.refuseRetry(w, ReasonOwnerUnreachable, "the replica "+quote(re.Owner)+" that owns the session "+
				"cannot be reached and still holds its lease; retry")
			return nil, errServed
		}
		t := time.NewTimer(min(ownerPoll, deadline.Sub(now)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// forward sends r, with body as its body when non-nil, to the owner's
// endpoint target and streams the answer back (SSE flushed as it comes).
// It returns why, having written nothing, when the owner could not be
// connected to; then the caller waits for the owner's lease to lapse.
// Otherwise it returns nil: the request was answered, by the owner or
// with 503 owner_unreachable for a failure after it was sent (the owner
// may have seen it: the client decides whether to retry); a failure after
// the answer began cuts the response (the client resumes).
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, token string, re *session.RemoteError, target string, body []byte) error {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("owner %q announced the unusable URL %s", re.Owner, quote(target))
	}
	// Shutdown ends forwarded streams too, and waits for them.
	h.conns.active.Add(1)
	defer h.conns.active.Done()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(h.shutdownCtx, cancel)
	defer stop()

	logger := h.logger.With("session", store.Prefix(token), "generation", re.Generation, "owner", re.Owner)
	var unreachable error
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			out.URL.Scheme, out.URL.Host, out.URL.Path, out.URL.RawPath = u.Scheme, u.Host, u.Path, u.RawPath
			out.Host = ""
			out.Header.Set(ForwardedByHeader, h.reg.Owner())
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
		Transport:     h.fwd,
		FlushInterval: -1, // SSE: every event reaches the client as it comes
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			var de *dialError
			if errors.As(err, &de) {
				unreachable = err
				return
			}
			if h.shuttingDown() {
				refuse(http.StatusServiceUnavailable, ReasonUnavailable, "server is shutting down; retry against another replica or later").write(w, h.logger)
				return
			}
			if ctx.Err() != nil {
				return // the client went away
			}
			logger.Warn("forwarding failed", "reason", ReasonOwnerUnreachable, "error", err)
			h.refuseRetry(w, ReasonOwnerUnreachable, "the replica "+quote(re.Owner)+" that owns the session "+
				"failed to answer: "+err.Error()+"; retry")
		},
	}
	logger.Debug("forwarding request", "method", r.Method)
	proxy.ServeHTTP(w, r.WithContext(ctx))
	return unreachable
}

// refuseRetry writes a 503 refusal with Retry-After: 1.
func (h *Handler) refuseRetry(w http.ResponseWriter, reason, message string) {
	e := refuse(http.StatusServiceUnavailable, reason, message)
	e.retryAfter = retryAfterSeconds
	e.write(w, h.logger)
}
