// connect_oauth.go holds the OAuth flags of `tidemark connect`
// (internal/oauthclient; docs/connect.md, "OAuth").

package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/tidemark-mcp/tidemark/internal/oauthclient"
)

// oauthConfig holds the OAuth flags of `tidemark connect`.
type oauthConfig struct {
	browser           string
	clientID          string
	clientSecret      string
	clientMetadataURL string
	callbackPort      int
}

// register adds the OAuth flags to fs.
func (o *oauthConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&o.browser, "oauth-browser", string(oauthclient.BrowserOpen), "how the user reaches the authorization URL when the server asks for OAuth: open (the system browser), print (the URL on stderr) or fetch (tidemark connect fetches it and follows the redirects to its callback, for authorization servers that need no user)")
	fs.StringVar(&o.clientID, "oauth-client-id", "", "client ID registered beforehand with the server's authorization server; ${VAR} is replaced by the environment variable VAR (empty: a client ID metadata document or dynamic client registration)")
	fs.StringVar(&o.clientSecret, "oauth-client-secret", "", "secret of --oauth-client-id, e.g. ${CLIENT_SECRET}; ${VAR} is replaced by the environment variable VAR (empty: a public client)")
	fs.StringVar(&o.clientMetadataURL, "oauth-client-metadata-url", "", "https URL of this client's metadata document, used as its client ID where the authorization server supports client ID metadata documents (empty: not used)")
	fs.IntVar(&o.callbackPort, "oauth-callback-port", 0, "loopback port of the redirect URI http://127.0.0.1:PORT/callback (port; 0: a free port chosen at the first authorization)")
}

// transport returns the OAuth transport toward the MCP endpoint server,
// or nil when the user's --header already carries Authorization (the
// server gets that credential and nothing else). An error is a usage
// error.
func (o *oauthConfig) transport(server string, header http.Header, prompt io.Writer, logger *slog.Logger) (*oauthclient.Transport, error) {
	if header.Get("Authorization") != "" {
		return nil, nil
	}
	b, err := oauthclient.ParseBrowser(o.browser)
	if err != nil {
		return nil, fmt.Errorf("--oauth-browser: %w", err)
	}
	id, err := expandEnv(o.clientID, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("--oauth-client-id: %w", err)
	}
	secret, err := expandEnv(o.clientSecret, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("--oauth-client-secret: %w", err)
	}
	if secret != "" && id == "" {
		return nil, fmt.Errorf("--oauth-client-secret: want it with --oauth-client-id, the client it authenticates")
	}
	if m := o.clientMetadataURL; m != "" {
		if u, err := url.Parse(m); err != nil || u.Scheme != "https" || strings.Trim(u.Path, "/") == "" {
			return nil, fmt.Errorf("--oauth-client-metadata-url %q: want an https URL with a path, e.g. https://example.com/client.json", m)
		}
	}
	if o.callbackPort < 0 || o.callbackPort > 65535 {
		return nil, fmt.Errorf("--oauth-callback-port: want 0 to 65535, got %d", o.callbackPort)
	}
	return oauthclient.New(oauthclient.Config{
		Server:            server,
		ClientID:          id,
		ClientSecret:      secret,
		ClientMetadataURL: o.clientMetadataURL,
		Browser:           b,
		CallbackPort:      o.callbackPort,
		Prompt:            prompt,
		Logger:            logger,
	})
}

// expandEnv replaces ${VAR} and $VAR in s by the variables lookup finds
// ($$ is a $); an unset variable is an error naming it, never the value.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	var unset []string
	out := os.Expand(s, func(name string) string {
		if name == "$" {
			return "$"
		}
		v, ok := lookup(name)
		if !ok {
			unset = append(unset, name)
		}
		return v
	})
	if len(unset) > 0 {
		return "", fmt.Errorf("want ${VAR} of variables that are set; not set: %s", strings.Join(unset, ", "))
	}
	return out, nil
}
