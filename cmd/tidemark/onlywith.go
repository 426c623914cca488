package main

// The flags of `tidemark serve` that apply with another flag only, as
// their help says ("with --redis: ...", "most --stdio subprocesses ..."),
// and the one check that refuses them without it.

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

// onlyWith is one rule "each of flags applies with one of needs only":
// without it, the flag does nothing.
type onlyWith struct {
	flags []string
	needs []string // one at least must be in effect
	what  string   // what the needed flag gives, said in the refusal ("" for nothing)
}

// flagsOnlyWith are the rules, in the order they are checked: a flag that
// needs a flag that needs another (--upstream-oauth-client-id, then
// --upstream-oauth-token-url, then --upstream) is first refused for the
// outermost need. An operator who gives such a flag without its need would
// believe in a setting no process applies: serve --redis-replicas 1
// without --redis runs on the memory store, no write waiting for any
// replica; serve --max-processes 10 without --stdio runs no subprocess.
// Flags whose help says they apply in every mode are not here.
var flagsOnlyWith = []onlyWith{
	// The fleet (docs/fleet.md, "Fleet mode").
	{[]string{"redis-password-file", "replica-id", "lease-ttl", "lease-renew", "redis-replicas", "redis-replication-timeout", "advertise-url"},
		[]string{"redis"}, "the fleet's Redis"},
	// The used-requestState bound; with --redis it is refused by
	// stateConfig.checkGiven.
	{[]string{"request-state-used-max"}, []string{"request-state-single-use"}, ""},
	// The stdio gateway (docs/gateways.md, "Gateway mode").
	{[]string{"env", "max-processes", "stdio-hibernate", "stdio-cancel-grace", "stdio-init-timeout"},
		[]string{"stdio"}, "the gateway to a stdio MCP server"},
	// The Streamable HTTP gateway (docs/gateways.md, "Gateway to a
	// Streamable HTTP server").
	{[]string{"upstream-header", "upstream-forward-header", "upstream-connect-timeout", "upstream-timeout", "upstream-resume-timeout",
		"upstream-oauth-token-url", "upstream-oauth-client-id", "upstream-oauth-client-secret-file", "upstream-oauth-scope"},
		[]string{"upstream"}, "the URL of the MCP server to serve"},
	{[]string{"upstream-oauth-client-id", "upstream-oauth-client-secret-file", "upstream-oauth-scope"},
		[]string{"upstream-oauth-token-url"}, "the token endpoint"},
	// Either gateway (README, "Tasks").
	{[]string{"task-tools", "task-required"}, []string{"stdio", "upstream"}, "a gateway"},
	// Authorization (README, "Authorization").
	{[]string{"auth-audience", "auth-resource", "auth-jwks", "auth-introspection", "auth-introspection-cache",
		"auth-introspection-client-id", "auth-introspection-client-secret-file", "auth-tool-scope"},
		[]string{"auth-issuer"}, "the issuer of the tokens"},
	{[]string{"auth-introspection-cache", "auth-introspection-client-id"}, []string{"auth-introspection"}, ""},
	{[]string{"auth-introspection-client-secret-file"}, []string{"auth-introspection-client-id"}, ""},
}

// checkOnlyWith refuses the first flag of flagsOnlyWith that is given (on
// the command line or by the environment: given) while none of the flags
// it needs is in effect, whatever its value, the default's included. A
// needed flag is in effect when its value in fs is not empty or false.
// The error says "--X applies with --Y only, and without it does nothing:
// want --Y, WHAT, too, or leave --X out".
func checkOnlyWith(fs *flag.FlagSet, given func(name string) bool) error {
	inEffect := func(name string) bool {
		v := fs.Lookup(name).Value.String()
		return v != "" && v != "false"
	}
	for _, r := range flagsOnlyWith {
		if slices.ContainsFunc(r.needs, inEffect) {
			continue
		}
		for _, name := range r.flags {
			if given(name) {
				return refuseWithout(name, r.needs, r.what)
			}
		}
	}
	return nil
}

// refuseWithout returns the refusal of flag, given without one of needs,
// which gives what.
func refuseWithout(flag string, needs []string, what string) error {
	need := "--" + strings.Join(needs, " or --")
	without := "without it"
	if len(needs) > 1 {
		without = "without either"
	}
	want := need
	if what != "" {
		want += ", " + what + ","
	}
	return fmt.Errorf("--%s applies with %s only, and %s does nothing: want %s too, or leave --%s out", flag, need, without, want, flag)
}
