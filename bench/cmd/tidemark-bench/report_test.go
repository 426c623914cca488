package main

import "testing"

// TestShellJoin: the command line in BENCHMARKS.md can be pasted into a
// shell as it is.
func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"--tidemark-variant", "durable=--data-dir {tmpdir}", "--baseline", "c6c99e5", "it's", ""})
	want := `--tidemark-variant 'durable=--data-dir {tmpdir}' --baseline c6c99e5 'it'\''s' ''`
	if got != want {
		t.Fatalf("shellJoin = %s, want %s", got, want)
	}
}
