// Package session keeps Tidemark's sessions: it creates them, looks them up,
// evicts them (idle TTL, capacity by least recent use, DELETE), keeps
// tombstones so a dead token answers 404, supersedes them, and re-creates
// their live state at generation+1 under the same token (DESIGN.md,
// "Generations").
//
// A Registry holds the sessions whose live state this process owns (Live);
// the records and event logs are in a store.Store, so a store that outlives
// the process lets a later process re-create them. Registries of a fleet
// share one store and hold their sessions under leases (Options.Lease):
// a session another registry holds is reported as remote
// (fleet.ErrRemote) until that lease lapses. Package fleet holds the lease
// rules this package carries out (claiming, renewing, dropping a
// generation: ownership.go) and the routing of a request to the replica
// that owns its session.
package session
