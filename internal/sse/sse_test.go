package sse_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/sse"
)

func TestReader(t *testing.T) {
	in := ": keep-alive\n\n" +
		"id: a-1-1-1\nretry: 1500\ndata:\n\n" +
		"id: a-1-1-2\r\ndata: {\"x\":1}\r\n\r\n" +
		"event: close\ndata: line1\ndata: line2\n\n" +
		"data: cut"
	rd := sse.NewReader(strings.NewReader(in), 0)
	want := []sse.Event{
		{ID: "a-1-1-1", HasID: true, Retry: 1500 * time.Millisecond, Data: []byte{}},
		{ID: "a-1-1-2", HasID: true, Data: []byte(`{"x":1}`)},
		{Name: "close", Data: []byte("line1\nline2")},
	}
	for i, w := range want {
		got, err := rd.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got.String() != w.String() || got.HasID != w.HasID {
			t.Fatalf("event %d = %v, want %v", i, got, w)
		}
	}
	if _, err := rd.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("after a cut event: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := sse.NewReader(strings.NewReader("id: 1\n\n"), 0).Next(); err != nil {
		t.Fatal(err)
	}
	rd = sse.NewReader(strings.NewReader("id: 1\n\n"), 0)
	rd.Next()
	if _, err := rd.Next(); err != io.EOF {
		t.Fatalf("clean end: %v, want io.EOF", err)
	}
	big := "data: " + strings.Repeat("x", 200<<10) + "\n\n"
	if _, err := sse.NewReader(strings.NewReader(big), 100<<10).Next(); !errors.Is(err, sse.ErrEventTooLarge) {
		t.Fatalf("oversized event: %v, want ErrEventTooLarge", err)
	}
	if ev, err := sse.NewReader(strings.NewReader(big), 0).Next(); err != nil || len(ev.Data) != 200<<10 {
		t.Fatalf("200 KiB event: %d bytes, %v", len(ev.Data), err)
	}
}
