// hibindex.go holds the registry's index of the sessions it hibernated
// (DESIGN.md, "Hibernation"), kept without a pointer per entry.

package session

// tokenKeyLen is the longest token a tokenKey holds (bytes): NewToken's
// are 26 (crypto/rand.Text).
const tokenKeyLen = 31

// tokenKey is a session token held in place, without a pointer: a table
// keyed by it holds no pointer, so the garbage collector does not scan
// it. With 100,000 sessions hibernated, a table of strings is about 7 MB
// the collector walks in every cycle, during which each request pays
// part of the marking (bench/NOTES.md, "The wake tail").
type tokenKey struct {
	n uint8
	b [tokenKeyLen]byte
}

// keyOf returns token as a tokenKey, false when it is longer than
// tokenKeyLen.
func keyOf(token string) (tokenKey, bool) {
	var k tokenKey
	if len(token) > tokenKeyLen {
		return k, false
	}
	k.n = uint8(copy(k.b[:], token))
	return k, true
}

// String returns the token k holds.
func (k tokenKey) String() string { return string(k.b[:k.n]) }

// hasPrefix reports whether the token k holds starts with prefix.
func (k tokenKey) hasPrefix(prefix string) bool {
	return len(prefix) <= int(k.n) && string(k.b[:len(prefix)]) == prefix
}

// hibIndex maps the token of each session the registry hibernated to its
// hibernation. Tokens up to tokenKeyLen bytes (every one NewToken makes)
// are in short, without a pointer; longer ones, which only a caller's own
// tokens can be, in long. Registry.mu guards it.
type hibIndex struct {
	short map[tokenKey]hibernation
	long  map[string]hibernation
}

func newHibIndex() hibIndex {
	return hibIndex{short: make(map[tokenKey]hibernation)}
}

// get returns token's entry and whether there is one.
func (x *hibIndex) get(token string) (hibernation, bool) {
	if k, ok := keyOf(token); ok {
		h, found := x.short[k]
		return h, found
	}
	h, found := x.long[token]
	return h, found
}

// set makes h token's entry.
func (x *hibIndex) set(token string, h hibernation) {
	if k, ok := keyOf(token); ok {
		x.short[k] = h
		return
	}
	if x.long == nil {
		x.long = make(map[string]hibernation)
	}
	x.long[token] = h
}

// del removes token's entry, if any.
func (x *hibIndex) del(token string) {
	if k, ok := keyOf(token); ok {
		delete(x.short, k)
		return
	}
	delete(x.long, token)
}

// len returns the number of entries.
func (x *hibIndex) len() int { return len(x.short) + len(x.long) }

// each calls f with every entry until f returns false: with the key of
// a token of short (long ""), or with a token of long. A caller that
// looks at every entry and keeps few tokens makes a string only for
// those (tokenKey.String).
func (x *hibIndex) each(f func(k tokenKey, long string, h hibernation) bool) {
	for k, h := range x.short {
		if !f(k, "", h) {
			return
		}
	}
	for tok, h := range x.long {
		if !f(tokenKey{}, tok, h) {
			return
		}
	}
}
