// record.go holds what a session's record keeps in its State member: the
// engine state and the ledgers of earlier generations.

package session

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/store"
)

// priorKey is the member of a record's State that holds the ledgers of
// earlier generations, next to the members of engine.State.
const priorKey = "priorLedgers"

// encodeState renders what a session's record keeps (store.Record.State):
// st's members, as engine.State encodes them (none when st is nil: the
// session has saved no state), and the ledgers of earlier generations
// under priorKey when there are any.
func encodeState(st *engine.State, prior []ledger) ([]byte, error) {
	m := map[string]json.RawMessage{}
	if st != nil {
		b, err := json.Marshal(st)
		if err != nil || len(prior) == 0 {
			return b, err
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
	}
	var err error
	if m[priorKey], err = json.Marshal(prior); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// ProtocolVersion returns the protocol version rec's session negotiated,
// as its saved state says ("" when it saved none, or the state cannot be
// read): what a request that needs no live session (DELETE) is checked
// against.
func ProtocolVersion(rec store.Record) string {
	st, _, err := decodeState(rec.State)
	if err != nil || st == nil {
		return ""
	}
	return st.ProtocolVersion
}

// decodeState reads a record's State: the engine state (nil when the
// session has saved none) and the ledgers of earlier generations.
func decodeState(b []byte) (*engine.State, []ledger, error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, nil, fmt.Errorf("decode saved state: %w", err)
	}
	var prior []ledger
	if p, ok := m[priorKey]; ok {
		if err := json.Unmarshal(p, &prior); err != nil {
			return nil, nil, fmt.Errorf("decode saved ledgers: %w", err)
		}
		delete(m, priorKey)
	}
	if len(m) == 0 {
		return nil, prior, nil
	}
	var st engine.State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, nil, fmt.Errorf("decode saved state: %w", err)
	}
	return &st, prior, nil
}

// withPrior returns prior with g added, keeping the newest
// priorGenerations ledgers.
func withPrior(prior []ledger, g ledger) []ledger {
	out := append(slices.Clone(prior), g)
	if len(out) > priorGenerations {
		out = out[len(out)-priorGenerations:]
	}
	return out
}
