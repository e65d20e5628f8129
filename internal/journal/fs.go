package journal

import (
	"errors"
	"io/fs"
	"os"
)

var vfsNotExist = fs.ErrNotExist

func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || os.IsNotExist(err)
}
