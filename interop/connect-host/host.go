// host.go holds the host's end of a stdio MCP server process: what a
// desktop host does with the process it starts (MCP 2025-11-25,
// "Transports", stdio): newline-delimited JSON-RPC on the process's stdin
// and stdout, its stderr left to the host's log.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// host speaks to one stdio MCP server process (`tidemark connect URL`,
// `mcp-remote URL`). Calls take IDs 1, 2, 3... in the order they are sent.
// The server's own requests are answered at once: ping with an empty
// result, anything else with -32601 (this host offers no roots, sampling
// or elicitation). One goroutine at a time reads the server's messages
// (next, await).
type host struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	in     chan jsonrpc.Message // the server's notifications and answers, in order
	exited chan struct{}        // closed once the process has exited
	err    error                // its exit status, read after exited

	wmu    sync.Mutex // one line at a time on stdin
	lastID int64

	mu    sync.Mutex
	stray []string // stdout lines that are not JSON-RPC messages
}

// startHost starts cmd, whose Stdin and Stdout become the host's end; its
// Stderr is left as the caller set it. The process runs in a process group
// of its own, which kill ends.
func startHost(cmd *exec.Cmd) (*host, error) {
	h := &host{cmd: cmd, in: make(chan jsonrpc.Message, 4096), exited: make(chan struct{})}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	var err error
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		h.read(stdout)
	}()
	go func() {
		<-read
		h.err = cmd.Wait()
		close(h.exited)
	}()
	return h, nil
}

// read decodes the process's stdout line by line until it ends.
func (h *host) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		m, err := jsonrpc.DecodeMessage(sc.Bytes())
		if err != nil {
			h.mu.Lock()
			h.stray = append(h.stray, sc.Text())
			h.mu.Unlock()
			continue
		}
		if req, ok := m.(*jsonrpc.Request); ok && req.IsCall() {
			h.answerServer(req)
			continue
		}
		h.in <- m
	}
}

// answerServer answers the server's request req.
func (h *host) answerServer(req *jsonrpc.Request) {
	resp := &jsonrpc.Response{ID: req.ID}
	if req.Method == "ping" {
		resp.Result = json.RawMessage("{}")
	} else {
		resp.Error = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "this host does not offer " + req.Method}
	}
	h.write(resp) // a failure shows as the process's end
}

// strays returns the stdout lines that were not JSON-RPC messages.
func (h *host) strays() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.stray...)
}

// write sends msg as one line.
func (h *host) write(msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if _, err := h.stdin.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("writing to the server process: %w", err)
	}
	return nil
}

// send sends the call method with params and returns its ID.
func (h *host) send(method string, params any) (jsonrpc.ID, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return jsonrpc.ID{}, err
	}
	h.wmu.Lock()
	h.lastID++
	n := h.lastID
	h.wmu.Unlock()
	id, err := jsonrpc.MakeID(float64(n)) // a JSON number decodes as float64
	if err != nil {
		return jsonrpc.ID{}, err
	}
	return id, h.write(&jsonrpc.Request{ID: id, Method: method, Params: raw})
}

// notify sends the notification method with params.
func (h *host) notify(method string, params any) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	return h.write(&jsonrpc.Request{Method: method, Params: raw})
}

// errExited is returned by next when the process has exited.
var errExited = errors.New("the server process exited")

// next returns the server's next notification or answer; ctx's error once
// ctx ends first, errExited once the process ended and all it wrote was
// read.
func (h *host) next(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case m := <-h.in:
		return m, nil
	default:
	}
	select {
	case m := <-h.in:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-h.exited:
		select {
		case m := <-h.in:
			return m, nil
		default:
			return nil, fmt.Errorf("%w (%v)", errExited, h.err)
		}
	}
}

// until returns the first message match accepts and the messages read
// before it.
func (h *host) until(ctx context.Context, match func(jsonrpc.Message) bool) (jsonrpc.Message, []jsonrpc.Message, error) {
	var before []jsonrpc.Message
	for {
		m, err := h.next(ctx)
		if err != nil {
			return nil, before, err
		}
		if match(m) {
			return m, before, nil
		}
		before = append(before, m)
	}
}

// await returns the answer to call id and the messages read before it.
func (h *host) await(ctx context.Context, id jsonrpc.ID) (*jsonrpc.Response, []jsonrpc.Message, error) {
	m, before, err := h.until(ctx, func(m jsonrpc.Message) bool {
		r, ok := m.(*jsonrpc.Response)
		return ok && r.ID == id
	})
	if err != nil {
		return nil, before, fmt.Errorf("awaiting the answer to call %v: %w", id.Raw(), err)
	}
	return m.(*jsonrpc.Response), before, nil
}

// call sends a call and awaits its answer, which must be a result.
func (h *host) call(ctx context.Context, method string, params any) (json.RawMessage, []jsonrpc.Message, error) {
	id, err := h.send(method, params)
	if err != nil {
		return nil, nil, err
	}
	r, before, err := h.await(ctx, id)
	if err != nil {
		return nil, before, err
	}
	if r.Error != nil {
		return nil, before, fmt.Errorf("%s: %w", method, r.Error)
	}
	return r.Result, before, nil
}

// initialize runs the host's handshake at protocol version (initialize,
// then notifications/initialized) and returns the initialize result.
func (h *host) initialize(ctx context.Context, version string) (json.RawMessage, error) {
	res, _, err := h.call(ctx, "initialize", map[string]any{
		"protocolVersion": version,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "tidemark-connect-host", "version": "1.0.0"},
	})
	if err != nil {
		return nil, err
	}
	return res, h.notify("notifications/initialized", map[string]any{})
}

// close closes the process's stdin, as a host that quits does, and waits
// up to grace for the process to exit; then it kills the process group.
// It returns the exit status.
func (h *host) close(grace time.Duration) error {
	h.stdin.Close()
	select {
	case <-h.exited:
		return h.err
	case <-time.After(grace):
		h.kill()
		<-h.exited
		return fmt.Errorf("the server process still ran %v after its stdin closed", grace)
	}
}

// kill ends the process's group with SIGKILL.
func (h *host) kill() {
	syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
}

// toolText returns the text of a tools/call result's content, or an error
// when the result is not one or reports isError.
func toolText(result json.RawMessage) (string, error) {
	var res struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(result, &res); err != nil {
		return "", fmt.Errorf("tools/call result %s: %w", result, err)
	}
	var text string
	for _, c := range res.Content {
		text += c.Text
	}
	if res.IsError {
		return text, fmt.Errorf("the tool reported an error: %s", text)
	}
	return text, nil
}
