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

// commit and built are the commit the binary was built from and when it was
// linked (RFC 3339), set when it is linked: -X main.commit=REV -X
// main.built=DATE (the Dockerfile passes its COMMIT and BUILD_DATE build
// arguments this way, its build context having no .git). Empty: the go
// command's record of the commit, if any, stands.
var commit, built string

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
	if commit != "" {
		b.Revision, b.Time, b.Modified = commit, "", false
	}
	b.Built = built
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
// when the build names its commit (the go command's record of a build with
// version control, or the linker's main.commit), by " (commit REVISION,
// DATE, built BUILT)", with ", modified" after the revision when the work
// tree had changes not committed. DATE is the commit's time as the go
// command recorded it and BUILT the link time main.built names, RFC 3339;
// each is left out when the build does not hold it.
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
		if b.Built != "" {
			line += ", built " + b.Built
		}
		line += ")"
	}
	return line + "\n"
}
