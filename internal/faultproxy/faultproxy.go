// Package faultproxy is a loopback TCP proxy for tests that cuts
// connections at chosen points, to exercise resumption over real HTTP: a
// test decides, chunk by chunk, how much of what the server sends reaches
// the client before the connection is torn down.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Decision says what to do with a chunk the server sent.
type Decision struct {
	// Forward is how many bytes of the chunk reach the client.
	Forward int
	// Cut closes the connection, both ways, after those bytes.
	Cut bool
}

// Filter sees each chunk the server sends on connection conn (numbered from
// 1 in accept order) and decides its fate. It is called from one goroutine
// per connection; filters shared across connections must synchronize.
type Filter func(conn int, chunk []byte) Decision

// Proxy forwards connections from a loopback listener to a target address.
type Proxy struct {
	ln     net.Listener
	target string
	filter Filter

	mu     sync.Mutex
	n      int
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New starts a proxy on 127.0.0.1 (a free port) to target (host:port).
// filter may be nil: everything is forwarded until CutAll or Close.
func New(target string, filter Filter) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, filter: filter, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Conns returns how many connections the proxy has accepted.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.n++
		id := p.n
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(id, c)
	}
}

func (p *Proxy) serve(id int, client net.Conn) {
	defer p.wg.Done()
	defer p.forget(client)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	p.conns[server] = struct{}{}
	p.mu.Unlock()
	defer p.forget(server)
	closeBoth := func() {
		client.Close()
		server.Close()
	}
	go func() {
		io.Copy(server, client)
		closeBoth()
	}()
	buf := make([]byte, 32*1024)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			d := Decision{Forward: n}
			if p.filter != nil {
				d = p.filter(id, buf[:n])
				d.Forward = max(0, min(d.Forward, n))
			}
			if _, werr := client.Write(buf[:d.Forward]); werr != nil || d.Cut {
				closeBoth()
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				closeBoth()
				return
			}
			// The server finished: let the client see the end too.
			if tc, ok := client.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			return
		}
	}
}

func (p *Proxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// CutAll closes every open connection now.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	return err
}
