package main

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// connect runs a fresh server and returns a client session connected to it
// over in-memory transports.
func connect(t *testing.T, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)

	server, run := newServer(nil, nil)
	go run(ctx)
	serverT, clientT := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, serverT, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	t.Cleanup(func() { _ = ss.Close() })

	client := mcp.NewClient(&mcp.Implementation{Name: "everything-test", Version: "0.0.1"}, opts)
	cs, err := client.Connect(ctx, clientT, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// onlyText returns the text of a result that must consist of one text block.
func onlyText(t *testing.T, content []mcp.Content) string {
	t.Helper()
	if len(content) != 1 {
		t.Fatalf("got %d content blocks, want 1", len(content))
	}
	tc, ok := content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want *mcp.TextContent", content[0])
	}
	return tc.Text
}

func TestListTools(t *testing.T) {
	cs := connect(t, nil)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tool := range res.Tools {
		got = append(got, tool.Name)
	}
	want := []string{
		"confirm",
		"confirm_delete",
		"failing_job",
		"greet",
		"json_schema_2020_12_tool",
		"multi_input",
		"protocol_error_job",
		"slow_compute",
		"test_audio_content",
		"test_elicitation",
		"test_elicitation_sep1034_defaults",
		"test_elicitation_sep1330_enums",
		"test_embedded_resource",
		"test_error_handling",
		"test_image_content",
		"test_input_required_result_capabilities",
		"test_input_required_result_elicitation",
		"test_input_required_result_list_roots",
		"test_input_required_result_multi_round",
		"test_input_required_result_multiple_inputs",
		"test_input_required_result_request_state",
		"test_input_required_result_sampling",
		"test_input_required_result_tampered_state",
		"test_logging_tool",
		"test_missing_capability",
		"test_multiple_content_types",
		"test_param_header",
		"test_reconnection",
		"test_sampling",
		"test_simple_text",
		"test_streaming_elicitation",
		"test_tool_with_logging",
		"test_tool_with_progress",
		"test_tool_with_task",
		"test_trigger_prompt_change",
		"test_trigger_tool_change",
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("tools/list names:\ngot  %q\nwant %q", got, want)
	}
}

func TestSimpleText(t *testing.T) {
	cs := connect(t, nil)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "test_simple_text"})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatal("IsError = true, want false")
	}
	if got, want := onlyText(t, res.Content), "This is a simple text response for testing."; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
}

func TestErrorToolReportsInResult(t *testing.T) {
	cs := connect(t, nil)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "test_error_handling"})
	if err != nil {
		t.Fatalf("want an isError result, got protocol error %v", err)
	}
	if !res.IsError {
		t.Error("IsError = false, want true")
	}
	if got, want := onlyText(t, res.Content), "This tool intentionally returns an error for testing"; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
}

func TestPromptWithArguments(t *testing.T) {
	cs := connect(t, nil)
	res, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{
		Name:      "test_prompt_with_arguments",
		Arguments: map[string]string{"arg1": "hello", "arg2": "world"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Messages) != 1 {
		t.Fatalf("got %d messages, want 1", len(res.Messages))
	}
	msg := res.Messages[0]
	if msg.Role != "user" {
		t.Errorf("role = %q, want user", msg.Role)
	}
	if got, want := onlyText(t, []mcp.Content{msg.Content}), "Prompt with arguments: arg1='hello', arg2='world'"; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
}

func TestReadResources(t *testing.T) {
	cs := connect(t, nil)
	for _, tc := range []struct {
		uri, mimeType, text string
	}{
		{"test://static-text", "text/plain", "This is the content of the static text resource."},
		{"test://template/123/data", "application/json", `{"id":"123","templateTest":true,"data":"Data for ID: 123"}`},
	} {
		res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: tc.uri})
		if err != nil {
			t.Errorf("read %s: %v", tc.uri, err)
			continue
		}
		if len(res.Contents) != 1 {
			t.Errorf("read %s: got %d contents, want 1", tc.uri, len(res.Contents))
			continue
		}
		c := res.Contents[0]
		if c.URI != tc.uri || c.MIMEType != tc.mimeType || c.Text != tc.text {
			t.Errorf("read %s: got {%q %q %q}, want {%q %q %q}", tc.uri, c.URI, c.MIMEType, c.Text, tc.uri, tc.mimeType, tc.text)
		}
	}
}

func TestReadUnknownResource(t *testing.T) {
	cs := connect(t, nil)
	_, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "test://no-such-resource"})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("error = %v, want JSON-RPC error %d", err, jsonrpc.CodeInvalidParams)
	}
}

func TestCompletion(t *testing.T) {
	cs := connect(t, nil)
	res, err := cs.Complete(t.Context(), &mcp.CompleteParams{
		Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "test_prompt_with_arguments"},
		Argument: mcp.CompleteParamsArgument{Name: "arg1", Value: "pa"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"paris", "park", "party"}; !slices.Equal(res.Completion.Values, want) {
		t.Errorf("values = %q, want %q", res.Completion.Values, want)
	}
}

// TestInputRequiredElicitation checks the multi round-trip flow end to end:
// the client's middleware answers the input request with its elicitation
// handler and retries, so the caller only sees the final greeting.
func TestInputRequiredElicitation(t *testing.T) {
	asked := ""
	cs := connect(t, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = req.Params.Message
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Alice"}}, nil
		},
	})
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "test_input_required_result_elicitation"})
	if err != nil {
		t.Fatal(err)
	}
	if asked != "What is your name?" {
		t.Errorf("elicitation message = %q, want %q", asked, "What is your name?")
	}
	if got, want := onlyText(t, res.Content), "Hello, Alice!"; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
}

// TestTamperedStateRejected drives the rounds by hand and checks that a
// modified requestState is refused with invalid params.
func TestTamperedStateRejected(t *testing.T) {
	cs := connect(t, &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}})
	const name = "test_input_required_result_tampered_state"
	first, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if first.RequestState == "" || first.InputRequests["confirm"] == nil {
		t.Fatalf("first round: got state %q and requests %v, want a state and a \"confirm\" request", first.RequestState, first.InputRequests)
	}
	answers := mcp.InputResponseMap{"confirm": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}}

	_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, InputResponses: answers, RequestState: first.RequestState + "x"})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams || requeststate.ReasonOf(err) != replay.ReasonStateInvalid {
		t.Errorf("tampered state: error = %v, want JSON-RPC error %d with reason state_invalid", err, jsonrpc.CodeInvalidParams)
	}
	// A genuine state of another tool is bound to that tool's call.
	other, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "test_input_required_result_request_state"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, InputResponses: answers, RequestState: other.RequestState})
	if requeststate.ReasonOf(err) != replay.ReasonStateRequestMismatch {
		t.Errorf("another tool's state: error = %v, want reason state_request_mismatch", err)
	}

	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, InputResponses: answers, RequestState: first.RequestState})
	if err != nil {
		t.Fatalf("genuine state: %v", err)
	}
	if got, want := onlyText(t, res.Content), "requestState verified"; got != want {
		t.Errorf("genuine state: text = %q, want %q", got, want)
	}
}
