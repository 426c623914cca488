// Package fleet holds what lets several replicas serve one set of sessions
// (DESIGN.md, "Fleet mode"): the lease rules by which a replica owns a
// session's live state, the replica directory, and the routing of every
// request for a session to the replica that owns it.
//
// Leases (lease.go). A replica's claim on a session's live state lasts
// until store.Record.LeaseUntil, and its registry (package session)
// renews it every renew interval. Replicas sharing one store read the
// record: a session whose owner's lease has not lapsed is served by that
// owner (the registry's lookup returns a *RemoteError, and the Router
// forwards the request); one whose lease has lapsed is taken over at
// generation+1. The generation is the fencing token: the store refuses
// every write of an older generation, so a paused or partitioned old
// owner (a zombie) cannot store anything after a takeover, whatever the
// clocks say. Clocks only decide when a takeover may happen, so replicas'
// clocks must agree to well within the lease (NTP). An owner checks its
// lease before it serves a request: one that has lapsed by its own clock
// is renewed first, and a renewal after a takeover is fenced, so the
// owner drops its generation instead of serving it.
//
// A lease that lapsed while the store did not answer says nothing of its
// owner: nobody could renew it. A replica folds the outcome of its calls
// to the store into a Contact (Leases.Heard: a call left unanswered, or
// more than a lease TTL between two answers of its renew loop, is a
// break), and Leases.Remote keeps a session with its owner until one
// lease TTL after the store answered this replica again, time for a live
// owner to renew (its renewal finds the record still its own, and takes
// the lease back at the same generation). An owner that died meanwhile is
// taken over then.
//
// Ownership. The rules are pure functions (Leases) that package session
// carries out: Leases.Remote decides whether a record may be claimed
// (from what the replica saw of its store: Leases.Heard,
// Contact.Answering), Leases.Grant gives the lease of a claim or
// renewal, Leases.MustRenew whether a generation is renewed before it
// serves, LostReason which renewal errors end a generation,
// Leases.Release the lease left behind at shutdown. Renew renews many leases in one round trip on a store that
// can (Renewer: store/redis).
//
// Routing (router.go, forward.go). Every request for a session is served
// by the replica that owns the session's live state, so that the
// session's engine runs, and its SSE streams are read, in one process,
// where the one-reader-per-stream rule holds as in a single process. A
// replica that receives a request for a session another replica owns
// finds the owner in the Directory (store/redis keeps it in Redis, each
// replica announcing itself) and forwards the HTTP request there,
// streaming the answer back. Forwarding costs less than a per-session
// inbox stream in Redis (store/redis/forward_bench_test.go measures both):
// one HTTP hop on a kept-alive connection against an inbox write, a
// blocking read on the owner and a wake-up of the receiving replica; and
// it carries the SSE response as it is. The transport (package transport)
// hands each request's session lookup to Router.Route and stays HTTP
// only.
//
// When the owner cannot be connected to (connection refused, dial
// timeout, no directory entry: it died), nothing is sent: the router
// looks the session up again every ownerPoll until the owner's lease
// lapses, then the lookup takes the session over (generation+1) and the
// request is served here. Nothing is acknowledged meanwhile. The wait is
// bounded by the lease expiry first seen plus ownerGrace, and by the
// request's context.
//
// A forwarded request waits for its answer to begin as long as the owner
// holds its lease, and no longer (Leases.Await): the router reads the
// owner's record again each time the lease it knows would lapse. An owner
// that is stopped (SIGSTOP, a paused VM) renews nothing, so its lease
// lapses at most one lease TTL after the stop; the request is then given
// up, and the lookup takes the session over at generation+1 and serves it
// here, within the lease TTL of the stop, not after a fixed timeout. An
// owner that keeps its lease and sends nothing for one lease TTL is alive
// but stuck, or cut off from here: an SSE answer begins at once (its
// priming event, or its headers), so the request is refused 503
// owner_unreachable with Retry-After. An answer that comes in one piece
// (application/json) comes at the end of the call, so it is waited for
// while the owner holds its lease, however long the call runs.
//
// Safety of giving a request up. The kernel of a stopped owner still
// accepts connections: the forwarded request may sit, whole, in the
// owner's socket buffer, and the owner reads it when it resumes, after
// the takeover. It does not run it, because an owner checks its lease
// before it dispatches anything: the registry's lookup, which every
// request runs before it is served, renews a lease that lapsed by the
// owner's own clock (Leases.MustRenew), and so does session.Live.Deliver
// before the engine gets a message. After a takeover that renewal is
// fenced (the store's generation moved on), so the owner drops its
// generation and the request, which carries ForwardedByHeader and now
// finds another owner, is refused 503 owner_moved. A request given up is
// never sent to the same owner again: should the owner hold the session
// again when the router looks it up (it renewed its lease meanwhile: it
// is alive and may have read the request), the request is refused 503
// owner_unreachable instead, and the client decides whether to send it
// again. What no lease can close is the moment between an owner's check
// and its dispatch: an owner stopped exactly there runs the call when it
// resumes; the fence still keeps everything it would store (its events,
// the session's state) out of the log.
package fleet
