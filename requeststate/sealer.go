package requeststate

// This file holds the Sealer: the state's wire form, sealing and the
// ordered checks of opening.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/replay"
)

// DefaultTTL is how long a sealed state opens when Options.TTL is zero:
// long enough for a person to answer an elicitation, short enough to bound
// a leaked state's use.
const DefaultTTL = 10 * time.Minute

// formatVersion is the first byte of every sealed state. A state of another
// version is refused as state_invalid.
const formatVersion = 1

// gcmNonceSize is the length, in bytes, of the random nonce that
// cipher.NewGCMWithRandomNonce puts before each ciphertext.
const gcmNonceSize = 12

// headerSize is the length of a sealed state's authenticated header:
// version and key ID. The AES-GCM nonce (12 bytes), the ciphertext and the
// 16-byte tag follow.
const headerSize = 1 + keyIDSize

// Options configures a Sealer. The zero value seals for DefaultTTL with the
// system clock, and lets a state open any number of times until it expires.
type Options struct {
	// TTL is how long a state opens after it is sealed (duration; zero:
	// DefaultTTL). Replicas with different TTLs honour the expiry the
	// sealing replica wrote.
	TTL time.Duration
	// Ledger, when set, makes each state open once: Open records every
	// state it accepts and refuses a second use with state_replayed. Nil:
	// no such memory.
	Ledger Ledger
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Logger receives one line per refused state: "request state refused"
	// with reason, method and target, at INFO (WARN for capacity and
	// unavailable, which are the server's). Nil: no log.
	Logger *slog.Logger
}

// Sealer seals and opens request states with a key ring. It is safe for
// concurrent use.
type Sealer struct {
	ring   *Ring
	ttl    time.Duration
	ledger Ledger
	now    func() time.Time
	logger *slog.Logger
}

// New returns a Sealer that seals with ring's sealing key and opens with
// any of its keys. ring must not be nil: a single process without
// configured keys uses RandomRing.
func New(ring *Ring, opts Options) *Sealer {
	s := &Sealer{ring: ring, ttl: opts.TTL, ledger: opts.Ledger, now: opts.Now, logger: opts.Logger}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.ttl <= 0 {
		s.ttl = DefaultTTL
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// TTL returns how long the states this Sealer seals stay valid.
func (s *Sealer) TTL() time.Duration { return s.ttl }

// envelope is the sealed plaintext.
type envelope struct {
	Principal []byte          `json:"p"`           // principalDigest
	Request   []byte          `json:"r"`           // requestDigest
	Expires   int64           `json:"e"`           // Unix milliseconds
	Payload   json.RawMessage `json:"d,omitempty"` // the caller's value
}

// Seal returns a state for req carrying payload (any value encoding/json
// marshals; nil for none), as base64url text without padding. It expires
// TTL from now. The error is payload's marshalling error.
func (s *Sealer) Seal(req Request, payload any) (string, error) {
	var data json.RawMessage
	if payload != nil {
		var err error
		if data, err = json.Marshal(payload); err != nil {
			return "", fmt.Errorf("requeststate: seal: %w", err)
		}
	}
	now := s.now()
	plain, err := json.Marshal(envelope{
		Principal: req.principalDigest(),
		Request:   req.requestDigest(),
		Expires:   now.Add(s.ttl).UnixMilli(),
		Payload:   data,
	})
	if err != nil {
		return "", fmt.Errorf("requeststate: seal: %w", err)
	}
	k := s.ring.sealing(now)
	header := append([]byte{formatVersion}, k.id[:]...)
	// NewGCMWithRandomNonce puts a fresh random nonce before the ciphertext.
	sealed := k.aead.Seal(bytes.Clone(header), nil, plain, header)
	return base64.RawURLEncoding.EncodeToString(sealed), nil
}

// Open checks state against req and, when it passes, decodes its payload
// into payload (a pointer, as for json.Unmarshal; nil to ignore it). The
// checks run in the order of the package documentation's table; the error
// of the first that fails is a *jsonrpc.Error (code -32602, or -32603 for a
// Ledger's failure) whose error.data.reason ReasonOf returns. A tool handler
// returns it unchanged, and the client sees that JSON-RPC error.
func (s *Sealer) Open(ctx context.Context, req Request, state string, payload any) error {
	err := s.open(ctx, req, state, payload)
	if err != nil {
		level, reason := slog.LevelInfo, ReasonOf(err)
		if reason == replay.ReasonCapacity || reason == replay.ReasonUnavailable {
			level = slog.LevelWarn
		}
		s.logger.Log(ctx, level, "request state refused", "reason", reason, "method", req.Method, "target", req.Target)
	}
	return err
}

func (s *Sealer) open(ctx context.Context, req Request, state string, payload any) error {
	env, id, err := s.decrypt(state)
	if err != nil {
		return err
	}
	now := s.now()
	expires := time.UnixMilli(env.Expires)
	switch {
	case !bytes.Equal(env.Principal, req.principalDigest()):
		return invalid(replay.ReasonStatePrincipalMismatch, "requestState was issued to another principal than this request's", nil)
	case !bytes.Equal(env.Request, req.requestDigest()):
		return invalid(replay.ReasonStateRequestMismatch,
			"requestState belongs to another request: send it only with the request (method, name and arguments) that received it", nil)
	case !now.Before(expires):
		return invalid(replay.ReasonStateExpired, "requestState expired at "+expires.UTC().Format(time.RFC3339Nano),
			map[string]any{"expired": expires.UTC().Format(time.RFC3339Nano)})
	}
	if payload != nil && len(env.Payload) > 0 {
		if err := json.Unmarshal(env.Payload, payload); err != nil {
			return invalid(replay.ReasonStateInvalid, "requestState carries a value this server cannot read ("+err.Error()+")", nil)
		}
	}
	if s.ledger == nil {
		return nil
	}
	fresh, err := s.ledger.Use(ctx, id, now, expires)
	switch {
	case errors.Is(err, ErrLedgerFull):
		return refuse(jsonrpc.CodeInternalError, replay.ReasonCapacity, err.Error()+"; retry later", nil)
	case err != nil:
		return refuse(jsonrpc.CodeInternalError, replay.ReasonUnavailable, "requeststate: cannot record the state's use: "+err.Error()+"; retry later", nil)
	case !fresh:
		return invalid(replay.ReasonStateReplayed, "requestState was already used, and each is accepted once", nil)
	}
	return nil
}

// decrypt decodes, authenticates and decrypts state. It returns the
// envelope and the state's ID for a Ledger (key ID and nonce: unique per
// seal), or the refusal.
func (s *Sealer) decrypt(state string) (envelope, string, error) {
	var env envelope
	raw, err := base64.RawURLEncoding.Strict().DecodeString(state)
	if err != nil || len(raw) < headerSize || raw[0] != formatVersion {
		return env, "", invalid(replay.ReasonStateInvalid, "requestState failed verification (altered, truncated, or not issued by this server)", nil)
	}
	k := s.ring.lookup(raw[1:headerSize])
	if k == nil {
		kid := hex.EncodeToString(raw[1:headerSize])
		return env, "", invalid(replay.ReasonStateKeyUnknown, "requestState was sealed with key "+kid+", "+s.ring.unknownKey(),
			map[string]any{"key": kid})
	}
	header, sealed := raw[:headerSize], raw[headerSize:]
	plain, err := k.aead.Open(nil, nil, sealed, header)
	if err != nil || json.Unmarshal(plain, &env) != nil {
		return env, "", invalid(replay.ReasonStateInvalid, "requestState failed verification (altered, truncated, or not issued by this server)", nil)
	}
	nonce := sealed[:gcmNonceSize] // Open succeeded, so it is there
	return env, string(header[1:]) + string(nonce), nil
}
