// Package invariants says whether the build checks the engine's internal
// invariants: assertions too costly for production that re-derive, as the
// engine runs, what it just built (a commit group's journal block against
// its segment bytes and its anchors' chains; the index's head rows against
// the heads readers see). Like Pebble's package of the same name, they are
// on with the invariants build tag and under the race detector, which
// `make test` runs over the engine, so every crash, error-injection and
// model test also checks them. A violated invariant panics: it is a bug,
// not a condition to handle.
package invariants
