package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/spf13/pflag"
)

var versionCmd = &command{
	name:    "version",
	summary: "print the module version of this build and the format versions it writes and reads",
	detail: `Prints the module path and version (from the build: a release tag, or a pseudo-version
or "(devel)" for a build from a checkout, with its VCS revision when the build recorded
one), the Go version, and for each on-disk format the version this build writes and the
versions it reads (docs/FORMAT.md §11). Needs no database. 'anchordb --version' is the same.
With --json: {"module","version","vcs_revision","vcs_time","vcs_modified","go",
"formats":[{"format","writes","reads":[…],"note"}]}.`,
	minArgs: 0, maxArgs: 0,
	setup: func(*pflag.FlagSet) runFunc {
		return func(e *env, _ []string) error {
			e.print.Version(buildVersion())
			return nil
		}
	},
}

// formatVersion is one on-disk format: the version this build writes and
// those it reads.
type formatVersion struct {
	Format string   `json:"format"`
	Writes string   `json:"writes"`
	Reads  []string `json:"reads"`
	Note   string   `json:"note,omitempty"`
}

// versionInfo is what a build is and the formats it writes and reads.
type versionInfo struct {
	Module      string          `json:"module"`
	Version     string          `json:"version"`
	VCSRevision string          `json:"vcs_revision,omitempty"`
	VCSTime     string          `json:"vcs_time,omitempty"`
	VCSModified bool            `json:"vcs_modified,omitempty"`
	Go          string          `json:"go"`
	Formats     []formatVersion `json:"formats"`
}

// buildVersion reads what the build recorded about itself.
func buildVersion() versionInfo {
	v := versionInfo{Module: "github.com/anchordb/anchordb", Version: "unknown", Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path != "" {
			v.Module = bi.Main.Path
		}
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.VCSRevision = s.Value
			case "vcs.time":
				v.VCSTime = s.Value
			case "vcs.modified":
				v.VCSModified = s.Value == "true"
			}
		}
	}
	n := func(v int) string { return fmt.Sprint(v) }
	seg := n(segment.FormatVersion)
	v.Formats = []formatVersion{
		{Format: "record", Writes: seg, Reads: []string{seg}, Note: "the canonical encoding records are hashed over"},
		{Format: "segment", Writes: seg, Reads: []string{seg}},
		{Format: "stub", Writes: seg, Reads: []string{seg}, Note: "what a truncating compaction leaves of a removed segment"},
		{Format: "snapshot", Writes: n(snapshot.FormatVersion), Reads: []string{n(snapshot.FormatVersion)}},
		{Format: "index", Writes: n(engine.IndexFormat), Reads: []string{n(engine.IndexFormat)}, Note: "an index of another version: rebuild-index"},
		{Format: "policy", Writes: snapshot.PolicyVersion, Reads: []string{snapshot.PolicyVersion}},
		{Format: "journal", Writes: "none", Reads: []string{"none"}, Note: "unversioned: close the database cleanly before an upgrade"},
		{Format: "audit log, checkpoint, proof", Writes: "none", Reads: []string{"none"}, Note: "unversioned: one canonical form each"},
	}
	return v
}
