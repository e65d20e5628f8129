package jsonobj

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/anchordb/anchordb/internal/errs"
)

// Reader reads the fields of one hand-read document (a retention policy, a
// retry policy) from a decoder with UseNumber set. Every refusal is
// INPUT_001 and begins with What ("policy: ", "retry policy: "), naming the
// field by its dotted path, so that two documents read the same way also
// fail the same way.
type Reader struct {
	Dec  *json.Decoder
	What string // the document's name in messages: "policy", "retry policy"
}

// Object reads one JSON object through Fields, calling field for each key
// with the decoder at its value. path is the object's dotted prefix ("" for
// the document, "backoff." for a member).
func (r Reader) Object(path string, field func(key string) error) error {
	err := Fields(r.Dec, field)
	var coded *errs.Error
	var notObject *NotObjectError
	var dup *DuplicateKeyError
	switch {
	case err == nil, errors.As(err, &coded): // field's own error
		return err
	case errors.As(err, &notObject):
		where := "the policy"
		if path != "" {
			where = fmt.Sprintf("%q", path[:len(path)-1])
		}
		return errs.New(errs.CodeInvalidInput, "%s: %s must be an object, not %s", r.What, where, Describe(notObject.Got))
	case errors.As(err, &dup):
		return errs.New(errs.CodeInvalidInput, "%s: field %q appears twice", r.What, path+dup.Key)
	}
	return r.Syntax(err)
}

// String reads a string value.
func (r Reader) String(path string) (string, error) {
	tok, err := r.Dec.Token()
	if err != nil {
		return "", r.Syntax(err)
	}
	s, ok := tok.(string)
	if !ok {
		return "", errs.New(errs.CodeInvalidInput, "%s: %q must be a string, not %s", r.What, path, Describe(tok))
	}
	return s, nil
}

// Bool reads true or false.
func (r Reader) Bool(path string) (bool, error) {
	tok, err := r.Dec.Token()
	if err != nil {
		return false, r.Syntax(err)
	}
	b, ok := tok.(bool)
	if !ok {
		return false, errs.New(errs.CodeInvalidInput, "%s: %q must be true or false, not %s", r.What, path, Describe(tok))
	}
	return b, nil
}

// Int reads an integer that fits an int64.
func (r Reader) Int(path string) (int64, error) {
	tok, err := r.Dec.Token()
	if err != nil {
		return 0, r.Syntax(err)
	}
	n, ok := tok.(json.Number)
	if !ok {
		return 0, errs.New(errs.CodeInvalidInput, "%s: %q must be an integer, not %s", r.What, path, Describe(tok))
	}
	v, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return 0, errs.New(errs.CodeInvalidInput, "%s: %q is %s, not an integer in range", r.What, path, n)
	}
	return v, nil
}

// Float reads a finite number.
func (r Reader) Float(path string) (float64, error) {
	tok, err := r.Dec.Token()
	if err != nil {
		return 0, r.Syntax(err)
	}
	n, ok := tok.(json.Number)
	if !ok {
		return 0, errs.New(errs.CodeInvalidInput, "%s: %q must be a number, not %s", r.What, path, Describe(tok))
	}
	v, err := strconv.ParseFloat(n.String(), 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, errs.New(errs.CodeInvalidInput, "%s: %q is %s, not a number in range", r.What, path, n)
	}
	return v, nil
}

// UnknownField refuses a field the document does not have.
func (r Reader) UnknownField(path string) error {
	return errs.New(errs.CodeInvalidInput, "%s: unknown field %q", r.What, path)
}

// Syntax is the refusal of a document that is not JSON.
func (r Reader) Syntax(err error) error {
	return errs.Wrap(errs.CodeInvalidInput, err, "%s: malformed JSON", r.What)
}
