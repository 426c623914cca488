package via

import (
	"net/http"
	"regexp"
	"slices"
	"testing"
)

// TestAppendKeepsTheChain: this process's entry goes after every entry of
// the request it is sent for, and Loops finds it there, in any position.
func TestAppendKeepsTheChain(t *testing.T) {
	if !regexp.MustCompile(`^tidemark-[0-9a-f]{16}$`).MatchString(Pseudonym()) {
		t.Fatalf("Pseudonym() = %q, want tidemark- and 16 hex digits", Pseudonym())
	}
	in := http.Header{}
	in.Add("Via", "1.1 proxy-a, 2 lb.example:8080 (nginx)")
	in.Add("Via", "1.1 tidemark-0000000000000000")
	if Loops(in) {
		t.Fatalf("Loops(%v) = true; it names other processes only", in)
	}
	out := http.Header{}
	Append(out, in)
	want := []string{"1.1 proxy-a, 2 lb.example:8080 (nginx)", "1.1 tidemark-0000000000000000", "1.1 " + Pseudonym()}
	if got := out.Values("Via"); !slices.Equal(got, want) {
		t.Fatalf("Via after Append = %q, want %q", got, want)
	}
	if !Loops(out) {
		t.Fatalf("Loops(%v) = false, want true", out)
	}
	mid := http.Header{"Via": {"1.0 a, 1.1 " + Pseudonym() + " (tidemark), 1.1 b"}}
	if !Loops(mid) {
		t.Fatalf("Loops(%v) = false, want true", mid)
	}
	fresh := http.Header{}
	Append(fresh, nil)
	if got := fresh.Values("Via"); !slices.Equal(got, []string{"1.1 " + Pseudonym()}) {
		t.Fatalf("Via of a request sent for none = %q", got)
	}
}
