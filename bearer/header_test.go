package bearer_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/tidemark-mcp/tidemark/bearer"
)

// TestHeader runs testdata/header: "authorization" takes one
// Authorization header value per input line (none: no header) and prints
// the token or the error; "challenge code= scope= metadata=" prints the
// WWW-Authenticate value.
func TestHeader(t *testing.T) {
	datadriven.RunTest(t, "testdata/header", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "authorization":
			var values []string
			if d.Input != "" {
				values = strings.Split(d.Input, "\n")
			}
			tok, err := bearer.ParseAuthorization(values)
			if err != nil {
				return err.Error() + "\n"
			}
			return "token " + tok + "\n"
		case "challenge":
			var code, scope, md string
			for _, a := range d.CmdArgs {
				v := ""
				if len(a.Vals) > 0 {
					v = a.Vals[0]
				}
				switch a.Key {
				case "code":
					code = v
				case "scope":
					scope = strings.ReplaceAll(v, "+", " ")
				case "metadata":
					md = v
				}
			}
			return bearer.Challenge(code, scope, md) + "\n"
		}
		d.Fatalf(t, "unknown command %s", d.Cmd)
		return ""
	})
}

// FuzzAuthorizationHeader: ParseAuthorization never panics, returns a
// token only with a nil error, and a token it returns is a b64token of at
// most MaxTokenBytes that the header carries after its scheme.
func FuzzAuthorizationHeader(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer a.b.c==", "Basic dXNlcjpw", "Bearer", "Bearer  x", "Bearer a=b", "Bearer ä", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok, err := bearer.ParseAuthorization([]string{h})
		if err != nil {
			if tok != "" || !errors.Is(err, bearer.ErrNoToken) && !errors.Is(err, bearer.ErrMalformed) {
				t.Fatalf("%q: %q, %v", h, tok, err)
			}
			return
		}
		if tok == "" || len(tok) > bearer.MaxTokenBytes || !strings.HasSuffix(h, " "+tok) || strings.ContainsAny(tok, " \t\"\\,") {
			t.Fatalf("%q: token %q", h, tok)
		}
	})
}

// FuzzServerMetadata: ParseServerMetadata never panics, and what it
// accepts names the issuer it was asked for.
func FuzzServerMetadata(f *testing.F) {
	for _, s := range []string{`{"issuer":"https://as","jwks_uri":"https://as/jwks"}`, `{"issuer":"https://as","jwks_uri":"ftp://x"}`, `[]`, `{"issuer":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		m, err := bearer.ParseServerMetadata([]byte(body), "https://as")
		if err == nil && m.Issuer != "https://as" {
			t.Fatalf("%q: accepted with issuer %q", body, m.Issuer)
		}
	})
}

// FuzzIntrospection: ParseIntrospection never panics, and what it accepts
// says active or not.
func FuzzIntrospection(f *testing.F) {
	for _, s := range []string{`{"active":true,"sub":"a","aud":["x"],"exp":1e9}`, `{"active":false}`, `{"active":"yes"}`, `{"active":true,"exp":-1}`, `{"active":true,"aud":3}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		ans, err := bearer.ParseIntrospection([]byte(body))
		if err == nil && ans.Active == nil {
			t.Fatalf("%q: accepted without active", body)
		}
	})
}

// TestTokenTooLong: a token of MaxTokenBytes passes; one byte more is
// ErrTooLong, which is an ErrMalformed that says why.
func TestTokenTooLong(t *testing.T) {
	at := strings.Repeat("a", bearer.MaxTokenBytes)
	if tok, err := bearer.ParseAuthorization([]string{"Bearer " + at}); err != nil || tok != at {
		t.Fatalf("a token of MaxTokenBytes: %v", err)
	}
	_, err := bearer.ParseAuthorization([]string{"Bearer " + at + "a"})
	if want := "bearer: malformed Authorization header: the token is longer than 16384 bytes"; !errors.Is(err, bearer.ErrTooLong) || !errors.Is(err, bearer.ErrMalformed) || err.Error() != want {
		t.Fatalf("one byte more: %v, want %q", err, want)
	}
}
