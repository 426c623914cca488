package durable

// Groups returns the number of group commits (one fsync each) so far.
func (s *Store) Groups() int64 { return s.groups.Load() }
