package redact

import (
	"errors"
	"net/url"
	"testing"
)

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
		{"redis://:Ab/cD+ef==@127.0.0.1:16380/0", "(a URL that does not parse)"},
		{"127.0.0.1:16379", "127.0.0.1:16379"},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestURLError: the text of a URL's parse error never holds its password
// or a fragment of it; an error about a URL that parses holds the URL in
// URL's form. The inputs are an operator's: an `openssl rand -base64`
// password with / and + written into a Redis URL unencoded.
func TestURLError(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"redis://:Ab/cD+ef==@127.0.0.1:16380/0", "the URL does not parse; a password with characters such as / + = % @ or spaces must be percent-encoded (/ as %2F, + as %2B, = as %3D)"},
		{"redis://:s3cret PW@127.0.0.1:16380/0", "the URL does not parse; a password with characters such as / + = % @ or spaces must be percent-encoded (/ as %2F, + as %2B, = as %3D)"},
		{"redis://:hunter2@127.0.0.1:1/0", `dial redis://:xxxxx@127.0.0.1:1/0: connection refused (xxxxx)`},
		{"redis://127.0.0.1:bad/0", `parse "redis://127.0.0.1:bad/0": invalid port ":bad" after host`},
	} {
		_, perr := url.Parse(tc.raw)
		err := perr
		if err == nil {
			err = errors.New("dial " + tc.raw + ": connection refused (hunter2)")
		}
		if got := URLError(tc.raw, err); got != tc.want {
			t.Errorf("URLError(%q, %v) = %q, want %q", tc.raw, err, got, tc.want)
		}
	}
}
