package requeststate_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/requeststate"
)

// TestDataDriven runs testdata/seal: rings, sealing, the ordered refusals
// of Open, rotation and single use, each with the exact outcome.
//
// Commands:
//
//	ring name=R            input: one key per line, "NAME HEXBYTE [NOT-BEFORE]";
//	                       the key's secret is 32 copies of HEXBYTE
//	ring name=R random     RandomRing: a process started without a key ring
//	ledger name=L max=N    a MemoryLedger of N entries
//	seal name=S ring=R at=T [ttl=D] [principal=P] [method=M] target=X [payload=JSON]
//	                       input: the arguments (JSON, may be empty)
//	open state=S ring=R at=T [ttl=D] [ledger=L] [principal=P] [method=M] target=X
//	                       input: the arguments
//	tamper name=S2 from=S byte=N    S with bit 0 of its decoded byte N flipped
//	text name=S2 from=S append=X    S's text with X appended
func TestDataDriven(t *testing.T) {
	e := &sealEnv{
		rings:   map[string]*requeststate.Ring{},
		keys:    map[string]string{},
		ledgers: map[string]*requeststate.MemoryLedger{},
		states:  map[string]string{},
	}
	datadriven.RunTest(t, "testdata/seal", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "ring":
			return e.ring(t, d)
		case "ledger":
			var name string
			var max int
			d.ScanArgs(t, "name", &name)
			d.ScanArgs(t, "max", &max)
			e.ledgers[name] = requeststate.NewMemoryLedger(max)
			return "ok"
		case "seal":
			return e.seal(t, d)
		case "open":
			return e.open(t, d)
		case "tamper":
			var name, from string
			var n int
			d.ScanArgs(t, "name", &name)
			d.ScanArgs(t, "from", &from)
			d.ScanArgs(t, "byte", &n)
			raw, err := base64.RawURLEncoding.DecodeString(e.states[from])
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			raw[n] ^= 1
			e.states[name] = base64.RawURLEncoding.EncodeToString(raw)
			return fmt.Sprintf("%d bytes, byte %d flipped", len(raw), n)
		case "text":
			var name, from, suffix string
			d.ScanArgs(t, "name", &name)
			d.ScanArgs(t, "from", &from)
			d.MaybeScanArgs(t, "append", &suffix)
			e.states[name] = e.states[from] + suffix
			return "ok"
		default:
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		}
	})
}

type sealEnv struct {
	rings   map[string]*requeststate.Ring
	keys    map[string]string // key ID (hex) -> key name
	ledgers map[string]*requeststate.MemoryLedger
	states  map[string]string
}

func (e *sealEnv) ring(t *testing.T, d *datadriven.TestData) string {
	var name string
	d.ScanArgs(t, "name", &name)
	if d.HasArg("random") {
		e.rings[name] = requeststate.RandomRing()
		return "a random key\n"
	}
	var keys []requeststate.Key
	var names []string
	for line := range strings.SplitSeq(strings.TrimSpace(d.Input), "\n") {
		f := strings.Fields(line)
		var b byte
		if _, err := fmt.Sscanf(f[1], "%x", &b); err != nil {
			t.Fatalf("%s: key byte %q: %v", d.Pos, f[1], err)
		}
		k := requeststate.Key{Secret: bytes.Repeat([]byte{b}, requeststate.KeySize)}
		if len(f) == 3 {
			k.NotBefore = mustTime(t, f[2])
		}
		keys = append(keys, k)
		names = append(names, f[0])
	}
	r, err := requeststate.NewRing(keys...)
	if err != nil {
		return "error: " + err.Error()
	}
	e.rings[name] = r
	var out strings.Builder
	for i, id := range r.IDs() {
		e.keys[id] = names[i]
		fmt.Fprintf(&out, "%s id %s\n", names[i], id)
	}
	return out.String()
}

// sealer returns the Sealer a seal or open command describes.
func (e *sealEnv) sealer(t *testing.T, d *datadriven.TestData) (*requeststate.Sealer, time.Time) {
	var ringName, at, ttl, ledger string
	d.ScanArgs(t, "ring", &ringName)
	d.ScanArgs(t, "at", &at)
	d.MaybeScanArgs(t, "ttl", &ttl)
	d.MaybeScanArgs(t, "ledger", &ledger)
	now := mustTime(t, at)
	opts := requeststate.Options{Now: func() time.Time { return now }}
	if ttl != "" {
		var err error
		if opts.TTL, err = time.ParseDuration(ttl); err != nil {
			t.Fatalf("%s: ttl: %v", d.Pos, err)
		}
	}
	if ledger != "" {
		opts.Ledger = e.ledgers[ledger]
	}
	r, ok := e.rings[ringName]
	if !ok {
		t.Fatalf("%s: no ring %q", d.Pos, ringName)
	}
	return requeststate.New(r, opts), now
}

func request(t *testing.T, d *datadriven.TestData) requeststate.Request {
	r := requeststate.Request{Method: "tools/call", Arguments: json.RawMessage(strings.TrimSpace(d.Input))}
	d.MaybeScanArgs(t, "principal", &r.Principal)
	d.MaybeScanArgs(t, "method", &r.Method)
	d.ScanArgs(t, "target", &r.Target)
	return r
}

func (e *sealEnv) seal(t *testing.T, d *datadriven.TestData) string {
	s, now := e.sealer(t, d)
	var name, payload string
	d.ScanArgs(t, "name", &name)
	d.MaybeScanArgs(t, "payload", &payload)
	var v any
	if payload != "" {
		v = json.RawMessage(payload)
	}
	state, err := s.Seal(request(t, d), v)
	if err != nil {
		return "error: " + err.Error()
	}
	e.states[name] = state
	raw, err := base64.RawURLEncoding.Strict().DecodeString(state)
	if err != nil {
		t.Fatalf("%s: the state is not unpadded base64url: %v", d.Pos, err)
	}
	id := fmt.Sprintf("%x", raw[1:5])
	return fmt.Sprintf("version %d, key %s, expires %s",
		raw[0], e.keys[id], now.Add(s.TTL()).UTC().Format(time.RFC3339))
}

func (e *sealEnv) open(t *testing.T, d *datadriven.TestData) string {
	s, _ := e.sealer(t, d)
	var name string
	d.ScanArgs(t, "state", &name)
	var payload json.RawMessage
	err := s.Open(context.Background(), request(t, d), e.states[name], &payload)
	if err == nil {
		if payload == nil {
			return "ok"
		}
		return "ok " + string(payload)
	}
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) {
		t.Fatalf("%s: Open returned %T %v, want a *jsonrpc.Error", d.Pos, err, err)
	}
	return fmt.Sprintf("refused %d %s\n%s\n%s", wire.Code, requeststate.ReasonOf(err), wire.Message, wire.Data)
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return v
}
