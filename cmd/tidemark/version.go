// version.go holds `tidemark version`: the release this binary was built
// as, for an operator asking which build an image or a host runs.

package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release this binary was built as, set when it is linked:
// go build -ldflags "-X main.version=v1.2.0" (the Dockerfile passes its
// VERSION build argument this way). Empty: buildVersion falls back to what
// the go command recorded.
var version string

// buildVersion returns version when the linker set it; otherwise the main
// module's version the go command recorded in the binary (the tag with
// `go install ...@v1.2.0`, a pseudo-version naming the commit when built
// in a git work tree), or "(devel)" when it recorded none.
func buildVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

// printVersion writes `tidemark VERSION GOVERSION OS/ARCH` and a newline.
func printVersion(w io.Writer) {
	fmt.Fprintf(w, "tidemark %s %s %s/%s\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
