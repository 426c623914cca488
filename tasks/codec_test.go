package tasks

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestCodecRoundTrip checks that a record comes back from its stored form
// exactly, every field set, and that the JSON fields are kept as they were
// (not re-encoded), so every store renders a task byte for byte.
func TestCodecRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 6, 3, 0, 0, 123456789, time.UTC)
	rec := Record{
		ID: "ABCDEFGHIJKLMNOPQRSTUVWXYZ", Owner: "alice", Tool: "countdown",
		Call: []byte(`{"name":"countdown","arguments":{"n":3}}`), Idempotent: true,
		Upstream: "up-1", Status: Failed, Message: "lost", Cause: ExecutorLost,
		Executor: Executor{Replica: "a", Boot: "b1", LeaseUntil: at.Add(10 * time.Second), Generation: 3},
		Created:  at, Updated: at.Add(time.Second), TTL: time.Hour, PollInterval: time.Second,
		CancelRequested: true, Result: []byte(`{"content":[]}`), Error: []byte(`{"code":-32603,"message":"x"}`),
		Input: Input{Round: 2, State: []byte{0, 1, 2, 255}, Slots: map[string]Slot{
			"2-a": {Key: "a", Request: []byte(`{"method":"elicitation/create"}`), Response: []byte(`{"action":"accept"}`)},
			"2-b": {Key: "b", Request: []byte(`{"method":"sampling/createMessage"}`)},
		}},
		Reruns: 1,
	}
	b, err := Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, rec)
	}
	if !strings.Contains(string(b), `"call":{"name":"countdown","arguments":{"n":3}}`) || !strings.Contains(string(b), `"cause":"ExecutorLost"`) {
		t.Errorf("stored form %s does not embed the call as JSON or name the cause", b)
	}
}

// TestCodecRejects checks that what is not a stored record is refused
// with an error that says what is wrong.
func TestCodecRejects(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{`, "decoding a stored task"},
		{`{"id":"X","status":"running"}`, `unknown status "running"`},
		{`{"id":"X","status":"failed","cause":"Vanished"}`, `unknown cause "Vanished"`},
	} {
		_, err := Unmarshal([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Unmarshal(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	if _, err := Marshal(Record{ID: "X", Status: Working, Call: []byte(`{`)}); err == nil {
		t.Error("Marshal of a record with invalid JSON in Call succeeded")
	}
}
