package engine

import (
	"errors"
	"slices"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/internal/journal"
)

// foreignJournalEntries reports each entry of journal/ named as a journal
// file that is not a regular file (a FIFO, a directory, a socket, a
// dangling symbolic link), and a journal/ that is no directory, as INT_002
// at the entry — as a foreign entry of the anchors tree is reported.
//
// NB: such an entry is no file the journal wrote. Open refuses one past the
// settle point, which may hide acknowledged appends; one older than it is
// never read, and settles leave it in place (RemoveBefore removes only
// regular files), so without this finding nothing but a refused
// rebuild-index would ever show it. Nothing is opened: the open of a FIFO
// blocks.
func (v *verifier) foreignJournalEntries() {
	db := v.db
	dir := db.journalDir()
	gens, err := journal.List(db.fs, dir)
	if e := foreignOf(err); e != nil {
		v.report(Finding{Code: e.Code, File: e.File, Message: e.Message})
		return
	}
	if err != nil {
		v.fail(ioErr(err, "list "+dir))
		return
	}
	var relist []string // names, listed once, now found missing
	for _, g := range gens {
		if v.halted() {
			return
		}
		p := db.fs.PathJoin(dir, journal.FileName(g))
		_, err := fsutil.Regular(db.fs, p, true)
		var ee *fsutil.EntryError
		if errors.As(err, &ee) && ee.What == fsutil.Dangling {
			// A settle may have removed the file since it was listed:
			// only a name still listed is a link to nothing.
			relist = append(relist, journal.FileName(g))
			continue
		}
		if e := foreignOf(err); e != nil {
			v.report(journalFinding(e))
			continue
		}
		if err != nil {
			v.fail(ioErr(err, "stat "+p))
			return
		}
	}
	if len(relist) == 0 {
		return
	}
	names, err := fsutil.List(db.fs, dir)
	if err != nil {
		v.fail(ioErr(err, "list "+dir))
		return
	}
	for _, n := range relist {
		if slices.Contains(names, n) {
			e := foreignOf(&fsutil.EntryError{Path: db.fs.PathJoin(dir, n), What: fsutil.Dangling})
			v.report(journalFinding(e))
		}
	}
}

// journalFinding is the finding for a foreign entry of journal/.
func journalFinding(e *errs.Error) Finding {
	return Finding{Code: e.Code, File: e.File, Message: e.Message +
		": named as a journal file but no file the journal wrote; settles leave it in place and rebuild-index refuses while it is there: remove it"}
}
