//go:build !unix

package engine

// descriptorLimit is unknown here: the fixed defaults apply.
func descriptorLimit() uint64 { return 0 }
