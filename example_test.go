package tidemark_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/bearer"
)

// Example_auth serves an MCP server as an OAuth 2.1 resource server:
// tokens are JWTs of the issuer (or introspected, with
// bearer.Config.IntrospectionURL), issued for the endpoint's URL, and a
// call of the tool "deploy" needs the scope deploy:write. A request
// without a token gets 401 with the challenge that leads a client to the
// protected resource metadata, which lists no scopes: a client asks for
// deploy:write only when a call of deploy is refused for want of it.
func Example_auth() {
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resource := srv.URL + "/mcp" // the URL clients reach the endpoint at

	issuer := "https://auth.example.com/realms/mcp"
	v, err := bearer.New(bearer.Config{Issuer: issuer, Audience: resource})
	if err != nil {
		log.Fatal(err)
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "example", Version: "1.0.0"}, nil)
	h := tidemark.NewHandler(server, &tidemark.Options{Auth: &tidemark.Auth{
		Verify:     v.Verify,
		Metadata:   bearer.ResourceMetadata(resource, issuer, nil),
		ToolScopes: map[string]string{"deploy": "deploy:write"},
	}})
	defer h.Close()
	mux.Handle("/mcp", h)
	mux.Handle(bearer.WellKnownPath+"/mcp", h.ResourceMetadata())
	mux.Handle(bearer.WellKnownPath, h.ResourceMetadata())

	resp, err := http.Post(resource, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	fmt.Println(strings.ReplaceAll(resp.Header.Get("WWW-Authenticate"), srv.URL, "http://HOST"))

	md, err := http.Get(srv.URL + bearer.WellKnownPath + "/mcp")
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(md.Body)
	md.Body.Close()
	fmt.Print(md.StatusCode, " ", strings.ReplaceAll(string(body), srv.URL, "http://HOST"))
	// Output:
	// 401
	// Bearer resource_metadata="http://HOST/.well-known/oauth-protected-resource/mcp"
	// 200 {"resource":"http://HOST/mcp","authorization_servers":["https://auth.example.com/realms/mcp"],"bearer_methods_supported":["header"]}
}
