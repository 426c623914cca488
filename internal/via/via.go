// Package via names this process in the Via header of the requests it
// sends on (RFC 9110, section 7.6.3), and finds that name in the requests it
// receives: a request whose Via already names this process has come back
// to it through a loop, and is refused with 508 Loop Detected (RFC 5842,
// section 7.2) instead of being sent on again without limit.
//
// The name is a pseudonym (RFC 9110 allows one in place of a host), random
// for each process, so that it discloses nothing of the host and two
// processes never share it. The gateway engine (engine/upstream) adds it to
// every upstream request; the transport refuses a request that carries it.
package via

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
)

// Header is the name of the Via header field (RFC 9110, section 7.6.3).
const Header = "Via"

// protocol is the received-protocol of this process's Via entry: Tidemark
// serves HTTP/1.1 (RFC 9110, section 7.6.3: the protocol name "HTTP" is
// omitted).
const protocol = "1.1"

// pseudonym is this process's name in Via: "tidemark-" and 16 hex digits
// (64 random bits).
var pseudonym = newPseudonym()

func newPseudonym() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return "tidemark-" + hex.EncodeToString(b[:])
}

// Pseudonym returns this process's name in Via headers, e.g.
// "tidemark-3f9a2c1b7d0e4a65": the same for the life of the process.
func Pseudonym() string { return pseudonym }

// Append sets dst's Via to every Via value of in (the request this one is
// sent on behalf of; nil: none), in order, followed by this process's
// entry "1.1 PSEUDONYM" (RFC 9110, section 7.6.3: each recipient appends
// its own entry to the list).
func Append(dst, in http.Header) {
	vs := append([]string(nil), in.Values(Header)...)
	dst[Header] = append(vs, protocol+" "+pseudonym)
}

// Loops reports whether h's Via names this process: the request passed
// through this process before, so sending it on would repeat the loop.
// Each comma-separated entry of every Via value is read as
// received-protocol, white space, received-by; a comment after it is
// ignored.
func Loops(h http.Header) bool {
	for _, v := range h.Values(Header) {
		for _, entry := range strings.Split(v, ",") {
			fields := strings.Fields(entry)
			if len(fields) >= 2 && fields[1] == pseudonym {
				return true
			}
		}
	}
	return false
}
