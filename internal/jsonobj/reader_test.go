package jsonobj

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
)

// TestReaderRefusals: every refusal is INPUT_001, names the document and
// the field's dotted path, and says what was found.
func TestReaderRefusals(t *testing.T) {
	read := func(doc string) error {
		dec := json.NewDecoder(strings.NewReader(doc))
		dec.UseNumber()
		r := Reader{Dec: dec, What: "retry policy"}
		return r.Object("", func(key string) error {
			var err error
			switch key {
			case "s":
				_, err = r.String(key)
			case "b":
				_, err = r.Bool(key)
			case "i":
				_, err = r.Int(key)
			case "f":
				_, err = r.Float(key)
			case "o":
				err = r.Object("o.", func(key string) error { return r.UnknownField("o." + key) })
			default:
				err = r.UnknownField(key)
			}
			return err
		})
	}
	if err := read(`{"s":"x","b":true,"i":-3,"f":0.5,"o":{}}`); err != nil {
		t.Fatalf("a good document: %v", err)
	}
	for doc, want := range map[string]string{
		`[1]`:                 `retry policy: the policy must be an object, not an array`,
		`{"o":3}`:             `retry policy: "o" must be an object, not the number 3`,
		`{"s":1}`:             `retry policy: "s" must be a string, not the number 1`,
		`{"b":"yes"}`:         `retry policy: "b" must be true or false, not the string "yes"`,
		`{"i":1.5}`:           `retry policy: "i" is 1.5, not an integer in range`,
		`{"i":"1"}`:           `retry policy: "i" must be an integer, not the string "1"`,
		`{"f":1e999}`:         `retry policy: "f" is 1e999, not a number in range`,
		`{"o":{"x":1}}`:       `retry policy: unknown field "o.x"`,
		`{"s":"a","s":"b"}`:   `retry policy: field "s" appears twice`,
		`{"o":{"x":1,"x":2}}`: `retry policy: unknown field "o.x"`,
		`{"s":`:               `retry policy: malformed JSON`,
		`{"z":null}`:          `retry policy: unknown field "z"`,
		`{"o":{},"o":{}}`:     `retry policy: field "o" appears twice`,
		`{"f":true}`:          `retry policy: "f" must be a number, not true`,
	} {
		err := read(doc)
		if errs.CodeOf(err) != errs.CodeInvalidInput || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want INPUT_001 with %q", doc, err, want)
		}
	}
}
