package redact

import "testing"

func TestToken(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"ABCDEFGH", "ABCDEFGH"},
		{"ABCDEFGHI", "ABCDEFGH…"},
		{"TESTTOKENABCDEFGHIJKLMNOPQ", "TESTTOKE…"},
	} {
		if got := Token(tc.in); got != tc.want {
			t.Errorf("Token(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
