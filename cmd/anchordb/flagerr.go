package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/pflag"
)

// flagText is the message of a flag that did not parse, in words a user
// reads: pflag's own says `invalid argument "abc" for "--from" flag:
// strconv.ParseUint: parsing "abc": invalid syntax`, the text of the Go
// function it called.
func flagText(err error) string {
	var iv *pflag.InvalidValueError
	if !errors.As(err, &iv) {
		return err.Error()
	}
	f := iv.GetFlag()
	want, limit := "a valid value", ""
	switch f.Value.Type() {
	case "uint64":
		want, limit = "a whole number of 0 or more", strconv.FormatUint(1<<64-1, 10)
	case "int":
		want, limit = "a whole number", strconv.FormatInt(int64(^uint(0)>>1), 10)
	case "int64":
		want, limit = "a whole number", strconv.FormatInt(1<<63-1, 10)
	case "bool":
		want = "true or false"
	}
	var ne *strconv.NumError
	if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) && limit != "" {
		return fmt.Sprintf("--%s %q is out of range: it must be %s up to %s", f.Name, iv.GetValue(), want, limit)
	}
	return fmt.Sprintf("--%s %q is not %s", f.Name, iv.GetValue(), want)
}
