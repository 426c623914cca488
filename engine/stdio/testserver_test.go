package stdio

// The roles this test binary plays when it runs as a subprocess: the stdio
// MCP server the tests put behind the engine, and misbehaving commands.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark/engine"
)

// roleEnv makes this test binary act as something other than the tests:
// "server" is the stdio MCP server the tests put behind the engine (and
// behind `tidemark serve --stdio`), "stubborn" is that server ignoring
// SIGTERM, SIGPIPE and the end of its stdin, "gateway" an engine running the
// stubborn server (runGateway), "sleeper" is a grandchild that only
// exists, started by the server's spawn tool (and, as a subprocess, a
// command that never answers initialize, like `sleep 100`), "spew"
// writes numbered lines that are not JSON-RPC to stdout without end, like
// `sh -c yes`, and "oneline" reads one line of its stdin and exits once
// told to (runOneLine).
const roleEnv = "TIDEMARK_STDIO_TEST_ROLE"

// garbageEnv, set to a number N for the server, makes it write N lines
// that are not JSON-RPC ("this line is not JSON-RPC: i of N") to stdout
// before serving.
const garbageEnv = "TIDEMARK_STDIO_TEST_GARBAGE"

// lateInitEnv, set for the server, makes it write "initialize received"
// to stderr when initialize comes, answer it only once its stdin has
// ended, and end itself lateInitExit after that: a slowly starting server
// that answers the initialize in flight when its session closes its stdin,
// before it exits.
const lateInitEnv = "TIDEMARK_STDIO_TEST_LATE_INIT"

// lateInitExit is how long the server of lateInitEnv goes on after its
// stdin ended: time to write its answer.
const lateInitExit = time.Second

// stderrEnv, set to a number N for the server, makes it write N lines
// ("stderr line i of N") to stderr before serving.
const stderrEnv = "TIDEMARK_STDIO_TEST_STDERR"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "server":
		os.Exit(runTestServer(false))
	case "stubborn":
		os.Exit(runTestServer(true))
	case "sleeper":
		time.Sleep(time.Hour)
		os.Exit(0)
	case "spew":
		os.Exit(runSpew())
	case "oneline":
		os.Exit(runOneLine())
	case "gateway":
		os.Exit(runGateway())
	}
	goleak.VerifyTestMain(m)
}

// runGateway plays a Tidemark process: it starts an engine whose
// subprocess is the stubborn server, writes that subprocess's pid to
// stdout, and waits to be killed.
func runGateway() int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	e, err := New(Options{Command: exe, Env: []string{roleEnv + "=stubborn", outliveEnv + "=1", noRaceExitSleep}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := e.Start(context.Background(), engine.Info{Token: "GATEWAYTOKENABCDEFGHIJKLMN", Generation: 1}, newOutbox())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(s.(*proc).pid)
	select {}
}

// observed is what the test server saw of its session, returned by the
// state tool: it shows what a re-created session's subprocess was told.
type observed struct {
	ClientName    string   `json:"clientName"`
	Initialized   bool     `json:"initialized"`
	Level         string   `json:"level"`
	Subscriptions []string `json:"subscriptions"`
}

// whoami is the result of the whoami tool.
type whoami struct {
	Pid  int      `json:"pid"`
	Pgid int      `json:"pgid"`
	Env  []string `json:"env"` // sorted
}

// lateEOF reads r; at the end of r it closes ended, and reports the end
// only delay after it came.
type lateEOF struct {
	r     *os.File
	ended chan struct{}
	once  sync.Once
	delay time.Duration
}

func (l *lateEOF) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if errors.Is(err, io.EOF) {
		l.once.Do(func() { close(l.ended) })
		time.Sleep(l.delay)
	}
	return n, err
}

func (l *lateEOF) Close() error { return l.r.Close() }

// exitWithParent ends the process once its parent has: a gateway the test
// killed with SIGKILL (testenv.StartProcess's cleanup) ends no subprocess,
// and a server with a call that never returns (hang), or a stubborn one,
// would otherwise outlive the test.
func exitWithParent() {
	parent := os.Getppid()
	for os.Getppid() == parent {
		time.Sleep(100 * time.Millisecond)
	}
	os.Exit(0)
}

// outliveEnv, set for the server, keeps it from ending with its parent
// (exitWithParent): the test of a killed gateway sees whether something
// else ends it.
const outliveEnv = "TIDEMARK_STDIO_TEST_OUTLIVE"

// exitFileEnv names the file whose creation ends the "oneline" role.
const exitFileEnv = "TIDEMARK_STDIO_TEST_EXIT_FILE"

// runOneLine reads one line of its stdin and no more, then exits with
// status 3 once the file named by exitFileEnv exists: a server that stops
// reading its input, with messages still queued for it, and then exits.
func runOneLine() int {
	bufio.NewReader(os.Stdin).ReadString('\n')
	for {
		if _, err := os.Stat(os.Getenv(exitFileEnv)); err == nil {
			return 3
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runSpew writes "spew 1", "spew 2", ... to stdout, one per line, until a
// write fails; it never reads its stdin.
func runSpew() int {
	w := bufio.NewWriter(os.Stdout)
	for i := 1; ; i++ {
		if _, err := fmt.Fprintf(w, "spew %d\n", i); err != nil {
			return 1
		}
	}
}

// runTestServer serves a go-sdk MCP server over stdin and stdout with the
// tools the tests call, and returns the exit code.
func runTestServer(stubborn bool) int {
	if stubborn {
		signal.Ignore(syscall.SIGTERM)
		// A write to a stdout or stderr nobody reads fails instead of
		// ending the process, as in a Python server.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	}
	fmt.Fprintf(os.Stderr, "testserver ready pid=%d\n", os.Getpid())
	n, _ := strconv.Atoi(os.Getenv(garbageEnv))
	for i := 1; i <= n; i++ {
		fmt.Printf("this line is not JSON-RPC: %d of %d\n", i, n)
	}
	n, _ = strconv.Atoi(os.Getenv(stderrEnv))
	for i := 1; i <= n; i++ {
		fmt.Fprintf(os.Stderr, "stderr line %d of %d\n", i, n)
	}
	if os.Getenv(outliveEnv) == "" {
		go exitWithParent()
	}
	lateInit := os.Getenv(lateInitEnv) != ""
	stdin := &lateEOF{r: os.Stdin, ended: make(chan struct{}), delay: lateInitExit}
	var mu sync.Mutex
	var seen observed
	server := mcp.NewServer(&mcp.Implementation{Name: "stdio-testserver", Version: "1.0.0"}, &mcp.ServerOptions{
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			var p struct {
				ClientInfo struct {
					Name string `json:"name"`
				} `json:"clientInfo"`
				Level string `json:"level"`
				URI   string `json:"uri"`
			}
			if b, err := json.Marshal(req.GetParams()); err == nil {
				json.Unmarshal(b, &p)
			}
			if lateInit && method == "initialize" {
				fmt.Fprintln(os.Stderr, "initialize received")
				<-stdin.ended
			}
			mu.Lock()
			switch method {
			case "initialize":
				seen.ClientName = p.ClientInfo.Name
			case "notifications/initialized":
				seen.Initialized = true
			case "logging/setLevel":
				seen.Level = p.Level
			case "resources/subscribe":
				seen.Subscriptions = append(seen.Subscriptions, p.URI)
			}
			mu.Unlock()
			return next(ctx, method, req)
		}
	})
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	jsonText := func(v any) *mcp.CallToolResult {
		b, _ := json.Marshal(v)
		return text(string(b))
	}

	type countdownArgs struct {
		N       int    `json:"n"`
		DelayMS int    `json:"delay_ms"`
		Label   string `json:"label"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "countdown", Description: "n steps; each waits delay_ms, then sends progress i of n and the info log line \"<label> tick i\""},
		func(ctx context.Context, req *mcp.CallToolRequest, a countdownArgs) (*mcp.CallToolResult, any, error) {
			tok := req.Params.GetProgressToken()
			for i := 1; i <= a.N; i++ {
				select {
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				case <-time.After(time.Duration(a.DelayMS) * time.Millisecond):
				}
				if tok != nil {
					req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: float64(a.N)})
				}
				req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: fmt.Sprintf("%s tick %d", a.Label, i)})
			}
			return text(fmt.Sprintf("done %d", a.N)), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "whoami", Description: "this process's pid, process group and sorted environment"},
		func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error) {
			env := slices.Sorted(slices.Values(os.Environ()))
			return jsonText(whoami{Pid: os.Getpid(), Pgid: syscall.Getpgrp(), Env: env}), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "spawn", Description: "start a grandchild process that sleeps; returns its pid"},
		func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error) {
			exe, err := os.Executable()
			if err != nil {
				return nil, nil, err
			}
			cmd := exec.Command(exe)
			cmd.Env = []string{roleEnv + "=sleeper"}
			if err := cmd.Start(); err != nil {
				return nil, nil, err
			}
			go cmd.Wait()
			return text(fmt.Sprint(cmd.Process.Pid)), nil, nil
		})
	type askArgs struct {
		Question string `json:"question"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "ask", Description: "elicit an answer to question from the client; returns the answer"},
		func(ctx context.Context, req *mcp.CallToolRequest, a askArgs) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
				Message: a.Question,
				RequestedSchema: map[string]any{
					"type":       "object",
					"properties": map[string]any{"answer": map[string]any{"type": "string"}},
				},
			})
			if err != nil {
				return nil, nil, err
			}
			return text(fmt.Sprintf("%s: %v", res.Action, res.Content["answer"])), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "block", Description: "wait until cancelled"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	// started sends progress 1 for req, if it carries a token: the call's
	// handler runs (the go-sdk answers a call cancelled before its handler
	// starts with an error of its own).
	started := func(ctx context.Context, req *mcp.CallToolRequest) {
		if tok := req.Params.GetProgressToken(); tok != nil {
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1})
		}
	}
	mcp.AddTool(server, &mcp.Tool{Name: "hang", Description: "send progress 1, then never answer, cancelled or not (MCP: a cancelled request gets no answer)"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
			started(ctx, req)
			select {}
		})
	type lateArgs struct {
		DelayMS int `json:"delay_ms"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "late", Description: "send progress 1, wait until cancelled, then answer \"late answer\" delay_ms later"},
		func(ctx context.Context, req *mcp.CallToolRequest, a lateArgs) (*mcp.CallToolResult, any, error) {
			started(ctx, req)
			<-ctx.Done()
			time.Sleep(time.Duration(a.DelayMS) * time.Millisecond)
			return text("late answer"), nil, nil
		})
	type bigArgs struct {
		Bytes int `json:"bytes"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "big", Description: "answer a text of bytes bytes"},
		func(_ context.Context, _ *mcp.CallToolRequest, a bigArgs) (*mcp.CallToolResult, any, error) {
			return text(strings.Repeat("x", a.Bytes)), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "state", Description: "what this process saw of its session"},
		func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			defer mu.Unlock()
			return jsonText(seen), nil, nil
		})
	server.AddResource(&mcp.Resource{URI: "test://watched", Name: "watched", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://watched", Text: "w"}}}, nil
		})

	var t mcp.Transport = &mcp.StdioTransport{}
	if lateInit {
		t = &mcp.IOTransport{Reader: stdin, Writer: os.Stdout}
	}
	err := server.Run(context.Background(), t)
	if stubborn {
		time.Sleep(time.Hour)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testserver: %v\n", err)
		return 1
	}
	return 0
}
