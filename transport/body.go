// body.go holds the reading of a POST body within its limits: the size
// (Options.MaxBodyBytes, checked against Content-Length before anything
// reads the body, then while reading) and the time (Options.BodyTimeout).

package transport

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
)

// bodyTooLarge refuses a POST whose Content-Length exceeds MaxBodyBytes,
// from the headers alone: nothing that follows (the era check of a POST
// without a version header reads the body) waits for a body it would
// refuse anyway.
func (h *Handler) bodyTooLarge(r *http.Request) *refusal {
	if r.ContentLength <= h.opts.MaxBodyBytes {
		return nil
	}
	return refuse(replay.ReasonBodyTooLarge,
		fmt.Sprintf("request body of %d bytes (Content-Length) exceeds %d bytes", r.ContentLength, h.opts.MaxBodyBytes))
}

// readBody reads a POST body: 413 body_too_large beyond MaxBodyBytes, 408
// body_timeout when it does not arrive within BodyTimeout, 400 parse_error
// when it ends before its Content-Length.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *refusal) {
	size := int64(0)
	if r.ContentLength > 0 && r.ContentLength <= h.opts.MaxBodyBytes {
		size = r.ContentLength
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes), size)
	if err == nil {
		return body, nil
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, refuse(replay.ReasonBodyTooLarge, fmt.Sprintf("request body exceeds %d bytes", mbe.Limit))
	case isBodyTimeout(err):
		return nil, refuse(replay.ReasonBodyTimeout, fmt.Sprintf("the request body did not arrive within %v", h.opts.BodyTimeout))
	}
	return nil, refuse(replay.ReasonParseError, "reading the body failed: "+err.Error()+": send the whole body as its Content-Length says")
}

// readAll is io.ReadAll into a buffer sized for a body of size bytes (0:
// unknown), so that a body whose Content-Length is known is read into one
// allocation of its size: io.ReadAll starts at 512 bytes and grows by
// copying, which for a 4 MiB body allocates 9.5 MiB (size in bytes).
func readAll(r io.Reader, size int64) ([]byte, error) {
	b := make([]byte, 0, max(size+1, 512)) // +1: room to read the EOF without growing
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // let append choose the next size
		}
	}
}

// timedBody bounds the reading of a request body by a deadline on the
// connection, which starts at the first Read and is lifted once the body
// has been read to its end: the response that follows may be a stream that
// lasts as long as the call, and must not inherit it. A body that does not
// arrive in time fails the Read with an error matching
// os.ErrDeadlineExceeded (see isBodyTimeout). After any read error the
// response asks for the connection to be closed: net/http would otherwise
// wait, before sending the response, for the rest of a body that is not
// coming.
type timedBody struct {
	io.ReadCloser
	w       http.ResponseWriter
	rc      http.ResponseController
	timeout time.Duration
	started bool
	done    bool
}

// bodyWithTimeout replaces r.Body by a timedBody over it (see timedBody).
func bodyWithTimeout(w http.ResponseWriter, r *http.Request, timeout time.Duration) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	r.Body = &timedBody{ReadCloser: r.Body, w: w, rc: *http.NewResponseController(w), timeout: timeout}
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	if !b.started {
		b.started = true
		b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	}
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
		b.w.Header().Del("Connection") // see closeUntilBodyRead
	case err != nil:
		b.done = true
		b.w.Header().Set("Connection", "close")
	}
	return n, err
}

// isBodyTimeout reports whether err is a body read that timed out.
func isBodyTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// discardBody reads and drops a request body of at most MaxBodyBytes,
// within BodyTimeout, before a refusal that does not look at it (508
// loop_detected). The refusal then goes out on a connection whose request
// was read to its end: a server that closes a connection with request bytes
// still unread makes the kernel reset it, which can destroy the refusal on
// its way to a sender still writing the body (a gateway streaming it,
// whose proxy then reports "use of closed network connection" and passes
// on a 508 without its body). A larger body, or one that does not come in
// time, is left as it is (the connection closes).
func (h *Handler) discardBody(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || r.ContentLength > h.opts.MaxBodyBytes {
		return
	}
	bodyWithTimeout(w, r, h.opts.BodyTimeout)
	io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
}

// closeUntilBodyRead marks the response Connection: close when the request
// declares a body (Content-Length other than 0, or chunked); a timedBody
// read to its end lifts the mark. A refusal made before the body is read
// then closes the connection instead of keeping it: net/http keeps a
// connection only after discarding what is left of the body, and it waits
// for that body, with no deadline, before it sends the response (a POST
// with Content-Length 1000 and no body would otherwise never be answered).
func closeUntilBodyRead(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		w.Header()["Connection"] = connectionClose
	}
}

// connectionClose is the value of the header "Connection: close", shared
// by every response that sets it (net/http only reads header values).
var connectionClose = []string{"close"}

// InflightBytes returns what body counts against Options.MaxInflightBytes
// while its calls are answered (bytes): InflightCost per byte, and
// ValueCost per JSON value it holds, counted as the commas and the opening
// brackets and braces outside strings (jsonValues): what decoding it into
// Go values costs beyond its size.
func InflightBytes(body []byte) int64 {
	return InflightCost*int64(len(body)) + ValueCost*jsonValues(body)
}

// jsonValues returns the commas, '[' and '{' of the JSON text b outside
// its strings: one per value in an array or member in an object, and one
// per array or object. It reads b once, byte by byte; b need not be valid
// JSON (the decoder judges that).
func jsonValues(b []byte) int64 {
	n := int64(0)
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case ',', '[', '{':
			n++
		}
	}
	return n
}

// holdInflight counts a body against Options.MaxInflightBytes, at
// InflightBytes, for as long as a POST's calls are being answered, and
// returns the bytes it holds: give them back with releaseInflight. A body
// that counts more than the whole bound counts as the bound, so that alone
// it is served. Over the bound it holds nothing and refuses with 503
// inflight_bytes: a process must stay under its memory limit whatever the
// number of calls its clients keep open.
func (h *Handler) holdInflight(body []byte) (held int64, ref *refusal) {
	limit := h.opts.MaxInflightBytes
	if limit < 0 {
		return 0, nil
	}
	n := min(InflightBytes(body), limit)
	if total := h.inflight.Add(n); total > limit {
		h.inflight.Add(-n)
		return 0, refuse(replay.ReasonInflightBytes, fmt.Sprintf(
			"calls being answered hold %d bytes, and this body of %d bytes, which counts %d (%d times its size, it and its decoded copy, and %d bytes per JSON value it holds), would take them over the bound of %d: send it again once some are answered",
			total-n, len(body), n, InflightCost, ValueCost, limit))
	}
	return n, nil
}

// releaseInflight gives back the bytes a holdInflight held.
func (h *Handler) releaseInflight(held int64) { h.inflight.Add(-held) }
