// hibindex_test.go tests the registry's index of hibernated sessions:
// its table holds no pointer, and tokens of every length round-trip.

package session

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// hasPointers reports whether a value of type t holds a pointer the
// garbage collector must follow.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	default:
		return true
	}
}

// TestHibIndexTableHasNoPointer: the table that holds the registry's
// tokens of hibernated sessions has keys and values without a pointer,
// so the collector does not scan it, whatever its size.
func TestHibIndexTableHasNoPointer(t *testing.T) {
	x := newHibIndex()
	tt := reflect.TypeOf(x.short)
	if hasPointers(tt.Key()) || hasPointers(tt.Elem()) {
		t.Fatalf("the index's table of %s to %s holds pointers", tt.Key(), tt.Elem())
	}
	if got := len(NewToken()); got > tokenKeyLen {
		t.Fatalf("NewToken makes tokens of %d bytes; the index holds at most %d without a pointer", got, tokenKeyLen)
	}
	// hasPointers itself: a string and a map are pointers.
	if !hasPointers(reflect.TypeOf(struct{ s string }{})) || !hasPointers(reflect.TypeOf(map[string]int{})) {
		t.Fatal("hasPointers misses a pointer")
	}
}

// TestHibIndex: set, get, each and del agree for tokens of NewToken's
// length, of tokenKeyLen bytes, empty, and longer (held apart).
func TestHibIndex(t *testing.T) {
	x := newHibIndex()
	toks := []string{NewToken(), strings.Repeat("a", tokenKeyLen), "", strings.Repeat("b", tokenKeyLen+1), "tok-" + strings.Repeat("c", 60)}
	for i, tok := range toks {
		x.set(tok, hibernation{seen: int64(i + 1), gen: uint64(i + 10)})
	}
	if got := x.len(); got != 5 {
		t.Fatalf("len = %d, want 5", got)
	}
	if got := len(x.long); got != 2 {
		t.Fatalf("%d tokens held apart, want 2 (those over %d bytes)", got, tokenKeyLen)
	}
	for i, tok := range toks {
		h, ok := x.get(tok)
		if want := (hibernation{seen: int64(i + 1), gen: uint64(i + 10)}); !ok || h != want {
			t.Fatalf("get(%q) = %+v, %v; want %+v, true", tok, h, ok, want)
		}
	}
	if _, ok := x.get(toks[0][:25]); ok {
		t.Fatal("get of a token's prefix found an entry")
	}
	var seen []string
	x.each(func(k tokenKey, long string, h hibernation) bool {
		if long == "" {
			long = k.String()
		}
		if want, _ := x.get(long); want != h {
			t.Fatalf("each gave %q with %+v, get %+v", long, h, want)
		}
		seen = append(seen, long)
		return true
	})
	slices.Sort(seen)
	want := slices.Clone(toks)
	slices.Sort(want)
	if !slices.Equal(seen, want) {
		t.Fatalf("each gave %q, want %q", seen, want)
	}
	k, _ := keyOf("abcdef")
	for prefix, want := range map[string]bool{"": true, "abc": true, "abcdef": true, "abcdefg": false, "b": false} {
		if got := k.hasPrefix(prefix); got != want {
			t.Errorf("hasPrefix(%q) of %q = %v, want %v", prefix, "abcdef", got, want)
		}
	}
	x.set(toks[0], hibernation{seen: 99})
	if h, _ := x.get(toks[0]); h.seen != 99 || x.len() != 5 {
		t.Fatalf("after set again: %+v, len %d; want seen 99, len 5", h, x.len())
	}
	for _, tok := range toks {
		x.del(tok)
	}
	if got := x.len(); got != 0 {
		t.Fatalf("len after del of all = %d", got)
	}
}
