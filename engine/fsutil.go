package engine

import (
	"errors"
	"io"
	"io/fs"
	"os"
)

func errorsIsNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, os.ErrNotExist)
}

var errEOF = io.EOF
