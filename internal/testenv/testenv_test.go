package testenv

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestNodeIsPinnedVersion(t *testing.T) {
	NeedNode(t)
	out, err := exec.Command(Node(t), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "v22.23.5" {
		t.Errorf("Node(t) is %s, want v22.23.5 (the pin in scripts/deps.sh)", got)
	}
}

func TestNPMBinConformanceRuns(t *testing.T) {
	NeedNode(t)
	out, err := exec.Command(Node(t), NPMBin(t, "conformance"), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "0.2.0-alpha.12" {
		t.Errorf("conformance --version is %q, want 0.2.0-alpha.12", got)
	}
}

func TestNodeScriptResolvesInstalledPackages(t *testing.T) {
	NeedNode(t)
	src := t.TempDir() + "/probe.mjs"
	body := "import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';\nconsole.log(LATEST_PROTOCOL_VERSION);\n"
	if err := os.WriteFile(src, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(Node(t), NodeScript(t, src)).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "2025-11-25" {
		t.Errorf("the TypeScript SDK's LATEST_PROTOCOL_VERSION is %q, want 2025-11-25", got)
	}
}

func TestBuildOncePerBinary(t *testing.T) {
	first := BuildTidemark(t)
	if second := Build(t, "./cmd/tidemark"); second != first {
		t.Errorf("second Build returned %s, want the first build %s", second, first)
	}
	out, err := exec.Command(first, "help").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "tidemark serves MCP") {
		t.Errorf("tidemark help printed %q", out)
	}
}

func TestServeURLReadsLogLine(t *testing.T) {
	p := StartProcess(t, "sh", "-c",
		`sleep 0.2; echo 'time=x level=INFO msg=serving url=http://127.0.0.1:4321/mcp store=memory' >&2; exec sleep 300`)
	if got, want := ServeURL(t, p), "http://127.0.0.1:4321/mcp"; got != want {
		t.Errorf("ServeURL = %q, want %q", got, want)
	}
}

func TestKillEndsProcessGroup(t *testing.T) {
	p := StartProcess(t, "sh", "-c", `sleep 300 & echo child=$!; wait`)
	m := p.WaitFor(t, `child=(\d+)`, 10*time.Second)
	child, _ := strconv.Atoi(m[1])
	p.Kill()
	var exit *exec.ExitError
	if err := p.Wait(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("Wait after Kill = %v, want killed by SIGKILL", err)
	}
	// The orphaned child is reaped by init; until then it may be a zombie.
	deadline := time.Now().Add(10 * time.Second)
	for alive(child) {
		if time.Now().After(deadline) {
			t.Fatalf("child %d of the killed process still runs", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesized command name.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestSignalAndOutput(t *testing.T) {
	p := StartProcess(t, "sh", "-c", `trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.05; done`)
	p.WaitFor(t, `ready`, 10*time.Second)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := p.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Errorf("Wait = %v, want exit status 3", err)
	}
	if got := p.Output(); got != "ready\ngot-term\n" {
		t.Errorf("Output = %q, want %q", got, "ready\ngot-term\n")
	}
}

func TestClock(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clk := NewClock(start)
	if got := clk.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v, want %v", got, start)
	}
	clk.Advance(90 * time.Second)
	clk.Advance(-30 * time.Second)
	if got, want := clk.Now(), start.Add(time.Minute); !got.Equal(want) {
		t.Errorf("Now after +90s and -30s = %v, want %v", got, want)
	}
}
