// Package fuzz holds anchordb's fuzz targets (Fuzz* functions in _test.go
// files) and their committed seed corpora under testdata/fuzz/<FuzzName>/.
//
// The seeds run as ordinary unit tests with `go test ./fuzz`. To fuzz one
// target:
//
//	go test ./fuzz -run '^$' -fuzz '^FuzzScanner$' -fuzztime 60s
//
// and copy interesting new inputs from $(go env GOCACHE)/fuzz/… into
// testdata/fuzz/<FuzzName>/ (every crasher the fuzzer finds is written there
// already).
package fuzz
