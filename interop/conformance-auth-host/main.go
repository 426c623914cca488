// Command conformance-auth-host is the MCP host that the official
// conformance suite (@modelcontextprotocol/conformance) drives in client
// mode for its authorization scenarios (--suite auth): it runs
// `tidemark connect --oauth-browser fetch URL` as a desktop host runs a
// stdio server, and speaks MCP to it over stdin and stdout with the
// go-sdk's client, so that the bridge is the OAuth client under test:
//
//	conformance client --suite auth --command "conformance-auth-host -tidemark /path/to/tidemark"
//
// The suite starts an authorization server and an MCP server per
// scenario, then runs the command with the MCP endpoint as the last
// argument, the scenario's name in $MCP_CONFORMANCE_SCENARIO and, for
// some scenarios, a JSON object in $MCP_CONFORMANCE_CONTEXT: a
// pre-registered client's client_id and client_secret, which become
// --oauth-client-id and --oauth-client-secret (passed through the
// environment, as a host passes secrets). Every run also gives the bridge
// --oauth-client-metadata-url with the suite's client ID metadata document
// URL, used where the authorization server supports such documents.
//
// The host initializes, lists the tools and calls each of them with no
// arguments, then closes the bridge's stdin. Exit code 0 when every step
// succeeded, 1 otherwise (the error on stderr, with the bridge's log).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// timeout bounds one scenario; the suite itself allows 30 seconds.
const timeout = 25 * time.Second

// clientMetadataURL is the client ID metadata document URL the suite's
// authorization servers expect (the scenario auth/basic-cimd checks it).
const clientMetadataURL = "https://conformance-test.local/client-metadata.json"

func main() {
	bin := flag.String("tidemark", "tidemark", "the tidemark binary (path)")
	flag.Parse()
	if flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: conformance-auth-host [-tidemark PATH] URL (scenario in $MCP_CONFORMANCE_SCENARIO)")
		os.Exit(2)
	}
	url := flag.Arg(flag.NArg() - 1)
	if err := run(*bin, url); err != nil {
		fmt.Fprintf(os.Stderr, "conformance-auth-host: %s: %v\n", os.Getenv("MCP_CONFORMANCE_SCENARIO"), err)
		os.Exit(1)
	}
}

func run(bin, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var pre struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	if c := os.Getenv("MCP_CONFORMANCE_CONTEXT"); c != "" {
		if err := json.Unmarshal([]byte(c), &pre); err != nil {
			return fmt.Errorf("MCP_CONFORMANCE_CONTEXT: %w", err)
		}
	}
	args := []string{"connect", "--oauth-browser", "fetch", "--log-level", "DEBUG", "--oauth-client-metadata-url", clientMetadataURL}
	env := os.Environ()
	if pre.ClientID != "" {
		args = append(args, "--oauth-client-id", "${CONFORMANCE_CLIENT_ID}", "--oauth-client-secret", "${CONFORMANCE_CLIENT_SECRET}")
		env = append(env, "CONFORMANCE_CLIENT_ID="+pre.ClientID, "CONFORMANCE_CLIENT_SECRET="+pre.ClientSecret)
	}
	cmd := exec.Command(bin, append(args, url)...)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "tidemark-conformance-auth-host", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}
	for _, tool := range tools.Tools {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool.Name, Arguments: map[string]any{}})
		if err != nil {
			return fmt.Errorf("tools/call %s: %w", tool.Name, err)
		}
		if res.IsError {
			return fmt.Errorf("tools/call %s: the tool failed: %v", tool.Name, res.Content)
		}
	}
	return cs.Close()
}
