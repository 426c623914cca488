// version.go holds `tidemark version` (also `tidemark --version` and
// `tidemark serve --version`): the build this binary is, for an operator
// asking which build an image or a host runs; the same build /healthz and
// the tidemark_build_info gauge name (currentBuild).

package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/tidemark-mcp/tidemark/admin"
)

// version is the release this binary was built as, set when it is linked:
// go build -ldflags "-X main.version=v1.2.0" (the Dockerfile passes its
// VERSION build argument this way). Empty: currentBuild falls back to what
// the go command recorded.
var version string

// currentBuild returns the build of this binary (admin.ReadBuild) with
// Version the release the linker set, when it set one; otherwise the main
// module's version the go command recorded (the tag with `go install
// ...@v1.2.0`, a pseudo-version naming the commit when built in a git work
// tree), or "(devel)" when it recorded none.
func currentBuild() admin.Build {
	b := admin.ReadBuild()
	switch {
	case version != "":
		b.Version = version
	case b.Version == "":
		b.Version = "(devel)"
	}
	if b.GoVersion == "" {
		b.GoVersion = runtime.Version()
	}
	return b
}

// printVersion writes versionLine(currentBuild()).
func printVersion(w io.Writer) {
	fmt.Fprint(w, versionLine(currentBuild(), runtime.GOOS+"/"+runtime.GOARCH))
}

// versionLine is one line, "tidemark VERSION GOVERSION OS/ARCH", followed,
// when the go command recorded the commit (a build with version control;
// never the image's, built without .git), by " (commit REVISION, DATE)",
// with ", modified" after the revision when the work tree had changes not
// committed. DATE is the commit's time, RFC 3339.
func versionLine(b admin.Build, platform string) string {
	line := fmt.Sprintf("tidemark %s %s %s", b.Version, b.GoVersion, platform)
	if b.Revision != "" {
		line += " (commit " + b.Revision
		if b.Modified {
			line += ", modified"
		}
		if b.Time != "" {
			line += ", " + b.Time
		}
		line += ")"
	}
	return line + "\n"
}
