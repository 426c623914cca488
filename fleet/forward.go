// forward.go holds the forwarding of a request to its session's owner:
// the HTTP transport to the owners, the reverse proxy that streams the
// owner's answer back, the wait for that answer to begin, bounded by the
// owner's lease (Leases.Await), and the end of a forwarded stream whose
// owner goes silent.

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
	"sync/atomic"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// forwardDialTimeout bounds connecting to an owner.
const forwardDialTimeout = 2 * time.Second

// Causes of a forwarded request's end before its answer began.
var (
	// errGivenUp: the owner's lease lapsed, or the session moved (GiveUp).
	errGivenUp = errors.New("fleet: forwarded request given up: the owner's lease lapsed")
	// errUnanswered: the owner holds its lease and has not begun to answer
	// within a lease TTL (Unanswered).
	errUnanswered = errors.New("fleet: forwarded request unanswered")
	// errShutdown: the router shuts down.
	errShutdown = errors.New("fleet: router shut down")
)

// outcome is how a forwarded request ended.
type outcome int

const (
	// answered: the owner's answer was streamed back, or cut after it
	// began (the client resumes), or the client went away.
	answered outcome = iota
	// unsent: the owner could not be connected to; nothing was sent.
	unsent
	// givenUp: the request was sent, and given up unanswered when the
	// owner's lease lapsed or the session moved; nothing was written.
	givenUp
	// refused: the request failed after it was sent, or at shutdown;
	// nothing was written, and the *Refusal says why.
	refused
)

// dialError marks an error in connecting to an owner, before any byte of
// the request was sent: the owner is unreachable, and the request can be
// served elsewhere without having been seen.
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial owner: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// newForwardTransport returns the HTTP transport for forwarded requests:
// kept-alive connections to the owners, dial errors marked as such. It
// sets no bound on the wait for an answer: the owner's lease bounds it
// (await).
func newForwardTransport() *http.Transport {
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
	return t
}

// forward sends r, with body as its body when non-nil, to the owner's
// endpoint target and streams the answer back (SSE flushed as it comes).
// re is the owner, generation and lease the lookup found. Until the
// answer begins, the owner's lease is watched (await): a request whose
// owner's lease lapses first is given up (givenUp), one whose owner keeps
// its lease and stays silent for a lease TTL is refused 503
// owner_unreachable. Its outcome says what happened; its error is why
// the owner could not be connected to (unsent), or the *Refusal (refused:
// a failure after the request was sent, where the owner may have seen it
// and the client decides whether to retry, or the shutdown, 503
// unavailable). Nothing is written but the owner's answer.
func (rt *Router) forward(w http.ResponseWriter, r *http.Request, re *RemoteError, target string, body []byte) (outcome, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return unsent, fmt.Errorf("owner %q announced the unusable URL %s", re.Owner, quote(target))
	}
	// Shutdown ends forwarded streams too, and waits for them.
	rt.active.Add(1)
	defer rt.active.Done()
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(rt.stopCtx, func() { cancel(errShutdown) })
	defer stop()

	logger := rt.logger.With("session", store.Prefix(re.Token), "generation", re.Generation, "owner", re.Owner)
	// The answer begins, or the request is given up: whichever comes first
	// wins, and the other never happens.
	var begun atomic.Bool
	giveUp := func(cause error) {
		if begun.CompareAndSwap(false, true) {
			cancel(cause)
		}
	}
	answering := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		rt.await(ctx, re, time.Now(), rt.opts.JSONResponse && r.Method == http.MethodPost, answering, giveUp)
	}()
	defer func() {
		cancel(nil)
		<-watched
	}()

	out, why := answered, error(nil)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			keepNamedHeaders(pr.In.Header, out.Header)
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
			if !begun.CompareAndSwap(false, true) {
				return context.Cause(ctx) // given up a moment before
			}
			close(answering)
			// An owner writes at least a keep-alive comment on an idle
			// stream every 1.5 KeepAlive; one that sends nothing for
			// twice that is stopped or cut off (its lease may have been
			// taken over meanwhile): the stream ends, and the client's
			// resume finds out where the session went.
			if idle := 2 * rt.opts.KeepAlive; idle > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				resp.Body = newIdleBody(resp.Body, idle, func() {
					logger.Warn("the owner sent nothing on a forwarded stream for twice the keep-alive interval; the stream ends and the client resumes",
						"reason", replay.ReasonOwnerUnreachable, "idle", idle)
					cancel(nil)
				})
			}
			return nil
		},
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		// Called before anything is written to w.
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) {
			var de *dialError
			switch cause := context.Cause(ctx); {
			case errors.As(err, &de):
				out, why = unsent, err
			case cause == errGivenUp:
				logger.Info("forwarded request given up unanswered: the owner's lease lapsed; the session is looked up again",
					"reason", replay.ReasonLeaseExpired)
				out = givenUp
			case cause == errUnanswered:
				logger.Warn("the owner holds its lease but did not answer a forwarded request", "reason", replay.ReasonOwnerUnreachable)
				out, why = refused, refuse(replay.ReasonOwnerUnreachable, "the replica "+quote(re.Owner)+" that owns the session "+
					"holds its lease but did not answer; it may have seen the request: retry")
			case cause == errShutdown || rt.shuttingDown():
				out, why = refused, refuse(replay.ReasonUnavailable, "server is shutting down; retry against another replica or later")
			case r.Context().Err() != nil:
				// The client went away.
			default:
				logger.Warn("forwarding failed", "reason", replay.ReasonOwnerUnreachable, "error", err)
				out, why = refused, refuse(replay.ReasonOwnerUnreachable, "the replica "+quote(re.Owner)+" that owns the session "+
					"failed to answer: "+err.Error()+"; retry")
			}
		},
	}
	logger.Debug("forwarding request", "method", r.Method, "target", u.Host)
	proxy.ServeHTTP(w, r.WithContext(ctx))
	return out, why
}

// hopByHop are the header fields that belong to one connection whatever
// a Connection header says (RFC 9110, section 7.6.1; RFC 9112, section
// 9.6; Keep-Alive, Proxy-Connection and Upgrade as net/http/httputil
// treats them).
var hopByHop = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// keepNamedHeaders copies back into out, a forwarded request's headers,
// the fields of in, the request as this replica received it, that in's
// Connection header named and the reverse proxy therefore removed. This
// replica is the origin server of the client's request (the fleet is one
// server; forwarding is how it serves), and it reads those fields
// (Mcp-Session-Id, Last-Event-ID, MCP-Protocol-Version, Authorization,
// …) as any server does, so the owner must see them too for a request to
// answer the same at every replica. Fields that belong to a connection
// (hopByHop) stay removed.
func keepNamedHeaders(in, out http.Header) {
	for _, v := range in.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			if name == "" || hopByHop[name] || len(in.Values(name)) == 0 {
				continue
			}
			out[name] = append([]string(nil), in.Values(name)...)
		}
	}
}

// await watches the lease of re's owner while a request forwarded to it
// at sent waits for its answer to begin (answering is closed when it
// does), as Leases.Await decides from the session's record, read again
// each time the decision is due (RouterOptions.Records; the record last
// read when it cannot be). It calls giveUp with errGivenUp when the
// owner's lease lapses or the session moves, and with errUnanswered when
// a silent owner's bound passes. whole says the answer comes in one piece
// (application/json).
func (rt *Router) await(ctx context.Context, re *RemoteError, sent time.Time, whole bool, answering <-chan struct{}, giveUp func(error)) {
	rec := store.Record{Token: re.Token, Owner: re.Owner, Generation: re.Generation, LeaseUntil: re.LeaseUntil}
	for {
		now := time.Now()
		decision, until := rt.leases.Await(*re, rec, sent, now, rt.answering(now), whole)
		switch decision {
		case GiveUp:
			giveUp(errGivenUp)
			return
		case Unanswered:
			giveUp(errUnanswered)
			return
		}
		t := time.NewTimer(time.Until(until))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-answering:
			t.Stop()
			return
		case <-t.C:
		}
		if rt.opts.Records == nil {
			continue
		}
		if got, err := rt.opts.Records(ctx, re.Token); err == nil {
			rec = got
		}
	}
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
