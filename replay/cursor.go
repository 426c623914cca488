// cursor.go holds the cursor: the SSE event id that names one event of a
// session by generation, stream and sequence, and its text grammar.

package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Bounds of the numbers a cursor can carry. They keep the longest cursor at
// 79 bytes, inside the 80-byte budget of the cursor grammar.
const (
	// MaxGeneration is the largest generation a cursor can name (10 decimal digits).
	MaxGeneration = 1<<32 - 1
	// MaxStream is the largest stream number a cursor can name (19 decimal
	// digits): a stream's number is the sequence of its opening event.
	MaxStream = 1<<63 - 1
	// MaxSequence is the largest sequence a cursor can name (19 decimal digits).
	MaxSequence = 1<<63 - 1
	// MaxResume is the largest resume number a cursor can carry (19 decimal
	// digits).
	MaxResume = 1<<63 - 1
	// MaxCursorLen is the longest Last-Event-ID value, in bytes, that Parse
	// examines at all; longer values are malformed without further reading.
	MaxCursorLen = 80
	// TagLen is the length, in bytes, of a cursor's session tag.
	TagLen = 8
)

// StandaloneStream is the stream number of a session's standalone GET stream
// (MCP 2025-11-25, basic/transports, "Listening for Messages from the Server").
// A POST response stream is numbered by the sequence of its opening event.
const StandaloneStream uint64 = 0

// ErrMalformed is wrapped by every error Parse returns.
var ErrMalformed = errors.New("replay: malformed cursor")

// A Cursor names one event of one session: the SSE `id` Tidemark sends, and
// the `Last-Event-ID` a client echoes to resume (WHATWG HTML, server-sent
// events; MCP 2025-11-25 basic/transports, "Resumability and Redelivery").
//
// Its text form, produced by String and read by Parse, is
//
//	cursor     = tag "-" generation "-" stream "-" sequence [ "-" resume ]
//	tag        = 8 lowercase hexadecimal digits  ; Tag(session token)
//	generation = number                          ; 1 .. MaxGeneration
//	stream     = number                          ; 0 .. MaxStream, 0 = standalone GET stream,
//	                                             ; else the sequence of the stream's opening event
//	sequence   = number                          ; 1 .. MaxSequence
//	resume     = number                          ; 1 .. MaxResume
//	number     = "0" / %x31-39 *DIGIT            ; decimal, no sign, no leading zero
//
// for example `3f2a9c01-4-1180-1187`, or `3f2a9c01-4-1180-1187-3` with a
// resume part. Every byte is visible ASCII, so the value survives HTTP
// header handling unchanged, and it is at most 79 bytes long.
//
// The tag ties a cursor to the session that issued it, so a cursor shown to
// another session is recognised as malformed there instead of being compared
// with that session's numbers.
//
// An event's own id has no resume part. The resume part is carried by the
// priming event that opens a resumed stream: that event names the position
// the client resumed from (the cursor it sent, without a resume part) and
// adds a number no other priming event of the session generation carries.
// Its id is therefore new, as MCP 2025-11-25 requires of every event id in
// a session (basic/transports, "Resumability and Redelivery"), while a
// client that resumes with it continues from exactly the same position:
// the decision and the replay read only tag, generation, stream and
// sequence.
type Cursor struct {
	Tag        string // TagLen lowercase hex digits; see Tag
	Generation uint64 // generation the event was emitted in
	Stream     uint64 // stream the event belongs to
	Sequence   uint64 // session-wide event number within Generation
	// Resume is 0 in an event's own id; in the id of a resumed stream's
	// priming event it is a number (1 .. MaxResume) that makes the id
	// unique, and the position is that of the cursor without it.
	Resume uint64
}

// Tag returns the cursor tag of a session token: the first four bytes of the
// token's SHA-256 digest, as eight lowercase hexadecimal digits.
func Tag(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:TagLen/2])
}

// String formats c in the cursor grammar. It does not validate c; a Cursor
// that Parse returned always formats back to the text it was parsed from.
func (c Cursor) String() string {
	return string(c.AppendText(make([]byte, 0, MaxCursorLen)))
}

// AppendText appends the text form of c to b and returns the extended slice.
// It allocates nothing when b has room (79 bytes suffice).
func (c Cursor) AppendText(b []byte) []byte {
	b = append(b, c.Tag...)
	b = append(b, '-')
	b = strconv.AppendUint(b, c.Generation, 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, c.Stream, 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, c.Sequence, 10)
	if c.Resume != 0 {
		b = append(b, '-')
		b = strconv.AppendUint(b, c.Resume, 10)
	}
	return b
}

// Parse reads a cursor in the grammar documented on Cursor. It is strict: the
// value must match the grammar exactly, with no surrounding space, and every
// number must lie within its bound. The error wraps ErrMalformed and says
// which part is wrong; it quotes s only when s is at most MaxCursorLen bytes
// long.
func Parse(s string) (Cursor, error) {
	if len(s) > MaxCursorLen {
		return Cursor{}, fmt.Errorf("%w: %d bytes, longer than %d", ErrMalformed, len(s), MaxCursorLen)
	}
	tag, rest, ok1 := strings.Cut(s, "-")
	gen, rest, ok2 := strings.Cut(rest, "-")
	stream, rest, ok3 := strings.Cut(rest, "-")
	seq, resume, hasResume := strings.Cut(rest, "-")
	if !ok1 || !ok2 || !ok3 {
		return Cursor{}, fmt.Errorf("%w: %q: want tag-generation-stream-sequence", ErrMalformed, s)
	}
	if len(tag) != TagLen || !isLowerHex(tag) {
		return Cursor{}, fmt.Errorf("%w: %q: tag: want %d lowercase hex digits", ErrMalformed, s, TagLen)
	}
	c := Cursor{Tag: tag}
	var err error
	if c.Generation, err = number(gen, 1, MaxGeneration); err != nil {
		return Cursor{}, fmt.Errorf("%w: %q: generation %v", ErrMalformed, s, err)
	}
	if c.Stream, err = number(stream, 0, MaxStream); err != nil {
		return Cursor{}, fmt.Errorf("%w: %q: stream %v", ErrMalformed, s, err)
	}
	if c.Sequence, err = number(seq, 1, MaxSequence); err != nil {
		return Cursor{}, fmt.Errorf("%w: %q: sequence %v", ErrMalformed, s, err)
	}
	if hasResume {
		if c.Resume, err = number(resume, 1, MaxResume); err != nil {
			return Cursor{}, fmt.Errorf("%w: %q: resume %v", ErrMalformed, s, err)
		}
	}
	return c, nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if (b < '0' || b > '9') && (b < 'a' || b > 'f') {
			return false
		}
	}
	return true
}

// number parses a decimal number without sign or leading zero and checks
// min <= n <= max.
func number(s string, min, max uint64) (uint64, error) {
	if s == "" {
		return 0, errors.New("is empty")
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, errors.New("has a leading zero")
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d := s[i]
		if d < '0' || d > '9' {
			return 0, fmt.Errorf("has a non-digit byte 0x%02x", d)
		}
		if n > (max-uint64(d-'0'))/10 {
			return 0, fmt.Errorf("exceeds %d", max)
		}
		n = n*10 + uint64(d-'0')
	}
	if n < min {
		return 0, fmt.Errorf("is below %d", min)
	}
	return n, nil
}
