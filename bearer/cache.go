// cache.go holds the tokens already verified, so that a client sending
// the same token on every request pays its signature check (about 165 µs
// for ES256) once, not per request (DESIGN.md, "Authorization").

package bearer

import (
	"crypto/sha256"
	"slices"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/modelcontextprotocol/go-sdk/auth"
)

// verified is what a cached token was found to grant, and for how long
// that finding stands.
type verified struct {
	info auth.TokenInfo
	// until is when the finding lapses: a JWT's exp plus the skew, an
	// introspection answer's time plus Config.IntrospectionCache (or its
	// exp plus the skew, when sooner).
	until time.Time
	// keys is the key set's epoch the JWT's signature was checked under;
	// zero for an introspected token.
	keys uint64
}

// tokenCache maps the SHA-256 of a token (never the token itself, so a
// heap dump does not hold live credentials) to what it was verified to
// grant, least recently used first out. Only valid tokens are kept: an
// invalid one is checked again each time, which costs the sender, not
// another client.
type tokenCache struct {
	lru *lru.Cache[[sha256.Size]byte, verified]
}

// newTokenCache returns a cache of size entries; nil when size is not
// positive (every token is verified each time).
func newTokenCache(size int) *tokenCache {
	if size <= 0 {
		return nil
	}
	c, err := lru.New[[sha256.Size]byte, verified](size)
	if err != nil {
		panic(err) // only a non-positive size fails
	}
	return &tokenCache{lru: c}
}

// get returns the TokenInfo of the token whose digest is key, if it was
// verified and the finding still stands at now: unexpired, and for a
// JWT checked under the key set epoch keys (a changed key set voids
// every signature check made under the old one). The caller owns the
// TokenInfo returned.
func (c *tokenCache) get(key [sha256.Size]byte, now time.Time, keys uint64) (*auth.TokenInfo, bool) {
	if c == nil {
		return nil, false
	}
	e, ok := c.lru.Get(key)
	if !ok {
		return nil, false
	}
	if !now.Before(e.until) || (e.keys != 0 && e.keys != keys) {
		c.lru.Remove(key)
		return nil, false
	}
	info := e.info
	info.Scopes = slices.Clone(info.Scopes)
	return &info, true
}

// put remembers that the token whose digest is key grants info until
// until, as checked under the key set epoch keys (zero: introspected).
func (c *tokenCache) put(key [sha256.Size]byte, info *auth.TokenInfo, until time.Time, keys uint64) {
	if c == nil || until.IsZero() {
		return
	}
	e := verified{info: *info, until: until, keys: keys}
	e.info.Scopes = slices.Clone(info.Scopes)
	c.lru.Add(key, e)
}
