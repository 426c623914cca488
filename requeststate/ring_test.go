package requeststate_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/requeststate"
)

// Two keys in every base64 form ParseRing accepts: keyA is 32 bytes of 0x01
// (ID 1a15a15e), keyB 32 bytes of 0xfb, whose encodings differ between the
// standard and the URL alphabets.
const (
	keyAStd    = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="
	keyARawStd = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE"
	keyBStd    = "+/v7+/v7+/v7+/v7+/v7+/v7+/v7+/v7+/v7+/v7+/s="
	keyBURL    = "-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_s="
	keyBRawURL = "-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_s"
	idA        = "1a15a15e"
)

func TestParseRing(t *testing.T) {
	idB := mustParse(t, keyBStd).IDs()[0]
	for _, tc := range []struct {
		name, text string
		ids        []string
		sealing    string // at 2026-11-06T12:00:00Z
	}{
		{"one key", keyAStd, []string{idA}, idA},
		{"unpadded", keyARawStd, []string{idA}, idA},
		{"URL alphabet", keyBURL, []string{idB}, idB},
		{"URL alphabet unpadded", keyBRawURL, []string{idB}, idB},
		{"comments, blank lines, spaces", "# fleet keys\n\n  " + keyAStd + "  \n# next\n" + keyBStd + "\n", []string{idA, idB}, idB},
		{"commas", keyAStd + "," + keyBStd, []string{idA, idB}, idB},
		{"CRLF", keyAStd + "\r\n" + keyBStd + "\r\n", []string{idA, idB}, idB},
		{"future not-before", keyAStd + "\n" + keyBStd + " 2026-11-06T12:00:01Z", []string{idA, idB}, idA},
		{"past not-before", keyAStd + "\n" + keyBStd + " 2026-11-06T12:00:00Z", []string{idA, idB}, idB},
		{"offset not-before", keyAStd + "\n" + keyBStd + " 2026-11-06T13:00:00+01:00", []string{idA, idB}, idB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := requeststate.ParseRing(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.IDs(); !slices.Equal(got, tc.ids) {
				t.Errorf("IDs = %q, want %q", got, tc.ids)
			}
			at := time.Date(2026, 11, 6, 12, 0, 0, 0, time.UTC)
			if got := r.SealingID(at); got != tc.sealing {
				t.Errorf("SealingID = %q, want %q", got, tc.sealing)
			}
		})
	}
}

func TestParseRingErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"empty", "", "requeststate: the key ring holds no key (want one base64 key of 32 bytes per line)"},
		{"comments only", "# nothing\n\n", "requeststate: the key ring holds no key (want one base64 key of 32 bytes per line)"},
		{"not base64", "not-a-key!", "requeststate: key ring entry 1: the key is not base64 (generate one with: openssl rand -base64 32)"},
		{"16 bytes", "AAAAAAAAAAAAAAAAAAAAAA==", "requeststate: key ring entry 1: the key is 16 bytes, want 32 (generate one with: openssl rand -base64 32)"},
		{"bad time", keyAStd + " tomorrow", `requeststate: key ring entry 1: not-before time "tomorrow" is not RFC 3339 (e.g. 2026-11-07T12:00:00Z)`},
		{"three fields", keyAStd + " 2026-11-07T12:00:00Z extra", "requeststate: key ring entry 1: 3 fields, want a key and at most a not-before time"},
		{"second entry", keyAStd + "\n" + keyAStd[:20], "requeststate: key ring entry 2: the key is 15 bytes, want 32 (generate one with: openssl rand -base64 32)"},
		{"duplicate", keyAStd + "\n" + keyARawStd, "requeststate: keys 1 and 2 have the same ID 1a15a15e: each key must be a distinct random secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := requeststate.ParseRing(tc.text)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), keyAStd[:20]) {
				t.Errorf("the error shows key material: %v", err)
			}
		})
	}
}

func TestLoadRing(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "keys")
	if err := os.WriteFile(file, []byte(keyAStd+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("file", func(t *testing.T) {
		r, source, err := requeststate.LoadRing(file)
		if err != nil || source != "file "+file || !slices.Equal(r.IDs(), []string{idA}) {
			t.Fatalf("LoadRing = (%v, %q, %v), want ring [%s] from %q", r, source, err, idA, "file "+file)
		}
	})
	t.Run("environment", func(t *testing.T) {
		t.Setenv(requeststate.EnvKeys, keyBStd+","+keyAStd)
		r, source, err := requeststate.LoadRing("")
		if err != nil || source != "environment TIDEMARK_REQUEST_STATE_KEYS" || len(r.IDs()) != 2 {
			t.Fatalf("LoadRing = (%v, %q, %v), want 2 keys from the environment", r, source, err)
		}
	})
	t.Run("neither", func(t *testing.T) {
		r, source, err := requeststate.LoadRing("")
		if r != nil || source != "" || err != nil {
			t.Fatalf("LoadRing = (%v, %q, %v), want (nil, \"\", nil)", r, source, err)
		}
	})
	t.Run("both", func(t *testing.T) {
		t.Setenv(requeststate.EnvKeys, keyBStd)
		_, _, err := requeststate.LoadRing(file)
		want := "requeststate: keys are named twice, by the file " + file + " and by $TIDEMARK_REQUEST_STATE_KEYS: unset one"
		if err == nil || err.Error() != want {
			t.Fatalf("error = %v, want %q", err, want)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		_, _, err := requeststate.LoadRing(filepath.Join(dir, "nope"))
		want := "requeststate: read key ring: open " + filepath.Join(dir, "nope") + ": no such file or directory"
		if err == nil || err.Error() != want {
			t.Fatalf("error = %v, want %q", err, want)
		}
	})
	t.Run("bad environment", func(t *testing.T) {
		t.Setenv(requeststate.EnvKeys, "short")
		_, _, err := requeststate.LoadRing("")
		want := "requeststate: key ring entry 1: the key is not base64 (generate one with: openssl rand -base64 32) (in $TIDEMARK_REQUEST_STATE_KEYS)"
		if err == nil || err.Error() != want {
			t.Fatalf("error = %v, want %q", err, want)
		}
	})
}

func TestRandomRing(t *testing.T) {
	a, b := requeststate.RandomRing(), requeststate.RandomRing()
	if len(a.IDs()) != 1 || a.IDs()[0] == b.IDs()[0] {
		t.Fatalf("two random rings have IDs %q and %q, want one key each, different", a.IDs(), b.IDs())
	}
}

func mustParse(t *testing.T, text string) *requeststate.Ring {
	t.Helper()
	r, err := requeststate.ParseRing(text)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSameStart: SameStart groups the keys that start to seal at one time
// (equal instants in any offset, or no not-before time), in ring order,
// and leaves out the keys whose start is their own.
func TestSameStart(t *testing.T) {
	const keyC = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI="
	idB, idC := mustParse(t, keyBStd).IDs()[0], mustParse(t, keyC).IDs()[0]
	at := time.Date(2026, 11, 7, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, text string
		want       []requeststate.KeyGroup
	}{
		{"distinct", keyAStd + "\n" + keyBStd + " 2026-11-07T12:00:00Z", nil},
		{"one key", keyAStd, nil},
		{"both without a time", keyAStd + "\n" + keyBStd, []requeststate.KeyGroup{{IDs: []string{idA, idB}}}},
		{"same instant, two offsets", keyAStd + "\n" + keyBStd + " 2026-11-07T12:00:00Z\n" + keyC + " 2026-11-07T13:00:00+01:00",
			[]requeststate.KeyGroup{{IDs: []string{idB, idC}, NotBefore: at}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mustParse(t, tc.text).SameStart()
			if len(got) != len(tc.want) {
				t.Fatalf("SameStart = %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if !slices.Equal(got[i].IDs, tc.want[i].IDs) || !got[i].NotBefore.Equal(tc.want[i].NotBefore) {
					t.Errorf("SameStart = %+v, want %+v", got, tc.want)
				}
			}
		})
	}
}
