package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestZitadelOP: with an empty cache ZitadelOP skips saying to run
// scripts/deps.sh (fails with $CI set); with the binary where
// scripts/deps.sh puts it, it returns its path.
func TestZitadelOP(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(CacheEnv, cache)
	for _, ci := range []string{"", "1"} {
		t.Setenv(CIEnv, ci)
		want := map[string]string{"": "skip", "1": "fatal"}[ci]
		how, msg := Ended(t, func(tb testing.TB) { ZitadelOP(tb) })
		if how != want || !strings.Contains(msg, "the zitadel/oidc example OpenID provider ("+ZitadelPackage+") not found at ") ||
			!strings.Contains(msg, "run scripts/deps.sh") {
			t.Errorf("CI=%q: ZitadelOP ended with %s %q; want %s saying to run scripts/deps.sh", ci, how, msg, want)
		}
	}
	bin := filepath.Join(cache, "bin", "zitadel", "server")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	var got string
	if how, msg := Ended(t, func(tb testing.TB) { got = ZitadelOP(tb) }); how != "" || got != bin {
		t.Errorf("ZitadelOP with the binary installed: %q, ended with %s %q; want %q", got, how, msg, bin)
	}
}
