package engine

import "github.com/anchordb/anchordb/engine/internal/schema"

// IndexFormat is the version of the index layout this build writes, and
// the only one it reads (docs/FORMAT.md §6.7, §11): an index of another
// version is refused, and rebuild-index makes a new one from the segments.
const IndexFormat = schema.Format
