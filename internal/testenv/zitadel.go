package testenv

import (
	"path/filepath"
	"testing"
)

// ZitadelPackage is the Go package, at its pinned version, that
// scripts/deps.sh builds into <cache>/bin/zitadel: the example OpenID
// provider of the zitadel/oidc library (an in-memory issuer with a login
// form, two users, client credentials and token exchange).
const ZitadelPackage = "github.com/zitadel/oidc/v3/example/server@v3.52.0"

// ZitadelOP returns the path of the zitadel/oidc example OpenID provider
// that scripts/deps.sh installed (ZitadelPackage, built into
// <cache>/bin/zitadel/server). When it is missing it ends the test as
// Need does: a skip saying to run scripts/deps.sh, a failure with $CI set.
func ZitadelOP(t testing.TB) string {
	t.Helper()
	return mustExist(t, filepath.Join(Cache(t), "bin", "zitadel", "server"), "the zitadel/oidc example OpenID provider ("+ZitadelPackage+")")
}
