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
	maxAge  time.Duration // a set this old is fetched again at the next token
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
// when it holds no key yet, or holds none of that ID, or suspect says a
// held key of that ID failed to verify a token (the issuer may have
// replaced its keys under the same IDs, or names none), provided the last
// fetch is at least the refresh interval old: a flood of tokens naming
// unknown keys, or signed by keys nobody publishes, costs at most one
// fetch per interval. A set older than maxAge is fetched again at the
// next token too, so that a key the issuer withdrew stops verifying
// within maxAge even when no token names an unknown key; that fetch
// failing keeps the keys held. Concurrent fetches are one. It fails,
// wrapping ErrUnavailable, only when a fetch it needed failed; a key
// still unknown after it is the signature check's failure.
func (k *keySet) ensure(ctx context.Context, kid string, suspect bool) error {
	k.mu.Lock()
	held := len(k.keys) > 0 && (kid == "" || k.holdsLocked(kid)) && !suspect
	age := k.now().Sub(k.fetched)
	due := k.fetched.IsZero() || len(k.keys) == 0 || age >= k.refresh
	stale := len(k.keys) > 0 && age >= k.maxAge
	k.mu.Unlock()
	if held && !stale || !due {
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
	if err != nil && held {
		return nil // only its age asked for the fetch: the keys held still serve
	}
	return err
}

// sigFailure, found in the context VerifySignature is given, learns that
// no held key verified the token's signature: go-oidc reports that
// failure as text only.
type sigFailure struct{ failed atomic.Bool }

type sigFailureKey struct{}

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
func (k *keySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	payload, err := k.verifySignature(jwt)
	if f, ok := ctx.Value(sigFailureKey{}).(*sigFailure); ok && err != nil {
		f.failed.Store(true)
	}
	return payload, err
}

func (k *keySet) verifySignature(jwt string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(jwt, signingAlgs)
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
