// Package replay holds Tidemark's one rule: replay validity is a function of
// (session, generation, cursor range), never of the cursor range alone
// (DESIGN.md, "Where the rule comes from"), applied as a table
// (DESIGN.md, "The replay decision").
//
// It has three parts, all pure (no I/O, no clock, no project imports):
//   - the Cursor, the SSE event id that encodes generation, stream and
//     sequence, with its strict text grammar (cursor.go);
//   - Decide, which maps a resumption request to an Outcome with its HTTP
//     status and stable reason (decide.go);
//   - the catalogue of reasons, the one definition of every `reason` word
//     that error bodies, logs and metric labels carry (reason.go). It lives
//     here because every layer already imports this package.
//
// The decision table is tested by testdata/decide, the grammar by
// testdata/parse; read those files for the cases.
package replay
