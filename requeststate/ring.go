package requeststate

// This file holds the key ring: its keys, which of them seals, and its text
// format.

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// KeySize is the length of a ring key, in bytes (AES-256).
const KeySize = 32

// keyIDSize is the length, in bytes, of the key ID a sealed state carries.
const keyIDSize = 4

// EnvKeys is the environment variable LoadRing reads a ring from when no
// file is named: ParseRing's format, entries separated by newlines or
// commas.
const EnvKeys = "TIDEMARK_REQUEST_STATE_KEYS"

// Key is one key of a Ring.
type Key struct {
	// Secret is the AES-256 key: KeySize bytes, from a cryptographically
	// secure source (e.g. `openssl rand -base64 32`).
	Secret []byte
	// NotBefore is when the key starts to seal. Zero: it has always sealed.
	// It opens states at any time.
	NotBefore time.Time
}

// Ring is an immutable set of keys: all of them open states, the newest
// valid one seals (see the package documentation). It is safe for
// concurrent use.
type Ring struct {
	keys   []ringKey // in the order given
	random bool      // RandomRing's: no other process, nor a later one, holds its key
}

type ringKey struct {
	id        [keyIDSize]byte
	notBefore time.Time
	aead      cipher.AEAD
}

// NewRing returns a ring of keys. It returns an error when keys is empty,
// when a secret is not KeySize bytes long, or when two keys are the same
// secret.
func NewRing(keys ...Key) (*Ring, error) {
	if len(keys) == 0 {
		return nil, errors.New("requeststate: a key ring needs at least one key")
	}
	r := &Ring{keys: make([]ringKey, 0, len(keys))}
	seen := make(map[[keyIDSize]byte]int)
	for i, k := range keys {
		if len(k.Secret) != KeySize {
			return nil, fmt.Errorf("requeststate: key %d is %d bytes, want %d", i+1, len(k.Secret), KeySize)
		}
		id := keyID(k.Secret)
		if j, dup := seen[id]; dup {
			return nil, fmt.Errorf("requeststate: keys %d and %d have the same ID %x: each key must be a distinct random secret", j+1, i+1, id)
		}
		seen[id] = i
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("requeststate: key %d: %w", i+1, err)
		}
		aead, err := cipher.NewGCMWithRandomNonce(block)
		if err != nil {
			return nil, fmt.Errorf("requeststate: key %d: %w", i+1, err)
		}
		r.keys = append(r.keys, ringKey{id: id, notBefore: k.NotBefore, aead: aead})
	}
	return r, nil
}

// RandomRing returns a ring of one random key, for a single process: states
// it seals open only in this process, and only until it exits.
func RandomRing() *Ring {
	secret := make([]byte, KeySize)
	rand.Read(secret) // never fails (crypto/rand, Go 1.24 and later)
	r, err := NewRing(Key{Secret: secret})
	if err != nil {
		panic(err) // a fresh random key of the right size is always valid
	}
	r.random = true
	return r
}

// unknownKey says why a state sealed with a key r does not hold does not
// open, the end of the state_key_unknown message. A RandomRing's process
// was started without a key ring: its key is its own, so a state sealed
// before it started (by the process it replaced) or by another process is
// sealed with a key no ring of it holds. A configured ring lacks the key
// when this process was started without the ring the state was issued
// under.
func (r *Ring) unknownKey() string {
	if r.random {
		return "which this process does not hold: it was started without a key ring, and its key is random to it, " +
			"so a state issued before it started, or by another process, does not open here"
	}
	return "which this process's key ring does not hold: it was started without the key ring the state was issued under " +
		"(the replicas' key rings differ, or the key was retired)"
}

// keyID names a key in the states it seals, without revealing it: the first
// bytes of a SHA-256 of the secret, domain-separated.
func keyID(secret []byte) [keyIDSize]byte {
	h := sha256.New()
	h.Write([]byte("tidemark requeststate key id\x00"))
	h.Write(secret)
	var id [keyIDSize]byte
	copy(id[:], h.Sum(nil))
	return id
}

// sealing returns the key that seals at now: the latest not-before time at
// or before now, the later key among equals. When every key starts after
// now (a ring deployed early, or a clock behind), the earliest to start
// seals: every replica with the ring opens it.
func (r *Ring) sealing(now time.Time) *ringKey {
	var best, earliest *ringKey
	for i := range r.keys {
		k := &r.keys[i]
		if earliest == nil || k.notBefore.Before(earliest.notBefore) {
			earliest = k
		}
		if k.notBefore.After(now) {
			continue
		}
		if best == nil || !k.notBefore.Before(best.notBefore) {
			best = k
		}
	}
	if best == nil {
		return earliest
	}
	return best
}

// lookup returns the key with the given ID, or nil.
func (r *Ring) lookup(id []byte) *ringKey {
	for i := range r.keys {
		if string(r.keys[i].id[:]) == string(id) {
			return &r.keys[i]
		}
	}
	return nil
}

// IDs returns the hexadecimal IDs of the ring's keys, in the order given:
// what a replica logs so that operators can compare rings across a fleet
// without seeing a key.
func (r *Ring) IDs() []string {
	ids := make([]string, len(r.keys))
	for i, k := range r.keys {
		ids[i] = hex.EncodeToString(k.id[:])
	}
	return ids
}

// SameStart returns the keys that start to seal at the same time as
// another key of the ring: one group per such time, each group the
// hexadecimal IDs in ring order and the time (zero: no not-before time,
// the key has always sealed). Among such keys the later in the ring seals
// (see sealing), so two replicas whose rings list them in another order
// seal with different keys; each still opens the other's states.
func (r *Ring) SameStart() []KeyGroup {
	var groups []KeyGroup
	at := make(map[time.Time]int) // not-before time -> index in groups
	for _, k := range r.keys {
		nb := k.notBefore.UTC()
		i, ok := at[nb]
		if !ok {
			i = len(groups)
			at[nb] = i
			groups = append(groups, KeyGroup{NotBefore: nb})
		}
		groups[i].IDs = append(groups[i].IDs, hex.EncodeToString(k.id[:]))
	}
	out := groups[:0]
	for _, g := range groups {
		if len(g.IDs) > 1 {
			out = append(out, g)
		}
	}
	return out
}

// KeyGroup is a set of keys of a ring that start to seal at one time.
type KeyGroup struct {
	// IDs are the keys' hexadecimal IDs, in ring order.
	IDs []string
	// NotBefore is when they start to seal; zero: always.
	NotBefore time.Time
}

// SealingID returns the hexadecimal ID of the key that seals at now.
func (r *Ring) SealingID(now time.Time) string {
	k := r.sealing(now)
	return hex.EncodeToString(k.id[:])
}

// ParseRing reads a ring in its text format: one key per entry, entries
// separated by newlines or commas; blank entries and lines starting with #
// are ignored. An entry is the key's KeySize bytes in base64 (standard or
// URL alphabet, padded or not), optionally followed by white space and the
// key's not-before time in RFC 3339, e.g.
//
//	# sealing until 2026-11-07 12:00 UTC, then opening only
//	qs+hZ956zlvS3kGnSRZyyPLRsNefWw5jnFAxHuNEdmQ=
//	TLc6uozh7svD7fIiemu3ukidBa3Tfi/sfahmv5duZ38= 2026-11-07T12:00:00Z
//
// The errors name the entry by its number, never its key.
func ParseRing(text string) (*Ring, error) {
	var keys []Key
	entries := strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == ',' })
	for n, entry := range entries {
		entry = strings.TrimSpace(entry)
		if entry == "" || strings.HasPrefix(entry, "#") {
			continue
		}
		k, err := parseKey(entry)
		if err != nil {
			return nil, fmt.Errorf("requeststate: key ring entry %d: %w", n+1, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("requeststate: the key ring holds no key (want one base64 key of 32 bytes per line)")
	}
	return NewRing(keys...)
}

func parseKey(entry string) (Key, error) {
	fields := strings.Fields(entry)
	if len(fields) > 2 {
		return Key{}, fmt.Errorf("%d fields, want a key and at most a not-before time", len(fields))
	}
	secret, err := decodeKey(fields[0])
	if err != nil {
		return Key{}, err
	}
	k := Key{Secret: secret}
	if len(fields) == 2 {
		if k.NotBefore, err = time.Parse(time.RFC3339, fields[1]); err != nil {
			return Key{}, fmt.Errorf("not-before time %q is not RFC 3339 (e.g. 2026-11-07T12:00:00Z)", fields[1])
		}
	}
	return k, nil
}

// decodeKey accepts any of the four base64 variants, and only a key of
// KeySize bytes.
func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.Strict().DecodeString(s); err == nil {
			if len(b) != KeySize {
				return nil, fmt.Errorf("the key is %d bytes, want %d (generate one with: openssl rand -base64 32)", len(b), KeySize)
			}
			return b, nil
		}
	}
	return nil, errors.New("the key is not base64 (generate one with: openssl rand -base64 32)")
}

// LoadRing returns the ring that a replica's configuration names: the file
// at path when path is not empty, else the environment variable EnvKeys
// when it is set. It returns a nil ring, a nil error and source "" when
// neither is configured; source is "file PATH" or "environment EnvKeys"
// otherwise. Errors: both are set (which one holds the fleet's keys is
// ambiguous), the file cannot be read, or the text does not parse.
func LoadRing(path string) (ring *Ring, source string, err error) {
	_, inEnv := os.LookupEnv(EnvKeys)
	if path != "" && inEnv {
		return nil, "", fmt.Errorf("requeststate: keys are named twice, by the file %s and by $%s: unset one", path, EnvKeys)
	}
	if path != "" {
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, "", fmt.Errorf("requeststate: read key ring: %w", err)
		}
		r, err := ParseRing(string(text))
		if err != nil {
			return nil, "", fmt.Errorf("%w (in %s)", err, path)
		}
		return r, "file " + path, nil
	}
	if !inEnv {
		return nil, "", nil
	}
	r, err := ParseRing(os.Getenv(EnvKeys))
	if err != nil {
		return nil, "", fmt.Errorf("%w (in $%s)", err, EnvKeys)
	}
	return r, "environment " + EnvKeys, nil
}
