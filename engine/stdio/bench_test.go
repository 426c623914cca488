package stdio

// Benchmarks of a subprocess's life (start, initialize, close; restore)
// and of one call through the engine and back.

import (
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// benchEngine returns an Engine running command (this test binary as the
// test server when command is "").
func benchEngine(b *testing.B, command string) *Engine {
	b.Helper()
	env := []string{noRaceExitSleep}
	if command == "" {
		exe, err := os.Executable()
		if err != nil {
			b.Fatal(err)
		}
		command = exe
		env = append(env, roleEnv+"=server")
	}
	e, err := New(Options{Command: command, Env: env, MaxProcesses: -1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e
}

// startAndInitialize measures one session generation's life: Start, the
// client's initialize answered, Close.
func startAndInitialize(b *testing.B, e *Engine) {
	b.Helper()
	initID, _ := jsonrpc.MakeID(float64(1))
	info := engine.Info{Token: "BENCHTOKENABCDEFGHIJKLMNOP", Generation: 1, Logger: slog.New(slog.DiscardHandler)}
	for b.Loop() {
		out := newOutbox()
		s, err := e.Start(b.Context(), info, out)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Deliver(b.Context(), &jsonrpc.Request{ID: initID, Method: "initialize", Params: json.RawMessage(initParams)}, engine.Request{}); err != nil {
			b.Fatal(err)
		}
		if m := <-out.ch; !isResult(m.msg, initID) {
			b.Fatalf("initialize answered with %v", m.msg)
		}
		s.Close()
	}
}

// BenchmarkStartInitializeClose: a Go stdio server (this test binary, a
// go-sdk server) from fork to its initialize result, plus its shutdown.
func BenchmarkStartInitializeClose(b *testing.B) {
	startAndInitialize(b, benchEngine(b, ""))
}

// BenchmarkStartInitializeCloseEverything: the same for the go-sdk's
// conformance everything-server.
func BenchmarkStartInitializeCloseEverything(b *testing.B) {
	bin := b.TempDir()
	install := exec.Command("go", "install", everythingServer)
	install.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=")
	if out, err := install.CombinedOutput(); err != nil {
		b.Fatalf("go install: %v\n%s", err, out)
	}
	startAndInitialize(b, benchEngine(b, filepath.Join(bin, "everything-server")))
}

// BenchmarkRestore: Start of a re-created generation, which replays
// initialize, notifications/initialized, logging/setLevel and one
// resources/subscribe before it returns, plus its shutdown.
func BenchmarkRestore(b *testing.B) {
	e := benchEngine(b, "")
	st := &engine.State{ProtocolVersion: "2025-11-25", InitializeParams: json.RawMessage(initParams),
		Initialized: true, LogLevel: "info", Subscriptions: []string{"test://watched"}}
	info := engine.Info{Token: "BENCHTOKENABCDEFGHIJKLMNOP", Generation: 2, State: st, Logger: slog.New(slog.DiscardHandler)}
	for b.Loop() {
		s, err := e.Start(b.Context(), info, newOutbox())
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkCallRoundTrip: one tools/call through the engine and a live
// subprocess and back, as the outbox sees it.
func BenchmarkCallRoundTrip(b *testing.B) {
	e := benchEngine(b, "")
	out := newOutbox()
	s, err := e.Start(b.Context(), engine.Info{Token: "BENCHTOKENABCDEFGHIJKLMNOP", Generation: 1, Logger: slog.New(slog.DiscardHandler)}, out)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	initID, _ := jsonrpc.MakeID(float64(1))
	s.Deliver(b.Context(), &jsonrpc.Request{ID: initID, Method: "initialize", Params: json.RawMessage(initParams)}, engine.Request{})
	<-out.ch
	s.Deliver(b.Context(), &jsonrpc.Request{Method: "notifications/initialized"}, engine.Request{})
	params := json.RawMessage(`{"name":"countdown","arguments":{"n":0,"delay_ms":0}}`)
	n := 1
	for b.Loop() {
		n++
		id, _ := jsonrpc.MakeID(float64(n))
		if err := s.Deliver(b.Context(), &jsonrpc.Request{ID: id, Method: "tools/call", Params: params}, engine.Request{}); err != nil {
			b.Fatal(err)
		}
		if m := <-out.ch; !isResult(m.msg, id) {
			b.Fatalf("call answered with %v", m.msg)
		}
	}
}

// BenchmarkStartInitializeCloseNode: the same for the reference TypeScript
// server @modelcontextprotocol/server-everything on Node.js 22.
func BenchmarkStartInitializeCloseNode(b *testing.B) {
	testenv.NeedNode(b)
	e, err := New(Options{Command: testenv.Node(b), Args: []string{testenv.NPMBin(b, "mcp-server-everything"), "stdio"},
		MaxProcesses: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	startAndInitialize(b, e)
}
