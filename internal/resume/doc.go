// Package resume resumes a cut SSE stream of an MCP Streamable HTTP server
// with GET and Last-Event-ID (MCP 2025-11-25, basic/transports,
// "Resumability and Redelivery"), toward any server, Tidemark or not. It
// holds the rules every user shares, and no user's policy:
//
//   - the GET: Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID and
//     Accept text/event-stream, after the caller's own headers (Request);
//   - what each answer means (Classify, Kind): Resumed, SessionLost (404),
//     GenerationLost (409, with error.data.lostRequests when the server
//     lists the lost calls), RetryLater (no answer, 408, 429, 5xx, with
//     Retry-After), Refused (anything else: the same GET would get the
//     same answer);
//   - how long to wait between GETs (Delay): exponential backoff with
//     jitter, never sooner than the server's SSE retry field (WHATWG HTML,
//     "Server-sent events") nor than a Retry-After (RFC 9110, section
//     10.2.3);
//   - when to give up (Next): at once on an answer that ends the resume, at
//     Policy.Timeout after the break otherwise.
//
// Classify, Delay and Next are pure (testdata/decide tables them); Get
// sends one GET, and Stream repeats it as Next decides. What to do with
// the result (which calls fail, what the user's own caller is told, when
// to initialize again) is the user's: the client transport (package
// client), the upstream gateway engine (engine/upstream) and the probe,
// which calls Get alone because it judges each answer as it comes.
//
// A user that resumes toward any server, and must learn of a lost session
// or generation promptly, reads the stream and, when it breaks, resumes
// it:
//
//	st := &resume.Stream{HTTP: hc, Policy: resume.Policy{Timeout: 30 * time.Second, RetryBareConflict: true}}
//	// for each event read: st.Retry = ev.Retry when set; st.Progressed() when its ID is new
//	res, err := st.Resume(ctx, resume.Request{URL: endpoint, Session: sid, Version: version, LastEventID: lastID}, readErr)
//	switch {
//	case err != nil:
//		// ctx ended
//	case res.Kind == resume.Resumed:
//		// read res.Response.Body from the cursor on
//	case res.Kind == resume.SessionLost:
//		// initialize again; every call of the session is lost
//	case res.Kind == resume.GenerationLost:
//		// initialize again; fail res.LostRequests at once (every call of
//		// the stream when !res.LostKnown)
//	default:
//		// Refused, or RetryLater with res.Expired: fail the stream's call
//		// with res.Outcome
//	}
package resume
