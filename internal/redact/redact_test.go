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

func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"redis://:hunter2@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"redis://default:hunter2@h:6379/0?master_name=m", "redis://default:xxxxx@h:6379/0?master_name=m"},
		{"https://user@h/mcp", "https://user@h/mcp"},
		{"notaurl://", "notaurl://"},
		{"redis://:hunter2@h:bad port/0", "(a URL that does not parse)"},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
