package main

// Configuration of `tidemark serve` from the environment, and its secrets
// (docs/operation.md, "Configuration from the environment" and "Secrets").
//
// Every flag --NAME is also read from the variable TIDEMARK_NAME (upper
// case, dashes as underscores) when the command line does not give it: a
// flag on the command line wins. A repeatable flag's variable holds one
// value per line. --version is never read from the environment.
//
// Secrets are never a flag's value (the process list and shell history
// show those): a secret S is given either as the path of a file that
// holds it, by its file flag or TIDEMARK_S_FILE, or as itself in
// TIDEMARK_S; naming it both ways is an error. The secrets are the
// requestState key ring (S = REQUEST_STATE_KEYS, file flag
// --request-state-keys), the Redis password (S = REDIS_PASSWORD, file
// flag --redis-password-file), the introspection client secret (S =
// AUTH_INTROSPECTION_CLIENT_SECRET, file flag
// --auth-introspection-client-secret-file) and the gateway's client secret
// for the upstream (S = UPSTREAM_OAUTH_CLIENT_SECRET, file flag
// --upstream-oauth-client-secret-file). No log line or error holds a secret.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/tidemark-mcp/tidemark/internal/redact"
)

// envPrefix begins every variable tidemark serve reads.
const envPrefix = "TIDEMARK_"

// secretOfFile maps the flags that name a secret's file to the secret's
// name: their variable is TIDEMARK_<SECRET>_FILE, and TIDEMARK_<SECRET>
// holds the secret itself.
var secretOfFile = map[string]string{
	"request-state-keys":                    "REQUEST_STATE_KEYS",
	"redis-password-file":                   "REDIS_PASSWORD",
	"auth-introspection-client-secret-file": "AUTH_INTROSPECTION_CLIENT_SECRET",
	"upstream-oauth-client-secret-file":     "UPSTREAM_OAUTH_CLIENT_SECRET",
}

// repeatable are the flags that may be given more than once; their
// variable holds one value per line.
var repeatable = map[string]bool{"env": true, "upstream-header": true, "upstream-forward-header": true, "auth-tool-scope": true, "upstream-oauth-scope": true}

// notFromEnv are the flags no variable sets: --version would turn a
// deployment's TIDEMARK_VERSION into a process that prints and exits.
var notFromEnv = map[string]bool{"version": true}

// envName returns the variable of flag name ("" for a flag no variable
// sets).
func envName(name string) string {
	if notFromEnv[name] {
		return ""
	}
	if s, ok := secretOfFile[name]; ok {
		return envPrefix + s + "_FILE"
	}
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// applyEnv sets every flag of fs that args did not set (fs has parsed
// them) from its variable, read with lookup (os.LookupEnv). It returns
// the flags it set, by name, with their variable. A value a flag refuses
// is an error in the form of flagError's, naming the variable and the
// flag; a secret-bearing flag's value is not repeated.
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) (map[string]string, error) {
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	fromEnv := map[string]string{}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		v, set := lookup(name)
		if err != nil || name == "" || onCommandLine[f.Name] || !set {
			return
		}
		values := []string{v}
		if repeatable[f.Name] {
			values = strings.FieldsFunc(v, func(r rune) bool { return r == '\n' || r == '\r' })
		}
		for _, one := range values {
			if serr := f.Value.Set(one); serr != nil {
				shown := fmt.Sprintf(" %q", one)
				if secretBearing[f.Name] {
					shown = ""
				}
				err = fmt.Errorf("%s%s (--%s): want %s", name, shown, f.Name, accepted(f, serr))
				return
			}
		}
		fromEnv[f.Name] = name
	})
	return fromEnv, err
}

// secretBearing are the flags whose value may hold a secret, which no
// error repeats: a header line such as "Authorization: Bearer TOKEN".
// (--redis and --upstream URLs are shown with their password redacted.)
var secretBearing = map[string]bool{"upstream-header": true, "header": true}

// annotate returns msg, an error of serve, with the first mention of each
// flag set from the environment followed by its variable, e.g.
// "--max-sessions (from TIDEMARK_MAX_SESSIONS) 0: want ...", so that the
// line names what to change.
func annotate(msg string, fromEnv map[string]string) string {
	for name, v := range fromEnv {
		re := regexp.MustCompile(`--` + regexp.QuoteMeta(name) + `([^a-z0-9-]|$)`)
		if loc := re.FindStringIndex(msg); loc != nil {
			end := loc[0] + 2 + len(name)
			msg = msg[:end] + " (from " + v + ")" + msg[end:]
		}
	}
	return msg
}

// secretConfig holds the secrets' flags that other flag groups do not.
type secretConfig struct {
	redisPasswordFile string // --redis-password-file
}

// secretFlags declares them on fs.
func secretFlags(fs *flag.FlagSet, c *secretConfig) {
	fs.StringVar(&c.redisPasswordFile, "redis-password-file", "", "with --redis: file whose first line is the Redis password, instead of a password in the --redis URL, which ps shows; $"+envPrefix+"REDIS_PASSWORD may hold the password itself (path; empty: the URL's password, if any)")
}

// redisPassword resolves the Redis password of serve's --redis URL
// (withRedisPassword).
func (c *serveConfig) redisPassword(lookup func(string) (string, bool)) error {
	u, err := withRedisPassword(c.fleet.redisURL, c.secrets.redisPasswordFile, lookup)
	if err == nil {
		c.fleet.redisURL = u
	}
	return err
}

// withRedisPassword returns redisURL with the Redis password that
// --redis-password-file (file) or $TIDEMARK_REDIS_PASSWORD (read with
// lookup, os.LookupEnv) gives written into its userinfo, as go-redis's
// URL parsers read it; redisURL as it is when neither gives one. It fails
// when the password is named twice (the URL, the file, the variable),
// without a URL, or when the file cannot be read; its errors never hold
// the password.
func withRedisPassword(redisURL, file string, lookup func(string) (string, bool)) (string, error) {
	const envVar = envPrefix + "REDIS_PASSWORD"
	envPass, inEnv := lookup(envVar)
	if !inEnv && file == "" {
		return redisURL, nil
	}
	var sources []string
	if inEnv {
		sources = append(sources, "$"+envVar)
	}
	if file != "" {
		sources = append(sources, "--redis-password-file")
	}
	if redisURL == "" {
		return "", fmt.Errorf("%s: want --redis too: a Redis password applies to a fleet's Redis only", strings.Join(sources, " and "))
	}
	u, err := url.Parse(redisURL) // checked by redis.CheckURL before
	if err != nil {
		return "", fmt.Errorf("--redis %s: %s", redact.URL(redisURL), redact.URLError(redisURL, err))
	}
	if _, has := u.User.Password(); has {
		sources = append([]string{"the --redis URL"}, sources...)
	}
	if len(sources) > 1 {
		return "", fmt.Errorf("the Redis password is named by %s: want one of them", strings.Join(sources, " and "))
	}
	password := envPass
	if file != "" {
		if err := checkFile("redis-password-file", file, "a file holding the Redis password"); err != nil {
			return "", err
		}
		text, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--redis-password-file %q: %v", file, errors.Unwrap(err))
		}
		password, _, _ = strings.Cut(string(text), "\n")
		password = strings.TrimSuffix(password, "\r")
	}
	if password == "" {
		return "", fmt.Errorf("%s: the Redis password is empty: want the password", sources[0])
	}
	user := ""
	if u.User != nil {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, password)
	return u.String(), nil
}

// annotating writes each write to w through annotate: serve writes its
// error lines to it, so a line naming a flag the environment set names
// its variable too.
type annotating struct {
	w       io.Writer
	fromEnv map[string]string
}

func (a *annotating) Write(p []byte) (int, error) {
	if len(a.fromEnv) == 0 {
		return a.w.Write(p)
	}
	if _, err := io.WriteString(a.w, annotate(string(p), a.fromEnv)); err != nil {
		return 0, err
	}
	return len(p), nil
}
