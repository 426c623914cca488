// listen_bench_test.go measures what one open 2026-07-28
// subscriptions/listen stream holds in the process that serves it
// (Options.MaxListens is sized by it).

package transport_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

// listenStreams is how many listen streams BenchmarkListenStream holds open
// at once per iteration.
const listenStreams = 200

// BenchmarkListenStream opens listenStreams listen streams of the demo
// server, each on a raw loopback connection that holds nothing but its
// socket on the client's side, waits for their acknowledgments, and
// reports per stream the goroutines, the live heap and the goroutine
// stacks they add. The streams are closed before the next iteration.
func BenchmarkListenStream(b *testing.B) {
	server, _ := listenServer()
	st := newStack(b, server, nil, nil)
	addr := st.srv.Listener.Addr().String()
	open := func(i int) net.Conn {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		body := sessionlessListen(int64(i+1), fmt.Sprintf("demo://bench/%d", i))
		fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
			"MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: subscriptions/listen\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("listen %d: %v %v", i, resp, err)
		}
		if err := mcptest.ReadToAcknowledged(br); err != nil {
			b.Fatal(err)
		}
		return conn
	}
	open(0).Close() // the server's one-time state
	settle := func(goroutines int) {
		for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(100 * time.Millisecond)
	base := runtime.NumGoroutine()
	var goroutines, heap, stack float64
	for b.Loop() {
		settle(base)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		g := runtime.NumGoroutine()
		conns := make([]net.Conn, listenStreams)
		for i := range conns {
			conns[i] = open(i)
		}
		time.Sleep(50 * time.Millisecond) // the goroutines each stream starts after its acknowledgment
		runtime.GC()
		runtime.ReadMemStats(&after)
		goroutines += float64(runtime.NumGoroutine() - g)
		heap += float64(after.HeapAlloc) - float64(before.HeapAlloc)
		stack += float64(after.StackInuse) - float64(before.StackInuse)
		for _, c := range conns {
			c.Close()
		}
	}
	n := float64(b.N * listenStreams)
	b.ReportMetric(goroutines/n, "goroutines/stream")
	b.ReportMetric(heap/n, "heapB/stream")
	b.ReportMetric(stack/n, "stackB/stream")
}
