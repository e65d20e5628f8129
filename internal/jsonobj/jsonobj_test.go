package jsonobj

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// collect reads src's top-level object, decoding nested objects under
// "inner" with Fields too, and returns the keys in the order read.
func collect(src string) ([]string, error) {
	dec := json.NewDecoder(strings.NewReader(src))
	dec.UseNumber()
	var keys []string
	var read func(prefix string) error
	read = func(prefix string) error {
		return Fields(dec, func(key string) error {
			keys = append(keys, prefix+key)
			if key == "inner" {
				return read(prefix + key + ".")
			}
			var v json.RawMessage
			return dec.Decode(&v)
		})
	}
	return keys, read("")
}

func TestFieldsReadsEveryKeyInOrder(t *testing.T) {
	keys, err := collect(`{"b":1,"a":[1,{"x":2}],"inner":{"c":null,"d":"s"},"e":{"f":1}}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(keys, ","), "b,a,inner,inner.c,inner.d,e"; got != want {
		t.Fatalf("keys %s, want %s", got, want)
	}
}

func TestFieldsRefusesDuplicates(t *testing.T) {
	for _, tc := range []struct{ src, key string }{
		{`{"a":1,"a":2}`, "a"},
		{`{"key":1,"k\u0065y":2}`, "key"},          // the same key spelled with an escape
		{`{"inner":{"c":1,"c":1}}`, "c"},           // in a nested object
		{`{"a":{"x":1},"a":{"y":2}}`, "a"},         // values of any kind
		{"{\"\u00e9\":1,\"\\u00e9\":2}", "\u00e9"}, // non-ASCII
	} {
		_, err := collect(tc.src)
		var dup *DuplicateKeyError
		if !errors.As(err, &dup) || dup.Key != tc.key {
			t.Errorf("%s: err %v, want a DuplicateKeyError for %q", tc.src, err, tc.key)
		}
	}
	// The same key in two different objects is no duplicate.
	if _, err := collect(`{"c":1,"inner":{"c":2}}`); err != nil {
		t.Fatalf("a key repeated in a nested object: %v", err)
	}
}

func TestFieldsRefusesNonObjects(t *testing.T) {
	for src, want := range map[string]string{
		`[1]`:          "an array",
		`"x"`:          `the string "x"`,
		`3`:            "the number 3",
		`true`:         "true",
		`null`:         "null",
		`{"inner":[]}`: "an array",
	} {
		_, err := collect(src)
		var no *NotObjectError
		if !errors.As(err, &no) || Describe(no.Got) != want {
			t.Errorf("%s: err %v, want a NotObjectError finding %s", src, err, want)
		}
	}
}

func TestFieldsPassesSyntaxErrorsAndFieldErrors(t *testing.T) {
	for _, src := range []string{``, `{`, `{"a"`, `{"a":1`, `{"a":1,}`, `{1:2}`, `{"a" 1}`} {
		_, err := collect(src)
		var dup *DuplicateKeyError
		var no *NotObjectError
		if err == nil || errors.As(err, &dup) || errors.As(err, &no) {
			t.Errorf("%q: err %v, want the decoder's error", src, err)
		}
	}
	stop := errors.New("stop")
	dec := json.NewDecoder(strings.NewReader(`{"a":1,"b":2}`))
	n := 0
	err := Fields(dec, func(string) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("err %v after %d calls, want field's error after the first", err, n)
	}
}

func TestFieldsStopsAtTheClosingBrace(t *testing.T) {
	dec := json.NewDecoder(strings.NewReader(`{"a":1} {"b":2}`))
	skip := func(string) error { var v any; return dec.Decode(&v) }
	if err := Fields(dec, skip); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := Fields(dec, func(k string) error { keys = append(keys, k); return skip(k) }); err != nil || len(keys) != 1 || keys[0] != "b" {
		t.Fatalf("the second object: keys %v, err %v", keys, err)
	}
}
