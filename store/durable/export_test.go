package durable

import "github.com/cockroachdb/pebble/v2"

// Groups returns the number of group commits (one fsync each) so far.
func (s *Store) Groups() int64 { return s.groups.Load() }

// SetMetaBytes writes n as the byte count of token's log meta in the
// closed store at dir, through Pebble directly, as a damaged count.
func SetMetaBytes(dir, token string, n int64) error {
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		return err
	}
	v, closer, err := db.Get(tokenKey(kindMeta, token))
	if err != nil {
		db.Close()
		return err
	}
	m, err := decodeMeta(v)
	closer.Close()
	if err != nil {
		db.Close()
		return err
	}
	m.bytes = n
	if err := db.Set(tokenKey(kindMeta, token), encodeMeta(m), pebble.Sync); err != nil {
		db.Close()
		return err
	}
	return db.Close()
}
