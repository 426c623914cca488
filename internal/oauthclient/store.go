package oauthclient

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/oauth2"
)

// Modes of the token store: the tokens are credentials, readable by their
// owner only.
const (
	dirMode  fs.FileMode = 0o700
	fileMode fs.FileMode = 0o600
)

// DefaultTokenDir returns where tokens are kept when Config.TokenDir is
// empty: os.UserConfigDir()/tidemark/tokens ($XDG_CONFIG_HOME or
// ~/.config on Linux, ~/Library/Application Support on macOS, %AppData%
// on Windows).
func DefaultTokenDir() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no directory for OAuth tokens: %w", err)
	}
	return filepath.Join(dir, "tidemark", "tokens"), nil
}

// Record is the content of one token file: what refreshes the token of one
// MCP server in a later run without a new authorization.
type Record struct {
	// Server is the MCP endpoint the token is for (the URL tidemark
	// connect was given); the file's name derives from it.
	Server string `json:"server"`
	// Resource is the resource indicator the token was requested for (RFC
	// 8707): the protected resource metadata's resource (RFC 9728).
	Resource string `json:"resource,omitempty"`
	// ClientID and ClientSecret are the OAuth client the token was issued
	// to (pre-registered, a client ID metadata document URL, or dynamically
	// registered).
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret,omitempty"`
	// TokenURL is the authorization server's token endpoint and AuthStyle
	// how the client authenticates to it (oauth2.AuthStyle).
	TokenURL  string           `json:"token_url"`
	AuthStyle oauth2.AuthStyle `json:"auth_style,omitempty"`
	// Scopes are the scopes requested with the token.
	Scopes []string `json:"scopes,omitempty"`
	// Token is the access token, its expiry and its refresh token.
	Token *oauth2.Token `json:"token"`
}

// fileName returns the token file's name for the MCP endpoint server: its
// host and port, readable, then 16 hex digits of the SHA-256 of the whole
// URL, so that two endpoints of one host keep two files.
func fileName(server string) string {
	host := "server"
	if u, err := url.Parse(server); err == nil && u.Host != "" {
		host = strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-':
				return r
			}
			return '_'
		}, u.Host)
	}
	sum := sha256.Sum256([]byte(server))
	return host + "-" + hex.EncodeToString(sum[:8]) + ".json"
}

// store keeps one Record per MCP endpoint in dir ("": none kept).
type store struct {
	dir string
}

// path returns the file of server's record.
func (s store) path(server string) string { return filepath.Join(s.dir, fileName(server)) }

// load returns server's record; nil, nil when there is none.
func (s store) load(server string) (*Record, error) {
	if s.dir == "" {
		return nil, nil
	}
	b, err := os.ReadFile(s.path(server))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("token file %s: %w: delete it to authorize again", s.path(server), err)
	}
	if r.Server != server || r.Token == nil || r.ClientID == "" {
		return nil, nil
	}
	return &r, nil
}

// save writes r whole: to a new file of mode 0600 in a directory of mode
// 0700, renamed over the old one, so that a reader never sees half of it.
func (s store) save(r *Record) error {
	if s.dir == "" {
		return errors.New("no directory for tokens")
	}
	if err := os.MkdirAll(s.dir, dirMode); err != nil {
		return err
	}
	if err := os.Chmod(s.dir, dirMode); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(s.dir, ".token-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	if err := f.Chmod(fileMode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), s.path(r.Server))
}

// removeClient removes server's record when it holds a token of the
// client clientID, which the authorization server refused; a record of
// another client (written by another run since) stays.
func (s store) removeClient(server, clientID string) error {
	r, err := s.load(server)
	if err != nil || r == nil || r.ClientID != clientID {
		return err
	}
	if err := os.Remove(s.path(server)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
