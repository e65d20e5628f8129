// Package jsonobj reads a JSON object one field at a time through
// encoding/json's streaming decoder, refusing a key that appears twice.
//
// encoding/json's Unmarshal lets the last of two equal keys win, also when
// one is spelled with escapes ("k\u0065y" and "key"). Two readers of the
// same document could then disagree about what it says — a policy whose
// policy_ref names one value and whose rules apply another, an import line
// read one way and audited another — so every hand-read object in anchordb
// (the retention policy, a frontier, an import line) goes through Fields.
package jsonobj

import (
	"encoding/json"
	"fmt"
)

// NotObjectError says that the value where an object was expected is
// something else.
type NotObjectError struct {
	// Got is the first token of the value found instead: a json.Delim
	// ('[' for an array), a string, a float64 or json.Number, a bool, or
	// nil for null.
	Got json.Token
}

func (e *NotObjectError) Error() string { return "not a JSON object: found " + Describe(e.Got) }

// DuplicateKeyError says that a key appears twice in one object.
type DuplicateKeyError struct {
	Key string // as decoded, escapes resolved
}

func (e *DuplicateKeyError) Error() string { return fmt.Sprintf("field %q appears twice", e.Key) }

// Fields reads one object from dec, which must be positioned at a value.
// For each key it calls field with dec positioned at the key's value; field
// must consume exactly that value (with dec.Token or dec.Decode), and may
// call Fields again for a nested object. A key seen before in the same
// object stops the read with a *DuplicateKeyError before field is called; a
// value that is not an object, with a *NotObjectError. The decoder's own
// errors (malformed JSON, early EOF) come back as it returns them, and
// field's errors as field returns them. Fields reads nothing past the
// object's closing brace: whether data may follow is the caller's rule.
func Fields(dec *json.Decoder, field func(key string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return &NotObjectError{Got: tok}
	}
	seen := map[string]struct{}{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string) // the decoder only returns strings as keys
		if _, dup := seen[key]; dup {
			return &DuplicateKeyError{Key: key}
		}
		seen[key] = struct{}{}
		if err := field(key); err != nil {
			return err
		}
	}
	_, err = dec.Token() // the closing '}': More said there is no other key
	return err
}

// Describe names a token for a message: "an array", "the string \"x\"",
// "the number 3", "true", "null".
func Describe(tok json.Token) string {
	switch t := tok.(type) {
	case nil:
		return "null"
	case json.Delim: // a value starts with '{' or '['; the decoder refuses the others
		if t == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return fmt.Sprintf("the string %q", t)
	case bool:
		return fmt.Sprintf("%v", t)
	case json.Number:
		return "the number " + t.String()
	case float64:
		return fmt.Sprintf("the number %v", t)
	}
	return fmt.Sprintf("%v", tok)
}
