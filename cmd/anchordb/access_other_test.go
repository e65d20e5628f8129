//go:build !unix

package main

import "os"

const writerHelperEnv = "ANCHORDB_WRITER_HELPER"

// writerHelper is a child of the unix-only test beside a writer process.
func writerHelper(string) { os.Exit(2) }
