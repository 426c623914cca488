package connect_test

import (
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/connect"
	"github.com/tidemark-mcp/tidemark/replay"
)

// downServer serves h on a loopback port that can be taken down (no
// connection can be made: connection refused) and brought back on the
// same port, as a server's kill and restart are.
type downServer struct {
	t    *testing.T
	h    http.Handler
	addr string

	mu  sync.Mutex
	srv *http.Server
	wg  sync.WaitGroup
}

func newDownServer(t *testing.T, h http.Handler) *downServer {
	t.Helper()
	d := &downServer{t: t, h: h}
	d.up("127.0.0.1:0")
	t.Cleanup(d.down)
	return d
}

func (d *downServer) url() string { return "http://" + d.addr + "/mcp" }

// up serves on addr.
func (d *downServer) up(addr string) {
	d.t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		d.t.Fatal(err)
	}
	d.addr = ln.Addr().String()
	srv := &http.Server{Handler: d.h}
	d.mu.Lock()
	d.srv = srv
	d.mu.Unlock()
	d.wg.Go(func() { srv.Serve(ln) })
}

// down closes the listener and every connection.
func (d *downServer) down() {
	d.mu.Lock()
	srv := d.srv
	d.srv = nil
	d.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	d.wg.Wait()
}

// TestNewCallWhileServerDown: in both eras, a call the host sends while
// no connection to the server can be made is sent again, within
// --resume-timeout, and gets its result once the server is back 500 ms
// later (the fault table: a new call's POST is retried for up to
// --resume-timeout); a call sent while the server stays down past
// --resume-timeout fails with server_unreachable, saying it was not sent.
func TestNewCallWhileServerDown(t *testing.T) {
	for _, protocol := range []string{connect.ProtocolStateful, connect.ProtocolSessionless} {
		t.Run(protocol, func(t *testing.T) {
			h := newHandler()
			t.Cleanup(func() { h.Close() })
			d := newDownServer(t, h)
			host := startBridge(t, d.url(), connect.Options{Protocol: protocol, ResumeTimeout: 1500 * time.Millisecond,
				HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
			host.initialize(`{}`)
			host.send(`{"jsonrpc":"2.0","id":"first","method":"tools/call","params":{"name":"echo","arguments":{"text":"first"}}}`)
			if r, _ := host.answer("first"); toolText(t, r) != "first" {
				t.Fatalf("echo before the outage: %s", r.Result)
			}
			d.down()
			host.send(`{"jsonrpc":"2.0","id":"back","method":"tools/call","params":{"name":"echo","arguments":{"text":"back"}}}`)
			time.Sleep(500 * time.Millisecond)
			d.up(d.addr)
			r, _ := host.answer("back")
			if got := toolText(t, r); got != "back" {
				t.Errorf("echo sent while the server was down: %q, want %q", got, "back")
			}
			d.down()
			host.send(`{"jsonrpc":"2.0","id":"gone","method":"tools/call","params":{"name":"echo","arguments":{"text":"gone"}}}`)
			r, _ = host.answer("gone")
			wantFailure(t, r, replay.ReasonServerUnreachable, "so the call was not sent")
		})
	}
}
