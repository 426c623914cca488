package crashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/tasks"
)

const (
	taskRounds = 20
	// Per round: short tasks that complete before the kill, long ones
	// still working at it (one of them created just before it).
	shortTasks = 3
	longTasks  = 3
	// longMS is how long a long task works: far past the kill.
	longMS = 10 * 60 * 1000
	// settleTimeout bounds the wait for a short task to complete.
	settleTimeout = 10 * time.Second
)

// crashTask is one task the test created, and what it last read of it.
type crashTask struct {
	id, label string
	round     int
	// status is what the task read when last checked: "completed" before
	// the kill, "working" at the kill, then "failed" once a restart
	// settled it.
	status string
	// raw is the task's tasks/get result once terminal: every later read
	// must answer these very bytes.
	raw []byte
	// journaled reports that the label was in the journal before the
	// kill: the execution happened, and it stays there exactly once.
	journaled bool
}

// TestTasksCrash runs examples/everything on one --data-dir, with the
// journal tool (one synced line per execution), 20 times, killing it with
// SIGKILL while tasks are working. In each run it creates 3 short tasks
// and waits until they read completed, and 4 long ones (one just before
// the kill) that read working; after a random 0 to 30 ms it kills the
// process, restarts it on the same directory and port, and reads every
// task created so far through tasks/get: a task working at a kill reads
// failed with error.data.reason executor_lost and a message saying the
// tool may or may not have taken effect, and from then on the same bytes;
// a completed task reads the very bytes it read before the kill. The
// journal never holds a label twice, holds every completed task's label,
// and keeps every label it held before a kill (DESIGN.md, "Tasks: the
// executor rule").
func TestTasksCrash(t *testing.T) {
	bin := testenv.Build(t, "./examples/everything")
	dir := filepath.Join(t.TempDir(), "data")
	journal := filepath.Join(t.TempDir(), "journal")
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	var all []*crashTask
	start := time.Now()
	var slowestStart time.Duration
	reads, lost, completed := 0, 0, 0

	for round := 0; round <= taskRounds; round++ {
		began := time.Now()
		p := testenv.StartProcess(t, bin, "--addr", addr, "--data-dir", dir, "--journal", journal)
		c := &taskClient{t: t, url: testenv.ServeURL(t, p), http: &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}}
		slowestStart = max(slowestStart, time.Since(began))

		// Every task of the earlier runs, after this restart.
		for _, k := range all {
			raw := c.get(k.id)
			reads++
			switch k.status {
			case "working":
				checkLost(t, round, k, raw)
				k.status, k.raw = "failed", raw
				lost++
			default:
				if !bytes.Equal(raw, k.raw) {
					t.Fatalf("restart %d: task %s (%s, round %d) reads\n%s\nbefore the kill it read\n%s", round, k.id, k.label, k.round, raw, k.raw)
				}
			}
		}
		checkJournal(t, round, journal, all)
		if round == taskRounds {
			c.http.CloseIdleConnections()
			p.Kill()
			<-p.Done()
			break
		}

		// This run's tasks, with fresh labels.
		var short []*crashTask
		for i := range longTasks {
			all = append(all, c.create(round, fmt.Sprintf("r%02d-long-%d", round, i), longMS))
		}
		for i := range shortTasks {
			k := c.create(round, fmt.Sprintf("r%02d-short-%d", round, i), rng.IntN(20))
			short = append(short, k)
			all = append(all, k)
		}
		for _, k := range short {
			k.raw = c.await(k)
			completed++
		}
		all = append(all, c.create(round, fmt.Sprintf("r%02d-long-%d", round, longTasks), longMS))
		time.Sleep(time.Duration(rng.IntN(31)) * time.Millisecond)
		// What the journal holds now stays: each line was synced before
		// its tool went on.
		lines := journalLines(t, journal)
		for _, k := range all {
			if k.round == round && lines[k.label] > 0 {
				k.journaled = true
			}
		}
		p.Kill()
		<-p.Done()
		c.http.CloseIdleConnections()
	}
	lines := journalLines(t, journal)
	executed := 0
	for _, n := range lines {
		executed += n
	}
	t.Logf("%d kill -9 runs: %d tasks created, %d completed before a kill and read back unchanged, %d working at a kill and read failed (executor_lost), %d tasks/get after restarts, %d journal lines; in %v (the slowest start %v)",
		taskRounds, len(all), completed, lost, reads, executed, time.Since(start).Round(time.Millisecond), slowestStart.Round(time.Millisecond))
}

// checkLost fails unless raw, the tasks/get result of k after the restart
// that followed a kill, is k failed because its executor was lost.
func checkLost(t *testing.T, round int, k *crashTask, raw []byte) {
	t.Helper()
	var got struct {
		TaskID string `json:"taskId"`
		Status string `json:"status"`
		Result any    `json:"result"`
		Error  *struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
			Data    struct {
				Reason string `json:"reason"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("restart %d: task %s: %v: %s", round, k.id, err, raw)
	}
	if got.TaskID != k.id || got.Status != "failed" || got.Result != nil || got.Error == nil ||
		got.Error.Code != jsonrpc.CodeInternalError || got.Error.Data.Reason != string(replay.ReasonExecutorLost) ||
		!strings.Contains(got.Error.Message, "may or may not have taken effect") {
		t.Fatalf("restart %d: task %s (%s, working at the kill) reads\n%s\nwant status failed, no result, error -32603 with data.reason %s and a message saying the tool may or may not have taken effect",
			round, k.id, k.label, raw, replay.ReasonExecutorLost)
	}
}

// checkJournal fails when the journal holds a line twice, a line of no
// task, misses a completed task's label, or lost a label it held before a
// kill.
func checkJournal(t *testing.T, round int, path string, all []*crashTask) {
	t.Helper()
	lines := journalLines(t, path)
	labels := map[string]*crashTask{}
	for _, k := range all {
		labels[k.label] = k
		n := lines[k.label]
		switch {
		case n > 1:
			t.Fatalf("restart %d: the journal holds %q %d times: the call of task %s ran more than once", round, k.label, n, k.id)
		case n == 0 && k.raw != nil && k.status == "completed":
			t.Fatalf("restart %d: task %s read completed, yet its label %q is not in the journal", round, k.id, k.label)
		case n == 0 && k.journaled:
			t.Fatalf("restart %d: the journal held %q before the kill, and no longer does", round, k.label)
		}
	}
	for l := range lines {
		if labels[l] == nil {
			t.Fatalf("restart %d: the journal holds %q, the label of no task", round, l)
		}
	}
}

// journalLines counts the lines of the journal file by their text; a
// missing file holds none.
func journalLines(t *testing.T, path string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("the journal ends in a torn line: %q", data)
	}
	n := map[string]int{}
	for l := range strings.SplitSeq(strings.TrimSuffix(string(data), "\n"), "\n") {
		if l != "" {
			n[l]++
		}
	}
	return n
}

// taskClient sends raw JSON-RPC requests of protocol 2026-07-28 that
// declare the Tasks extension.
type taskClient struct {
	t      *testing.T
	url    string
	http   *http.Client
	nextID int
}

// create calls the journal tool with label and ms as a task of round and
// returns it; the CreateTaskResult must read working.
func (c *taskClient) create(round int, label string, ms int) *crashTask {
	c.t.Helper()
	raw := c.post("tools/call", "journal", map[string]any{"name": "journal", "arguments": map[string]any{"label": label, "ms": ms}})
	var res struct {
		ResultType string `json:"resultType"`
		TaskID     string `json:"taskId"`
		Status     string `json:"status"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.ResultType != "task" || res.TaskID == "" || res.Status != "working" {
		c.t.Fatalf("round %d: tools/call journal %s answers %s (%v), want a CreateTaskResult, working", round, label, raw, err)
	}
	return &crashTask{id: res.TaskID, label: label, round: round, status: "working"}
}

// await polls k until it reads completed with its label as its text, and
// returns that tasks/get result.
func (c *taskClient) await(k *crashTask) []byte {
	c.t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for {
		raw := c.get(k.id)
		var got struct {
			Status string `json:"status"`
			Result struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"result"`
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			c.t.Fatalf("task %s: %v: %s", k.id, err, raw)
		}
		switch got.Status {
		case "working":
			if time.Now().After(deadline) {
				c.t.Fatalf("task %s (%s) still working after %v", k.id, k.label, settleTimeout)
			}
			time.Sleep(5 * time.Millisecond)
			continue
		case "completed":
			if len(got.Result.Content) != 1 || got.Result.Content[0].Text != k.label {
				c.t.Fatalf("task %s completed with %s, want the text %q", k.id, raw, k.label)
			}
			k.status = "completed"
			return raw
		}
		c.t.Fatalf("task %s (%s) reads %s, want working then completed", k.id, k.label, raw)
	}
}

// get returns the result of tasks/get for id.
func (c *taskClient) get(id string) []byte {
	c.t.Helper()
	return c.post("tasks/get", id, map[string]any{"taskId": id})
}

// post sends method with params, the 2026-07-28 headers (Mcp-Name name)
// and _meta, and returns the JSON-RPC result; an error answer fails the
// test.
func (c *taskClient) post(method, name string, params map[string]any) json.RawMessage {
	c.t.Helper()
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{tasks.ExtensionID: map[string]any{}}},
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "crashtest", "version": "1"},
	}
	c.nextID++
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.nextID, "method": method, "params": params})
	if err != nil {
		c.t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Mcp-Name", name)
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, name, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, name, err)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for line := range strings.SplitSeq(string(data), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data = []byte(d)
			}
		}
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		c.t.Fatalf("%s %s: answer %d %q: %v", method, name, resp.StatusCode, data, err)
	}
	jr, ok := msg.(*jsonrpc.Response)
	if !ok || jr.Error != nil || resp.StatusCode != http.StatusOK {
		c.t.Fatalf("%s %s: answer %d %s, want 200 and a result", method, name, resp.StatusCode, data)
	}
	return jr.Result
}
