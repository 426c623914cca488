package oauthclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// callbackPath is the path of the redirect URI on the loopback listener
// (RFC 8252, section 7.3: a loopback IP literal, not "localhost").
const callbackPath = "/callback"

// probeTimeout bounds probe's request to the authorization URL; an
// authorization server slower than that is left to the person.
const probeTimeout = 10 * time.Second

// answerLimit bounds the body of the last response read in BrowserFetch,
// in bytes.
const answerLimit = 4 << 10

// callback is the loopback listener the authorization server redirects
// the user's browser to with the code (RFC 6749, section 4.1.2).
type callback struct {
	ln  net.Listener
	srv *http.Server

	mu      sync.Mutex
	waiting chan<- callbackResult // the authorization awaiting its code; nil: none
}

// callbackResult is what the redirect to the callback carried: the code,
// state and iss (RFC 9207), or the error of RFC 6749, section 4.1.2.1.
type callbackResult struct {
	code, state, iss string
	err              error
}

// listenCallback starts the callback on 127.0.0.1:port (0: a free port).
func listenCallback(port int) (*callback, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("the OAuth callback cannot listen on 127.0.0.1:%d: %w (choose another --oauth-callback-port)", port, err)
	}
	cb := &callback{ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+callbackPath, cb.serve)
	cb.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go cb.srv.Serve(ln)
	return cb, nil
}

// redirectURL returns the redirect URI, http://127.0.0.1:PORT/callback.
func (cb *callback) redirectURL() string {
	return "http://" + cb.ln.Addr().String() + callbackPath
}

func (cb *callback) close() error { return cb.srv.Close() }

// serve receives the redirect: the result goes to the authorization that
// waits for one; the browser gets a line saying what happened.
func (cb *callback) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	res := callbackResult{code: q.Get("code"), state: q.Get("state"), iss: q.Get("iss")}
	switch {
	case q.Get("error") == "invalid_client":
		res.err = fmt.Errorf("%w: %s", errClientRefused, q.Get("error_description"))
	case q.Get("error") != "":
		res.err = fmt.Errorf("the authorization server refused: %s %s", q.Get("error"), q.Get("error_description"))
	case res.code == "":
		http.Error(w, "tidemark connect: no code in this redirect", http.StatusBadRequest)
		return
	}
	cb.mu.Lock()
	ch := cb.waiting
	cb.waiting = nil
	cb.mu.Unlock()
	if ch == nil {
		http.Error(w, "tidemark connect: no authorization is waiting for this redirect", http.StatusConflict)
		return
	}
	ch <- res
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if res.err != nil {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "tidemark connect: %v\n", res.err)
		return
	}
	io.WriteString(w, "tidemark connect is authorized; you may close this window.\n")
}

// wait makes the next redirect go to the returned channel.
func (cb *callback) wait() <-chan callbackResult {
	ch := make(chan callbackResult, 1)
	cb.mu.Lock()
	cb.waiting = ch
	cb.mu.Unlock()
	return ch
}

// fetchCode is the handler's AuthorizationCodeFetcher: it refuses an
// authorization server without PKCE S256, brings the user (or, in
// BrowserFetch, an HTTP client) to the authorization URL, and returns
// what the redirect to the callback carried.
func (t *Transport) fetchCode(ctx context.Context, cb *callback, a *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
	if err := t.obs.checkPKCE(a.URL); err != nil {
		return nil, err
	}
	if t.cfg.Browser != BrowserFetch && t.registered != nil {
		// Called within the authorization, under authMu.
		if err := t.probe(ctx, a.URL); err != nil {
			return nil, err
		}
	}
	got := cb.wait()
	fetched := make(chan error, 1)
	switch t.cfg.Browser {
	case BrowserFetch:
		go func() { fetched <- t.fetch(ctx, a.URL) }()
	case BrowserOpen:
		if err := openBrowser(a.URL); err != nil {
			t.logger.Warn("oauth: the browser could not be opened; open the URL printed above", "error", err)
		}
		fallthrough
	default:
		fmt.Fprintf(t.cfg.Prompt, "tidemark connect: to authorize access to %s, open this URL in a browser:\n%s\n", t.cfg.Server, a.URL)
	}
	for {
		select {
		case res := <-got:
			if res.err != nil {
				return nil, res.err
			}
			return &auth.AuthorizationResult{Code: res.code, State: res.state, Iss: res.iss}, nil
		case err := <-fetched:
			// The callback answers only after it handed the result over,
			// so a fetch that ended without one never reached it.
			select {
			case res := <-got:
				if res.err != nil {
					return nil, res.err
				}
				return &auth.AuthorizationResult{Code: res.code, State: res.state, Iss: res.iss}, nil
			default:
			}
			if err == nil {
				err = errors.New("the redirects did not reach the callback")
			}
			return nil, fmt.Errorf("fetching the authorization URL: %w", err)
		case <-ctx.Done():
			return nil, fmt.Errorf("no redirect to %s within %v: %w", cb.redirectURL(), AuthorizeTimeout, ctx.Err())
		}
	}
}

// fetch GETs the authorization URL as a browser would, following
// redirects (with cookies) until the callback answers; an error says
// where the redirects ended instead.
func (t *Transport) fetch(ctx context.Context, authURL string) error {
	jar, _ := cookiejar.New(nil) // New never fails without options
	hc := &http.Client{Transport: t.base, Jar: jar}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, answerLimit))
	if resp.Request.URL.Path == callbackPath && loopback(resp.Request.URL.Hostname()) {
		return nil
	}
	err = fmt.Errorf("the redirects ended at %s with HTTP %d: %q", resp.Request.URL.Redacted(), resp.StatusCode, body)
	if resp.StatusCode >= 400 && errorCode(body) == "invalid_client" {
		return fmt.Errorf("%w: %w", errClientRefused, err)
	}
	return err
}

// probe GETs the authorization URL without following its redirects, to
// learn whether the authorization server still knows the client kept
// from an earlier authorization before a person is sent there: a
// refusal of the client_id shows in the person's browser only (RFC 6749,
// section 4.1.2.1), where the bridge would wait for a redirect that never
// comes. An error answer whose JSON body says invalid_client is
// errClientRefused; anything else (a redirect to a login page, a page,
// no answer) is left to the person.
func (t *Transport) probe(ctx context.Context, authURL string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	hc := &http.Client{Transport: t.base, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return nil
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, answerLimit))
	if resp.StatusCode >= 400 && errorCode(body) == "invalid_client" {
		return fmt.Errorf("%w: the authorization endpoint answered HTTP %d: %q", errClientRefused, resp.StatusCode, body)
	}
	return nil
}

// errorCode returns the error of an OAuth error answer's JSON body (RFC
// 6749, section 5.2), or "".
func errorCode(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Error
}

// openBrowser asks the system to open u in the user's browser.
func openBrowser(u string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", u)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", u)
	default:
		cmd = exec.Command("xdg-open", u)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait() // reap it; its exit says nothing about the user
	return nil
}

// loopback reports whether host (no port) is a loopback address.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
