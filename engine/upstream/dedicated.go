// This file holds the transport of the standalone GET streams: one
// connection of their own each, read by the goroutine that reads the
// stream, so that an awake session runs one goroutine instead of three.

package upstream

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
)

// dedicated is the http.RoundTripper of the standalone GET streams
// (listen.go). Each lasts as long as its generation, so no connection it
// holds is ever reused: http.Transport would give each a connection with
// two goroutines of its own (its reader and its writer) and two 4 KiB
// buffers, on top of the goroutine that reads the stream. The runtime
// never frees a goroutine's descriptor (about 450 bytes), so every
// goroutine an awake session runs stays in the process's memory after the
// session hibernates. dedicated dials a connection per request, writes the
// request and reads the answer on the caller's goroutine, and closes the
// connection with the answer's body, or when the request's context ends.
//
// It serves plain http:// requests that go to the upstream directly;
// others (https://, or through a proxy of Options's environment) go to
// fallback, whose connections TLS may multiplex (HTTP/2).
type dedicated struct {
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	proxy    func(*http.Request) (*url.URL, error) // nil: no proxy
	fallback http.RoundTripper
}

// RoundTrip implements http.RoundTripper. Its errors are the dial's, the
// write's and the answer's reading (HTTP/1.1, RFC 9112), or the context's
// once it ended.
func (d *dedicated) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || req.Body != nil && req.Body != http.NoBody {
		return d.fallback.RoundTrip(req)
	}
	if d.proxy != nil {
		if u, err := d.proxy(req); err != nil || u != nil {
			return d.fallback.RoundTrip(req)
		}
	}
	ctx := req.Context()
	port := req.URL.Port()
	if port == "" {
		port = "80"
	}
	nc, err := d.dial(ctx, "tcp", net.JoinHostPort(req.URL.Hostname(), port))
	if err != nil {
		return nil, err
	}
	c := &dedicatedConn{Conn: nc}
	c.stop = context.AfterFunc(ctx, c.close)
	fail := func(err error) (*http.Response, error) {
		c.close()
		c.stop()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	if err := req.Write(nc); err != nil {
		return fail(err)
	}
	br := bufio.NewReader(nc)
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return fail(err)
		}
		// An informational answer (1xx) comes before the answer: read on,
		// as http.Transport does.
		if resp.StatusCode >= 100 && resp.StatusCode <= 199 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		resp.Body = &dedicatedBody{body: resp.Body, conn: c, ctx: ctx}
		return resp, nil
	}
}

// dedicatedConn is a connection of dedicated's, closed once.
type dedicatedConn struct {
	net.Conn
	once sync.Once
	stop func() bool // stops the close at the request context's end
}

func (c *dedicatedConn) close() { c.once.Do(func() { c.Conn.Close() }) }

// dedicatedBody is the body of an answer of dedicated: closing it closes
// its connection, and a read that fails after the request's context ended
// returns the context's cause, as http.Transport's body does.
type dedicatedBody struct {
	body io.ReadCloser
	conn *dedicatedConn
	ctx  context.Context
}

func (b *dedicatedBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil && err != io.EOF && b.ctx.Err() != nil {
		err = context.Cause(b.ctx)
	}
	return n, err
}

// Close closes the connection first: the body's own Close reads what is
// left of it, which an endless stream never ends.
func (b *dedicatedBody) Close() error {
	b.conn.stop()
	b.conn.close()
	b.body.Close()
	return nil
}
