// keyset.go holds the issuer's signing keys: its JSON Web Key Set,
// fetched once, kept, and fetched again when a token names a key it does
// not hold, at most once per refresh interval.

package bearer

import (
	"bytes"
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
	"golang.org/x/sync/singleflight"
)

// keySet is a JSON Web Key Set fetched from a URL (RFC 7517, section 5),
// and an oidc.KeySet over the keys it holds now.
type keySet struct {
	url     string
	client  *http.Client
	refresh time.Duration // least time between two fetches
	now     func() time.Time

	// verifier checks a token's signature over this set, and its issuer.
	verifier *oidc.IDTokenVerifier

	fetches singleflight.Group

	// epoch counts the distinct key sets held: it starts at 1 with the
	// first fetch and moves whenever a fetch brings keys that differ (a
	// key removed, added or replaced), never on a fetch of the same set.
	// Cached findings carry the epoch they were made under.
	epoch atomic.Uint64

	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetched time.Time // when the last fetch began; zero: never
}

// ensure makes the set hold the key kid ("" : any key), fetching the set
// when it holds no key yet, or holds none of that ID and the last fetch
// is at least the refresh interval old, so that a flood of tokens naming
// unknown keys costs at most one fetch per interval. Concurrent fetches
// are one. It fails, wrapping ErrUnavailable, only when a fetch it
// needed failed; a key still unknown after it is the signature check's
// failure.
func (k *keySet) ensure(ctx context.Context, kid string) error {
	k.mu.Lock()
	held := len(k.keys) > 0 && (kid == "" || k.holdsLocked(kid))
	due := k.fetched.IsZero() || len(k.keys) == 0 || k.now().Sub(k.fetched) >= k.refresh
	k.mu.Unlock()
	if held || !due {
		return nil
	}
	_, err, _ := k.fetches.Do("", func() (any, error) {
		k.mu.Lock()
		k.fetched = k.now()
		k.mu.Unlock()
		// One caller's fetch serves all that wait on it: it outlives the
		// caller's request, bounded by the client's timeout.
		keys, err := k.fetch(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		k.mu.Lock()
		if k.epoch.Load() == 0 || !sameKeys(k.keys, keys) {
			k.epoch.Add(1)
		}
		k.keys = keys
		k.mu.Unlock()
		return nil, nil
	})
	return err
}

// sameKeys reports whether a and b hold the same keys in the same order:
// key IDs, algorithms and key material (RFC 7638 thumbprints).
func sameKeys(a, b []jose.JSONWebKey) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].KeyID != b[i].KeyID || a[i].Algorithm != b[i].Algorithm {
			return false
		}
		ta, errA := a[i].Thumbprint(crypto.SHA256)
		tb, errB := b[i].Thumbprint(crypto.SHA256)
		if errA != nil || errB != nil || !bytes.Equal(ta, tb) {
			return false
		}
	}
	return true
}

func (k *keySet) holdsLocked(kid string) bool {
	for _, key := range k.keys {
		if key.KeyID == kid {
			return true
		}
	}
	return false
}

// fetch reads the key set at k.url, keeping its public signing keys.
func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	body, status, err := get(ctx, k.client, k.url)
	if err != nil {
		return nil, fmt.Errorf("%w: key set: %v", ErrUnavailable, err)
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("%w: key set %s answered HTTP %d", ErrUnavailable, k.url, status)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("%w: key set %s is not a JSON Web Key Set: %v", ErrUnavailable, k.url, err)
	}
	var keys []jose.JSONWebKey
	for _, key := range set.Keys {
		if key.Use != "" && key.Use != "sig" {
			continue
		}
		keys = append(keys, key.Public())
	}
	return keys, nil
}

// VerifySignature implements oidc.KeySet over the keys held now: the
// payload of jwt when a held key of its key ID (any key, when it names
// none) verifies its signature. It fetches nothing (ensure does).
func (k *keySet) VerifySignature(_ context.Context, jwt string) ([]byte, error) {
	jws, err := jose.ParseSigned(jwt, signingAlgs)
	if err != nil {
		return nil, err
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("want exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	k.mu.Lock()
	keys := k.keys
	k.mu.Unlock()
	named := false
	for i := range keys {
		if kid != "" && keys[i].KeyID != kid {
			continue
		}
		named = true
		if payload, err := jws.Verify(&keys[i]); err == nil {
			return payload, nil
		}
	}
	if kid != "" && !named {
		return nil, fmt.Errorf("the token names the key %q, which the issuer's key set does not hold (a key the issuer withdrew, or a token of another issuer)", clip(kid))
	}
	return nil, errors.New("no key of the issuer's key set verifies the signature")
}

// signingAlgs are the JWS algorithms a token may be signed with: the
// asymmetric ones (RFC 7518, section 3.1; RFC 8037); "none" and the
// HMAC algorithms, whose key a resource server would share, never.
var signingAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}
