package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/spf13/pflag"
)

var keygenCmd = &command{
	name:    "keygen",
	summary: "make an ed25519 key pair for signing checkpoints: PREFIX.key (secret) and PREFIX.pub",
	detail: `Writes PREFIX.key, the note signer key (mode 0600; keep it secret), and PREFIX.pub, the
note verifier key, and prints the verifier key. Anyone with PREFIX.pub can check a
checkpoint with golang.org/x/mod/sumdb/note, without anchordb. An existing key file is
never overwritten unless --force is given. Needs no database.

With --json prints {"name","verifier_key","key_file","pub_file"}.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet) runFunc {
		var name, prefix string
		var force bool
		fs.StringVar(&name, "name", "anchordb", "key name, shown in the signature line (no spaces, control characters or '+')")
		fs.StringVar(&prefix, "out", "anchordb", "file prefix, not a directory: writes PREFIX.key and PREFIX.pub")
		fs.BoolVar(&force, "force", false, "overwrite existing key files")
		return func(e *env, _ []string) error {
			if prefix == "" {
				return usagef("keygen", "--out must not be empty")
			}
			if err := checkKeyPrefix(prefix); err != nil {
				return err
			}
			skey, vkey, err := proof.GenerateKeys(name)
			if err != nil {
				return err
			}
			keyFile, pubFile := prefix+".key", prefix+".pub"
			if !force {
				for _, p := range []string{keyFile, pubFile} {
					if _, err := os.Lstat(p); err == nil {
						return errs.New(errs.CodeInvalidInput, "%s exists (use --force to replace it)", p)
					}
				}
			}
			if err := writeKeyFile(keyFile, skey, 0o600, force); err != nil {
				return err
			}
			if err := writeKeyFile(pubFile, vkey, 0o644, force); err != nil {
				return err
			}
			e.print.Keygen(keyPair{name: name, verifierKey: vkey, keyFile: keyFile, pubFile: pubFile})
			return nil
		}
	},
}

// checkKeyPrefix refuses an --out that names a directory: the key files
// would be the hidden DIR/.key and DIR/.pub.
func checkKeyPrefix(prefix string) error {
	base := filepath.Base(prefix)
	if strings.HasSuffix(prefix, "/") || strings.HasSuffix(prefix, string(filepath.Separator)) || base == "." || base == ".." {
		return usagef("keygen", "--out %q names a directory; give a file prefix such as %s", prefix, filepath.Join(prefix, "anchordb"))
	}
	if st, err := os.Stat(prefix); err == nil && st.IsDir() {
		return usagef("keygen", "--out %q is a directory; give a file prefix such as %s", prefix, filepath.Join(prefix, "anchordb"))
	}
	return nil
}

// writeKeyFile writes key and a newline to path with mode perm, durably.
// Without force an existing file is an error (never overwritten).
func writeKeyFile(path, key string, perm os.FileMode, force bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, perm)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return errs.New(errs.CodeInvalidInput, "%s exists (use --force to replace it)", path)
		}
		return errs.Wrap(errs.CodeWriteFailed, err, "create %s", path)
	}
	// NB: the mode of an existing file (with --force) is not changed by
	// OpenFile, and a secret key must not stay readable.
	err = f.Chmod(perm)
	if err == nil {
		_, err = io.WriteString(f, key+"\n")
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write %s", path)
	}
	return nil
}

// readAllLimited reads r to the end, refusing more than maxInput bytes.
func readAllLimited(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxInput {
		return nil, fmt.Errorf("more than %d bytes", maxInput)
	}
	return b, nil
}
