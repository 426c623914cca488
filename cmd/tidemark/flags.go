package main

// How every subcommand reads its flags and reports a bad one: in one line
// that names the command, the flag, the value and what the flag accepts,
// never with the whole usage text (which -h prints).

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/redact"
)

// parseFlags parses args with fs. On success ok is true. On -h or -help it
// prints fs's usage on stderr and returns code 0; on a bad flag it prints
// one line on stderr (flagError) and returns code 2.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	var failed *setFailure
	fs.VisitAll(func(f *flag.Flag) {
		f.Value = &recorded{Value: f.Value, flag: f, failed: &failed}
	})
	fs.SetOutput(io.Discard) // the flag package would print the whole usage
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	// The usage text names each flag's type from its Value's type.
	fs.VisitAll(func(f *flag.Flag) {
		if r, ok := f.Value.(*recorded); ok {
			f.Value = r.Value
		}
	})
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return 0, false
	}
	fmt.Fprintf(stderr, "%s: %s\n", fs.Name(), flagError(fs, err, failed))
	return 2, false
}

// parseCommand parses args with fs as parseFlags does, for a command
// whose --version flag sets *version: given it, the command prints the
// build on stdout (printVersion) and exits 0 before it checks anything
// else, so ok is false with code 0.
func parseCommand(fs *flag.FlagSet, args []string, version *bool, stdout, stderr io.Writer) (code int, ok bool) {
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code, false
	}
	if *version {
		printVersion(stdout)
		return 0, false
	}
	return 0, true
}

// setFailure is a value a flag refused: the flag, the value as given and
// the flag's error.
type setFailure struct {
	flag  *flag.Flag
	value string
	err   error
}

// recorded is a flag.Value that remembers the value its Set refused, so
// that the error line can say what the flag accepts without reading the
// flag package's error text.
type recorded struct {
	flag.Value
	flag   *flag.Flag
	failed **setFailure
}

func (r *recorded) Set(s string) error {
	err := r.Value.Set(s)
	if err != nil && *r.failed == nil {
		*r.failed = &setFailure{flag: r.flag, value: s, err: err}
	}
	return err
}

// IsBoolFlag keeps a bool flag a bool flag (one without a value).
func (r *recorded) IsBoolFlag() bool {
	b, ok := r.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Get returns the wrapped flag's value (flag.Getter), nil for a flag that
// has no Get.
func (r *recorded) Get() any {
	if g, ok := r.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}

// Errors of the flag package that name a flag but come from no Set: a
// flag that is not defined, and one given without its value. Their text
// is the flag package's (go/src/flag/flag.go, FlagSet.parseOne).
var (
	unknownFlag = regexp.MustCompile(`^flag provided but not defined: (-\S+)$`)
	missingArg  = regexp.MustCompile(`^flag needs an argument: -(\S+)$`)
)

// flagError returns the line that reports err, the error of fs.Parse:
// "--NAME "VALUE": want WHAT" for a value a flag refused, "--NAME needs a
// value: want WHAT" for a flag without its value, "unknown flag -NAME: ..."
// for one fs does not define.
func flagError(fs *flag.FlagSet, err error, failed *setFailure) string {
	if failed != nil {
		if secretBearing[failed.flag.Name] {
			return fmt.Sprintf("--%s: want %s", failed.flag.Name, accepted(failed.flag, failed.err))
		}
		return fmt.Sprintf("--%s %q: want %s", failed.flag.Name, failed.value, accepted(failed.flag, failed.err))
	}
	if m := unknownFlag.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Sprintf("unknown flag %s: %s -h lists the flags", m[1], fs.Name())
	}
	if m := missingArg.FindStringSubmatch(err.Error()); m != nil {
		if f := fs.Lookup(m[1]); f != nil {
			return fmt.Sprintf("--%s needs a value: want %s", f.Name, accepted(f, nil))
		}
	}
	return err.Error()
}

// unit is the parenthesis that ends a flag's help text, e.g. "(events; -1:
// no limit)": the unit and special values of the flag (README.md's flag
// tables show the same text).
var unit = regexp.MustCompile(`\(([^()]*)\)$`)

// accepted says what f accepts, for "want ...": from the type of its value
// (a bool, an integer, a duration, a log level), followed by the unit of
// its help text; for a flag whose value type says nothing (a Func flag),
// setErr, the flag's own error, which says what it wants.
func accepted(f *flag.Flag, setErr error) string {
	var what string
	var v any
	if g, ok := f.Value.(flag.Getter); ok {
		v = g.Get()
	}
	switch v.(type) {
	case bool:
		return "true or false"
	case int, int64, uint, uint64:
		what = "an integer"
	case float64:
		what = "a number"
	case time.Duration:
		what = "a duration such as 500ms, 10s or 2m"
	case slog.Level, *slog.Level: // flag.TextVar's Get gives the pointer
		return "DEBUG, INFO, WARN or ERROR"
	default:
		if setErr != nil {
			return strings.TrimPrefix(setErr.Error(), "want ")
		}
		what = "a value"
	}
	if m := unit.FindStringSubmatch(f.Usage); m != nil {
		what += " (" + m[1] + ")"
	}
	return what
}

// checkHostPort returns the usage error of flag name whose value v is not
// host:port (the host may be empty: every interface), or nil.
func checkHostPort(name, v string) error {
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		return fmt.Errorf("--%s %q: want host:port, e.g. 127.0.0.1:%s", name, v, examplePort[name])
	}
	return nil
}

// examplePort is the port of each address flag's example.
var examplePort = map[string]string{"addr": "8080", "metrics-addr": "9464"}

// checkHTTPURL returns the usage error of flag name whose value v is not
// an absolute http or https URL with a host, or nil; what says what the
// URL names. A URL holding "$(" is refused: it is a variable its
// environment did not expand (Kubernetes leaves $(VAR) in a container's
// args as written when VAR is not in its env), which no peer can reach.
// So is a host that is empty (http://:8080/mcp) or holds characters no
// host name has (RFC 1123, section 2.1: letters, digits, hyphens, dots;
// underscores are accepted, as resolvers do), unless it is a bracketed
// IPv6 address.
func checkHTTPURL(name, v, what string) error {
	want := "want an absolute http:// or https:// URL of " + what
	if strings.Contains(v, "$(") {
		return fmt.Errorf("--%s %q: holds \"$(\", a variable its environment did not expand (Kubernetes leaves $(VAR) as written when VAR is not in the container's env): %s", name, redact.URL(v), want)
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--%s %q: %s", name, redact.URL(v), want)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("--%s %q: the host is empty: %s", name, redact.URL(v), want)
	}
	if !strings.HasPrefix(u.Host, "[") && strings.IndexFunc(host, notHostRune) >= 0 {
		return fmt.Errorf("--%s %q: the host %q has characters a host name cannot have: %s", name, redact.URL(v), host, want)
	}
	return nil
}

// notHostRune reports whether r cannot be in a host name or an IPv4
// address.
func notHostRune(r rune) bool {
	return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '.' || r == '_')
}

// checkFile returns the usage error of flag name whose value, the path of
// a file, names nothing or a directory, or nil; what says what the file
// holds. A file that exists but cannot be read is the command's failure,
// reported when it is read.
func checkFile(name, path, what string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("--%s %q: no such file: want the path of %s", name, path, what)
	case err == nil && fi.IsDir():
		return fmt.Errorf("--%s %q: a directory: want the path of %s", name, path, what)
	}
	return nil
}
